"""What a real-LLM study is: its file (the package docstring), arms, seeds and settings; a cell's identity (the hash
of what it trains with) and where it trains and is recorded."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from aer_trl.app.resources import recipes_dir

RECIPES = recipes_dir("smollm2_135m_instruct/arithmetic", "aer_bench")  # shipped inside the package


KS = (1, 2, 4, 8, 16)


TIER_NAMES = {"0": "1-digit +", "1": "2-digit +", "2": "1-digit ×", "3": "2-digit × 1-digit"}


RECORD_FILES = ("metrics.jsonl", "run.json", "passk.json", "recipe.yaml")


STUDY_KEYS = {"title", "seeds", "settings", "reference", "figure", "arms", "recipes_dir", "eval_per_tier",
              "eval_samples", "eval_long_tokens", "primary", "notes"}  # fmt: skip


def sizes_text(sizes: list[int]) -> str:
    """Problems per tier as the tables and errors print them: one number when every tier has it, else 16/16/16/64."""
    return "?" if not sizes else str(sizes[0]) if len(set(sizes)) == 1 else "/".join(map(str, sizes))


def parse_flags(flags: list[str]) -> dict:
    """`--key value` / `--key=value` / `--key v1 v2` command-line flags as recipe settings, each value read as YAML
    would read it in a recipe (`0.4` → 0.4, `false` → False, `null` → None; a text that is not a plain YAML scalar
    stays the text)."""

    def value(text: str):
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        if isinstance(parsed, bool) and text.strip().lower() not in ("true", "false"):
            return text  # YAML 1.1's yes/no/on/off are words here (`--save_strategy no` means "no", not False)
        return parsed if parsed is None or isinstance(parsed, (bool, int, float, str)) else text

    settings, i = {}, 0
    while i < len(flags):
        flag = flags[i]
        if not flag.startswith("--") or len(flag) < 3:
            raise ValueError(f"recipe flags: expected --name value, got {flag!r}")
        if "=" in flag:
            key, text = flag[2:].split("=", 1)
            settings[key], i = value(text), i + 1
            continue
        j = i + 1
        while j < len(flags) and not flags[j].startswith("--"):
            j += 1
        values = [value(t) for t in flags[i + 1 : j]]
        if not values:
            raise ValueError(f"recipe flags: {flag} needs a value")
        settings[flag[2:]] = values[0] if len(values) == 1 else values
        i = j
    return settings


@dataclass
class Arm:
    """One arm of a study: a recipe (`<recipes_dir>/<recipe>.yaml`) and settings over it."""

    name: str
    recipe: str
    settings: dict = field(default_factory=dict)


@dataclass
class Deviation:
    """A deviation from a registered study, written before any of its cells (`deviation.yaml` beside the study file,
    which stays as registered): the registered `seeds` whose pairs another study file (`study`) trains, e.g. in
    another precision when the registered one cannot run. The registered study's tables then give its primary
    endpoint over all its seeds with those pairs taken from `study` (the verdict), and beside it, without a verdict,
    the registered pairs alone and the deviation's alone; its queue leaves those seeds to `study`."""

    study: Study
    seeds: list[int]
    source: Path


@dataclass
class Study:
    arms: list[Arm]
    seeds: list[int]
    records: Path  # where the records, tables and base evaluation live
    recipes_dir: Path = RECIPES
    settings: dict = field(default_factory=dict)  # over every arm
    reference: str | None = None
    title: str = "GRPO vs AER on SmolLM2-135M-Instruct"
    figure: Path | None = None
    eval_per_tier: int | list[int] = 16  # held-out problems per tier: one number for all, or one per tier
    eval_samples: int = 16
    eval_long_tokens: int | None = None  # a second held-out sampling at this budget (cut off or never answered)
    primary: dict | None = None  # the pre-registered endpoint: {tier, k} of held-out pass@k, paired to `reference`
    source: Path | None = None  # the study file, if any
    deviation: Deviation | None = None  # `<records>/deviation.yaml`: seeds whose pairs another study file trains

    def tier_sizes(self) -> list[int]:
        """Held-out problems per tier, in tier order."""
        size = self.eval_per_tier
        return list(size) if isinstance(size, list) else [size] * len(TIER_NAMES)

    def merged(self, arm: Arm) -> dict:
        """What the cell trains with: the arm's recipe, the study's settings over it, the arm's over those."""
        path = self.recipes_dir / f"{arm.recipe}.yaml"
        if not path.is_file():
            raise FileNotFoundError(f"arm {arm.name!r}: no recipe {path}")
        return {**(yaml.safe_load(path.read_text()) or {}), **self.settings, **arm.settings}

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


# How a cell computes, not what it trains: options that give the same rollouts and updates for the same seed (same
# tokens, float rounding aside; for `share_prompt_generation` tests/test_shared_generation.py, and 128 of 128 rows
# equal on SmolLM2). Like the thread count, they are left out of a cell's identity, so records made before one was
# switched on stay the same cells.
EXECUTION_KEYS = ("share_prompt_generation",)

# Settings renamed before aer_trl's first release, their old names -> new: a cell's identity hashes the old name, so
# a record trained before a rename is the same cell after it.
RENAMED_KEYS = {
    "aer_telemetry": "aer_measurements",
    "aer_target_entropy": "aer_fixed_target",
    "entropy_target_ratio": "aer_trl_target_ratio",
}


def settings_hash(settings: dict) -> str:
    """A cell's identity: the hash of everything it trains with but `EXECUTION_KEYS`, each renamed key under its old
    name (`RENAMED_KEYS`), so a record trained before a rename is the same cell after it."""
    legacy = {new: old for old, new in RENAMED_KEYS.items()}
    kept = {legacy.get(k, k): v for k, v in settings.items() if k not in EXECUTION_KEYS}
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:8]


def load_study(path: str | Path, deviation: bool = True) -> Study:
    """A study file (module docstring). Unknown keys, arms without a recipe and clashing names are errors naming the
    file and the key."""
    path = Path(path)
    spec = yaml.safe_load(path.read_text()) or {}
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: a study file is a mapping (title, seeds, settings, arms, ...)")
    unknown = set(spec) - STUDY_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; expected some of {sorted(STUDY_KEYS)}")
    arms = []
    for name, arm in (spec.get("arms") or {}).items():
        if not isinstance(arm, dict) or "recipe" not in arm or set(arm) - {"recipe", "settings", "help"}:
            raise ValueError(f"{path}: arm {name!r} must be a mapping with `recipe` and optional `settings`, `help`")
        if "/" in str(name) or str(name).startswith("."):
            raise ValueError(f"{path}: arm name {name!r} must be a plain folder name")
        arms.append(Arm(str(name), str(arm["recipe"]), dict(arm.get("settings") or {})))
    if not arms:
        raise ValueError(f"{path}: no arms")
    seeds = spec.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ValueError(f"{path}: seeds must be a non-empty list of integers, got {seeds!r}")
    reference = spec.get("reference")
    if reference is not None and reference not in {a.name for a in arms}:
        raise ValueError(f"{path}: reference {reference!r} is not one of the arms {[a.name for a in arms]}")
    per_tier = spec.get("eval_per_tier", 16)
    if not (isinstance(per_tier, int) and per_tier > 0) and not (
        isinstance(per_tier, list)
        and len(per_tier) == len(TIER_NAMES)
        and all(isinstance(n, int) and n > 0 for n in per_tier)
    ):
        raise ValueError(
            f"{path}: eval_per_tier must be a positive integer or one per tier {list(TIER_NAMES)}, got {per_tier!r}"
        )
    samples = int(spec.get("eval_samples", 16))
    primary = spec.get("primary")
    if primary is not None:
        if not isinstance(primary, dict) or set(primary) != {"tier", "k"} or str(primary["tier"]) not in TIER_NAMES:
            raise ValueError(f"{path}: primary must be {{tier: one of {list(TIER_NAMES)}, k: ...}}, got {primary!r}")
        if not (isinstance(primary["k"], int) and 1 <= primary["k"] <= samples):
            raise ValueError(
                f"{path}: primary k must be an integer in 1..eval_samples ({samples}), got {primary['k']!r}"
            )
        if reference is None:
            raise ValueError(f"{path}: a primary endpoint is paired to the reference arm; name one (reference: ...)")
        primary = {"tier": str(primary["tier"]), "k": primary["k"]}
    long_tokens = spec.get("eval_long_tokens")
    if long_tokens is not None and not (isinstance(long_tokens, int) and long_tokens > 0):
        raise ValueError(f"{path}: eval_long_tokens must be a positive integer (a token budget), got {long_tokens!r}")
    study = Study(
        arms=arms,
        seeds=seeds,
        records=path.parent,
        recipes_dir=(path.parent / spec["recipes_dir"]).resolve() if spec.get("recipes_dir") else RECIPES,
        settings=dict(spec.get("settings") or {}),
        reference=reference,
        title=str(spec.get("title") or path.parent.name),
        figure=Path(spec["figure"]) if spec.get("figure") else None,
        eval_per_tier=per_tier,
        eval_samples=samples,
        eval_long_tokens=long_tokens,
        primary=primary,
        source=path,
    )
    study.deviation = load_deviation(study) if deviation else None  # a deviation's own study: not followed
    return study


def load_deviation(study: Study) -> Deviation | None:
    """`deviation.yaml` beside a study file (`Deviation`), or None. A file that does not say which seeds, names no
    study file, or whose study trains other arms, another reference or not those seeds is an error naming it."""
    path = study.records / "deviation.yaml"
    if not path.is_file():
        return None
    spec = yaml.safe_load(path.read_text()) or {}
    if not isinstance(spec, dict) or set(spec) != {"study", "seeds"}:
        found = sorted(spec) if isinstance(spec, dict) else type(spec).__name__
        raise ValueError(f"{path}: a deviation is a mapping with exactly `study` and `seeds`, got {found}")
    seeds = spec["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ValueError(f"{path}: seeds must be a non-empty list of integers, got {seeds!r}")
    foreign = sorted(set(seeds) - set(study.seeds))
    if foreign:
        raise ValueError(f"{path}: seeds {foreign} are not seeds of the study it changes ({study.source})")
    other_path = path.parent / str(spec["study"])
    if not other_path.is_file():
        raise FileNotFoundError(f"{path}: study {spec['study']!r}: no file {other_path}")
    other = load_study(other_path, deviation=False)
    if (other.records / "deviation.yaml").is_file():  # itself, or a chain: never followed
        raise ValueError(f"{path}: {other_path} has a deviation of its own; one deviation deep only")
    missing = sorted(set(seeds) - set(other.seeds))
    if missing:
        raise ValueError(f"{path}: seeds {missing} are not among {other_path}'s seeds {other.seeds}")
    if [a.name for a in other.arms] != [a.name for a in study.arms] or other.reference != study.reference:
        raise ValueError(
            f"{path}: {other_path} must train the same arms {[a.name for a in study.arms]} against the same "
            f"reference {study.reference!r} (found {[a.name for a in other.arms]}, {other.reference!r})"
        )
    evaluation = ("eval_per_tier", "eval_samples", "eval_long_tokens")
    changed = [k for k in evaluation if getattr(other, k) != getattr(study, k)]
    if changed:
        raise ValueError(f"{path}: {other_path} evaluates otherwise ({changed}); its pairs would mix two evaluations")
    return Deviation(study=other, seeds=list(seeds), source=path)


def study_from_flags(args) -> Study:
    """`--methods`/`--seeds` and recipe flags: each method an arm with its recipe as it is, records in output_dir."""
    missing = [m for m in args.methods if not (Path(args.recipes_dir) / f"{m}.yaml").is_file()]
    if missing:
        raise ValueError(f"no recipe for {missing} in {args.recipes_dir}")
    return Study(
        arms=[Arm(m, m) for m in args.methods],
        seeds=args.seeds or [0],
        records=Path(args.output_dir),
        recipes_dir=Path(args.recipes_dir),
        settings=parse_flags(args.recipe_overrides),
        figure=Path(args.output_dir) / "figure.png",
        eval_per_tier=args.eval_per_tier,
        eval_samples=args.eval_samples,
    )


def cell_dir(study: Study, arm: Arm, seed: int, output_dir: str | Path) -> Path:
    """Where a cell trains: by recipe and the hash of everything it trains with (not by arm or study name)."""
    return Path(output_dir) / "train" / f"{arm.recipe}-{settings_hash(study.merged(arm))}" / f"seed{seed}"


def record_dir(study: Study, arm: Arm, seed: int) -> Path:
    return study.records / "cells" / arm.name / f"seed{seed}"
