"""The real-LLM study: GRPO against AER (and any other method or setting) on SmolLM2-135M-Instruct, the arithmetic
tiers as 2-shot chat questions, over seeds, with held-out pass@k per tier before and after training
(docs/real_llm.md).

    python -m aer_trl.studies.real_study --seeds 0                  # `make real`: one seed of GRPO and AER + figure
    python -m aer_trl.studies.real_study --seeds 0 1 2 --methods grpo aer clip_cov
    python -m aer_trl.studies.real_study --seeds 0 1 2 --aggregate_only
    ... --max_steps 20                                              # any other flag goes to every recipe
    python -m aer_trl.studies.real_study --study results/real_llm/dose/study.yaml results/real_llm/record/study.yaml
    python -m aer_trl.studies.real_study --study results/real_llm/record/study.yaml --aggregate_only   # no training

A study is a set of *arms* (a name, a recipe of `--recipes_dir`, settings over it) trained on the same seeds. With
`--methods`, each method is an arm with its recipe as it is (plus the command's flags). A study file (YAML) says
everything at once and keeps the study's records beside it (with `--study`, `--seeds` and `--methods` pick which of
its cells this queue trains, by seed and arm name; its tables keep every seed and arm):

    title: "Fixed α: what the entropy bonus does to the real model"
    seeds: [0, 1, 2]
    settings: {max_steps: 30}                    # over every arm's recipe
    recipes_dir: ../recipes                      # optional, relative to this file: the studies' own frozen recipes
    reference: grpo                              # paired differences against this arm
    figure: docs/img/real_llm_dose.png           # optional
    arms:
      grpo: {recipe: grpo}
      fixed-0.4: {recipe: aer, settings: {aer_adaptive: false, aer_alpha_init: 0.4, aer_alpha_max: null}}

Resumable at every level. A cell (arm × seed) trains in its own process under
`<output_dir>/train/<recipe>-<hash of its settings>/seed<k>/` (the recipe merged with the settings is written there
as `recipe.yaml` and is what trains; two arms of two studies with the same settings share one cell); a killed run
resumes from its newest complete checkpoint; a finished run (`run.json`, written last) is never rerun, and its
checkpoints are deleted (the final model stays). Held-out sampling goes through the evaluation harness into
`<output_dir>/eval/` (fingerprinted store: a killed evaluation resumes exactly). Every model, the untrained one
included, is evaluated on the same held-out problems with the same sampling seeds.

The records: once a cell is trained and evaluated, its compact record (`metrics.jsonl`, `run.json`, `passk.json`,
`recipe.yaml`) is written to `<records>/cells/<arm>/seed<k>/` (`<records>`: the study file's folder, else
`--output_dir`), with the untrained model's `base_passk.json`, and the tables are made from the records alone:
`study.md` (95% Student-t intervals over seeds, differences paired by seed), `study.json` (per cell: arm, seed,
the training summary, `target_distance`, `no_answer_share`, held-out pass@k) and the figure. A cell with a record is
never trained again, on any machine; a record made with other settings than the study now gives is an error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..analysis import tokens_table
from ..io import atomic_write
from ..metrics import read_metrics
from ..prompts import prompt_settings
from ..resources import recipes_dir
from ..stats import interval

RECIPES = recipes_dir("smollm2_135m_instruct/arithmetic")  # shipped inside the package
KS = (1, 2, 4, 8, 16)
TIER_NAMES = {"0": "1-digit +", "1": "2-digit +", "2": "1-digit ×", "3": "2-digit × 1-digit"}
RECORD_FILES = ("metrics.jsonl", "run.json", "passk.json", "recipe.yaml")
STUDY_KEYS = {"title", "seeds", "settings", "reference", "figure", "arms", "recipes_dir", "eval_per_tier",
              "eval_samples", "notes"}  # fmt: skip


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
class Study:
    arms: list[Arm]
    seeds: list[int]
    records: Path  # where the records, tables and base evaluation live
    recipes_dir: Path = RECIPES
    settings: dict = field(default_factory=dict)  # over every arm
    reference: str | None = None
    title: str = "GRPO vs AER on SmolLM2-135M-Instruct"
    figure: Path | None = None
    eval_per_tier: int = 16
    eval_samples: int = 16
    source: Path | None = None  # the study file, if any

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


def settings_hash(settings: dict) -> str:
    """A cell's identity: the hash of everything it trains with but `EXECUTION_KEYS`."""
    kept = {k: v for k, v in settings.items() if k not in EXECUTION_KEYS}
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:8]


def load_study(path: str | Path) -> Study:
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
    return Study(
        arms=arms,
        seeds=seeds,
        records=path.parent,
        recipes_dir=(path.parent / spec["recipes_dir"]).resolve() if spec.get("recipes_dir") else RECIPES,
        settings=dict(spec.get("settings") or {}),
        reference=reference,
        title=str(spec.get("title") or path.parent.name),
        figure=Path(spec["figure"]) if spec.get("figure") else None,
        eval_per_tier=int(spec.get("eval_per_tier", 16)),
        eval_samples=int(spec.get("eval_samples", 16)),
        source=path,
    )


def cell_dir(study: Study, arm: Arm, seed: int, output_dir: str | Path) -> Path:
    """Where a cell trains: by recipe and the hash of everything it trains with (not by arm or study name)."""
    return Path(output_dir) / "train" / f"{arm.recipe}-{settings_hash(study.merged(arm))}" / f"seed{seed}"


def record_dir(study: Study, arm: Arm, seed: int) -> Path:
    return study.records / "cells" / arm.name / f"seed{seed}"


def train_cell(study: Study, arm: Arm, seed: int, output_dir: str | Path) -> dict:
    """Train one cell in its own process unless it is finished; resume a killed one from its newest checkpoint; drop
    the checkpoints of a finished one."""
    folder = cell_dir(study, arm, seed, output_dir)
    done = folder / "run.json"
    if done.exists():
        return json.loads(done.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    settings = study.merged(arm)
    atomic_write(folder / "recipe.yaml", yaml.safe_dump(settings, sort_keys=True, allow_unicode=True))
    resume = any((p / "trainer_state.json").is_file() for p in folder.glob("checkpoint-*"))
    command = [
        sys.executable,
        "-m",
        "aer_trl.run",  # the training command line, as `aer-train`
        "--config",
        str(folder / "recipe.yaml"),
        "--output_dir",
        str(folder),
        "--seed",
        str(seed),
        "--disable_tqdm",
        "true",
        *(["--resume_from_checkpoint", "latest"] if resume else []),
    ]
    start = time.perf_counter()
    with open(folder / "train.log", "a") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    if code != 0:
        raise RuntimeError(f"training {arm.name} seed {seed} failed (exit {code}); see {folder / 'train.log'}")
    run = {
        "arm": arm.name,
        "recipe": arm.recipe,
        "seed": seed,
        "settings_hash": settings_hash(settings),
        "seconds": time.perf_counter() - start,
        "resumed": resume,
    }
    atomic_write(done, json.dumps(run, indent=2))
    # A finished cell is never resumed: its checkpoints (weights plus optimizer state, ~2 GB for SmolLM2) only fill
    # the disk. The final model stays in the folder for the evaluation.
    for checkpoint in folder.glob("checkpoint-*"):
        shutil.rmtree(checkpoint, ignore_errors=True)
    return run


def eval_arguments(study: Study, arm: Arm, models: list[str], output_dir: str | Path):
    """Held-out sampling in the format and token budget the arm was trained with (its merged recipe, parsed as the
    training command parses it: a `max_completion_length` or prompt setting of the study reaches the evaluation)."""
    from ..evaluation import EvalArguments
    from ..training import parse_recipe

    eval_dir = Path(output_dir) / "eval"
    eval_dir.mkdir(parents=True, exist_ok=True)
    recipe = eval_dir / f".recipe-{arm.recipe}-{settings_hash(study.merged(arm))}.yaml"
    atomic_write(recipe, yaml.safe_dump(study.merged(arm), sort_keys=True, allow_unicode=True))
    script_args, training_args, _ = parse_recipe(["--config", str(recipe), "--output_dir", str(eval_dir)])
    return EvalArguments(
        models=models,
        benchmarks=["arithmetic"],
        output_dir=str(eval_dir),
        num_samples=study.eval_samples,
        k_list=[k for k in KS if k <= study.eval_samples],
        max_new_tokens=training_args.max_completion_length,
        temperature=1.0,
        seed=0,
        batch_size=8,
        arithmetic_test_per_tier=study.eval_per_tier,
        **prompt_settings(script_args),
    )


def held_out(study: Study, arm: Arm, model: str, output_dir: str | Path) -> dict:
    """pass@k overall and per tier of one model on the held-out split (resumable through the harness's store)."""
    from ..evaluation import evaluate

    metrics = evaluate(eval_arguments(study, arm, [model], output_dir))
    return next(iter(metrics.values()))["arithmetic"]


def no_answer_share(passk: dict) -> float:
    """The share of held-out completions with no parseable final answer: no marker (`unmarked`), or a marker whose
    content does not parse (`unparsed`), out of every sample scored."""
    stats = passk.get("reward_stats") or {}
    total = passk["num_problems"] * passk["num_samples"]
    return (stats.get("unmarked", 0) + stats.get("unparsed", 0)) / total


def export_record(study: Study, arm: Arm, seed: int, folder: Path, passk: dict) -> Path:
    """The cell's compact record: what the tables are made from, on any machine (no weights, no checkpoints)."""
    out = record_dir(study, arm, seed)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.jsonl", "recipe.yaml"):
        shutil.copyfile(folder / name, out / name)
    atomic_write(out / "passk.json", json.dumps(passk, sort_keys=True))
    atomic_write(out / "run.json", (folder / "run.json").read_text())  # last: a record without it is unfinished
    return out


def read_record(study: Study, arm: Arm, seed: int) -> dict | None:
    """A cell's record, or None when there is none. A record made with other settings is an error: a changed study
    must name a new arm (or the old record be deleted), never mix two settings under one name."""
    out = record_dir(study, arm, seed)
    if not (out / "run.json").is_file():
        return None
    run = json.loads((out / "run.json").read_text())
    expected = settings_hash(study.merged(arm))
    if run.get("settings_hash") != expected:
        raise ValueError(
            f"{out}: the record was made with other settings (hash {run.get('settings_hash')}, the study now gives "
            f"{expected}; compare {out / 'recipe.yaml'}): name a new arm for new settings, or delete the record"
        )
    missing = [n for n in RECORD_FILES if not (out / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{out}: the record lacks {missing}")
    return {
        "run": run,
        "metrics": read_metrics(out / "metrics.jsonl"),
        "passk": json.loads((out / "passk.json").read_text()),
    }


def training_summary(records: list[dict]) -> dict:
    steps = [r for r in records if "train_runtime" not in r and r.get("reward") is not None]

    def series(key):
        return [(r["step"], r[key]) for r in steps if r.get(key) is not None]

    def mean_of(key, part):
        values = [v for _, v in series(key)]
        return statistics.fmean(part(values)) if values and part(values) else float("nan")

    first, last = (lambda v: v[:5]), (lambda v: v[-5:])
    # the entropy bonus's coefficient: AER's α, or TRL's own `entropy_coef` where TRL's bonus trains (it logs the
    # coefficient only then; AER's α is 0 in those runs)
    coefficient = [(r["step"], r.get("entropy_coef") or r.get("aer/alpha")) for r in steps]
    coefficient = [(s, v) for s, v in coefficient if v is not None]
    entropy = series("aer/entropy")
    targets = [r.get("aer/target_entropy") for r in steps]
    target = next((t for t in reversed(targets) if t), float("nan"))
    h0 = next((r["aer/initial_entropy"] for r in steps if r.get("aer/initial_entropy")), float("nan"))
    second = [(s, h) for s, h in entropy[len(entropy) // 2 :]]
    distance = [abs(h - target) / target for _, h in second] if target == target and target else []
    # the same statistic around the run's own median: what a controller that put the median exactly at H* would
    # score, given how much the entropy of one rollout batch moves from batch to batch
    centre = statistics.median(h for _, h in second) if second else float("nan")
    spread = [abs(h - centre) / centre for _, h in second] if centre == centre and centre else []
    hard = [
        (s, (r.get("aer/bucket/unsolved/share") or 0) + (r.get("aer/bucket/hard/share") or 0))
        for s, r in ((r["step"], r) for r in steps)
    ]
    return {
        "reward_first": mean_of("reward", first),
        "reward_last": mean_of("reward", last),
        "entropy_first": mean_of("aer/entropy", first),
        "entropy_last": mean_of("aer/entropy", last),
        "h0": h0,
        "target": target,
        "entropy_ratio": mean_of("aer/entropy", last) / h0 if h0 == h0 and h0 else float("nan"),
        "target_distance": statistics.median(distance) if distance else float("nan"),
        "entropy_spread": statistics.median(spread) if spread else float("nan"),
        "alpha_last": statistics.fmean(last([v for _, v in coefficient])) if coefficient else float("nan"),
        "length_last": mean_of("completions/mean_length", last),
        "curves": {
            "reward": series("reward"),
            "entropy": entropy,
            "alpha": coefficient,
            "length": series("completions/mean_length"),
            "hard_share": hard,
            **{f"tier{t}": series(f"lab/accuracy_tier{t}") for t in TIER_NAMES},
        },
    }


COLUMNS = [
    ("reward, first 5 steps", lambda c: c["reward_first"]),
    ("reward, last 5 steps", lambda c: c["reward_last"]),
    ("H0", lambda c: c["h0"]),
    ("H, last 5 steps", lambda c: c["entropy_last"]),
    ("H last / H0", lambda c: c["entropy_ratio"]),
    ("median \\|H−H*\\|/H* (2nd half)", lambda c: c["target_distance"]),
    ("its floor: median \\|H−med H\\|/med H", lambda c: c["entropy_spread"]),
    ("α, last 5 steps", lambda c: c["alpha_last"]),
    ("length, last 5", lambda c: c["length_last"]),
]


def passk_columns(ks) -> list:
    cols = [(f"held-out pass@{k}", lambda c, k=k: 100 * c["passk"][f"pass@{k}"]) for k in ks]
    cols += [
        (f"{TIER_NAMES[t]} pass@1", lambda c, t=t: 100 * c["passk"]["per_group"][t]["pass@1"]) for t in TIER_NAMES
    ]
    cols.append(("no answer (%)", lambda c: 100 * no_answer_share(c["passk"])))
    return cols


def _fmt(mean: float, half: float) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.3g}" if math.isnan(half) else f"{mean:.3g} ± {half:.2g}"


def aggregate(cells: list[dict], base: dict | None, study: Study, figure: Path | None = None) -> dict:
    """Tables (`study.md`, `study.json` in the records folder) and the figure, from the cells' records alone."""
    arms = list(dict.fromkeys(c["method"] for c in cells))
    ks = [k for k in KS if k <= study.eval_samples]
    train_cols, eval_cols = COLUMNS, passk_columns(ks)
    rows = {}
    for m in arms:
        mine = [c for c in cells if c["method"] == m]
        rows[m] = {"seeds": sorted(c["seed"] for c in mine)}
        rows[m].update({name: interval([f(c) for c in mine]) for name, f in train_cols + eval_cols})
    paired = {}
    reference = study.reference or ("grpo" if "grpo" in arms else arms[0])
    ref = {c["seed"]: c for c in cells if c["method"] == reference}
    compared = eval_cols[:1] + eval_cols[len(ks) - 1 : len(ks)] + eval_cols[-1:] + train_cols[3:6]
    top = max(ks)
    tier_cols = [
        (f"{TIER_NAMES[t]} pass@{k}", lambda c, t=t, k=k: 100 * c["passk"]["per_group"][t].get(f"pass@{k}", math.nan))
        for t in TIER_NAMES
        for k in (1, top)
    ]
    for m in arms:
        if m == reference or not ref:
            continue
        mine = {c["seed"]: c for c in cells if c["method"] == m and c["seed"] in ref}
        paired[m] = {
            name: interval([f(c) - f(ref[s]) for s, c in sorted(mine.items())]) for name, f in compared + tier_cols
        }
        paired[m]["seeds"] = sorted(mine)
    lines = [f"### {study.title}", ""]
    lines += ["| arm | seeds | " + " | ".join(n for n, _ in train_cols) + " |", "|---" * (len(train_cols) + 2) + "|"]
    for m, row in rows.items():
        lines.append(f"| {m} | {len(row['seeds'])} | " + " | ".join(_fmt(*row[n]) for n, _ in train_cols) + " |")
    lines += [
        "",
        "| model | seeds | " + " | ".join(n for n, _ in eval_cols) + " |",
        "|---" * (len(eval_cols) + 2) + "|",
    ]
    if base is not None:
        base_cell = {"passk": base}
        lines.append("| untrained | – | " + " | ".join(f"{f(base_cell):.3g}" for _, f in eval_cols) + " |")
    for m, row in rows.items():
        lines.append(f"| {m} | {len(row['seeds'])} | " + " | ".join(_fmt(*row[n]) for n, _ in eval_cols) + " |")
    blocks = [
        (f"difference to {reference}, paired by seed", compared),
        (f"per tier, difference to {reference}", tier_cols),
    ]
    for title, cols in blocks if paired else []:
        names = [n for n, _ in cols]
        lines += ["", f"| {title} | seeds | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
        for m, diffs in paired.items():
            lines.append(
                f"| {m} − {reference} | {len(diffs['seeds'])} | " + " | ".join(_fmt(*diffs[n]) for n in names) + " |"
            )
    settings = {a.name: {"recipe": a.recipe, **study.settings, **a.settings} for a in study.arms}
    lines += [
        "",
        f"Mean over seeds ± half-width of the 95% Student-t interval. Training columns from metrics.jsonl (reward = "
        f"accuracy; H = token-weighted policy entropy in nats; α = AER's global coefficient, or TRL's entropy_coef "
        f"for a method with TRL's own entropy bonus; median |H−H*|/H* over the second half of training; its floor: "
        f"the same statistic around the run's own median entropy, i.e. what a controller holding the median exactly "
        f"at H* would score given the batch-to-batch spread). Held-out: "
        f"{study.eval_per_tier} problems per tier, n = {study.eval_samples} samples each, temperature 1, the "
        "training prompt format, the same sampling seeds for every model; no answer "
        "= completions with no final-answer marker or one that does not parse. Arms (recipe and settings over it): "
        + "; ".join(
            f"`{name}`: {s['recipe']}"
            + (f" {json.dumps({k: v for k, v in s.items() if k != 'recipe'})}" if len(s) > 1 else "")
            for name, s in settings.items()
        )
        + ".",
    ]
    table = "\n".join(lines) + "\n"
    out = study.records
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "study.md", table)
    summary = {
        "title": study.title,
        "seeds": study.seeds,
        "reference": reference,
        "arms": settings,
        "cells": cells,
        "base": None if base is None else {**base, "no_answer_share": no_answer_share(base)},
        "rows": rows,
        "paired": paired,
    }
    atomic_write(out / "study.json", json.dumps(summary, indent=1, sort_keys=True, allow_nan=True) + "\n")
    if figure is not None:
        figure.parent.mkdir(parents=True, exist_ok=True)
        plot(cells, base, figure, ks, study.title)
    return rows


def seed_count(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def tier_curve(curves: list[dict[int, float]], window: int = 5) -> tuple[list[int], list[float]]:
    """One tier's training accuracy over steps, mean over seeds. A step's few prompts rarely cover every tier, so
    each seed's value at step s is the mean of its own observations in steps s-window+1..s, and a step is drawn
    where every seed has one (a seed that skips a tier at some step does not end the curve there)."""
    if not curves:
        return [], []
    steps, values = [], []
    for s in sorted(set().union(*curves)):
        per_seed = [[v for step, v in cv.items() if s - window < step <= s] for cv in curves]
        if all(per_seed):
            steps.append(s)
            values.append(statistics.fmean(statistics.fmean(v) for v in per_seed))
    return steps, values


def plot(cells: list[dict], base: dict | None, path: Path, ks, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(c["method"] for c in cells))
    color = {m: f"C{i}" for i, m in enumerate(methods)}
    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    panels = [
        (axes[0, 0], "reward", "training reward (accuracy)"),
        (axes[0, 1], "entropy", "policy entropy (nats/token)"),
        (axes[0, 2], "alpha", "entropy coefficient: AER's α (TRL's entropy_coef)"),
        (axes[0, 3], "hard_share", "share of completions in groups with g < ρ"),
        (axes[1, 0], "length", "mean completion length (tokens)"),
    ]
    for ax, key, panel_title in panels:
        for m in methods:
            curves = [dict(c["curves"][key]) for c in cells if c["method"] == m and c["curves"][key]]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(cv) for cv in curves)))
            values = [[cv[s] for cv in curves] for s in steps]
            ax.plot(
                steps, [statistics.fmean(v) for v in values], color=color[m], label=f"{m} ({seed_count(len(curves))})"
            )
            ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], color=color[m], alpha=0.15)
        ax.set_title(panel_title)
        ax.set_xlabel("step")
    targets = {}
    for c in cells:
        if c["target"] == c["target"]:
            targets.setdefault(round(c["target"] / c["h0"], 3) if c["h0"] else None, []).append(c["target"])
    for tau, values in targets.items():  # one dashed line per τ, at the mean of the seeds' targets
        axes[0, 1].axhline(statistics.fmean(values), color="k", ls="--", lw=1, label=f"H* = {tau}·H0 (mean)")
    for ax in (axes[0, 0], axes[0, 1], axes[0, 2]):
        ax.legend(fontsize=8)
    ax = axes[1, 1]
    if base is not None:
        ax.plot(ks, [100 * base[f"pass@{k}"] for k in ks], marker="o", color="gray", label="untrained")
    for m in methods:
        mine = [c for c in cells if c["method"] == m and c.get("passk")]
        if mine:
            stats = [interval([100 * c["passk"][f"pass@{k}"] for c in mine]) for k in ks]
            ax.errorbar(
                ks,
                [s[0] for s in stats],
                yerr=[0 if math.isnan(s[1]) else s[1] for s in stats],
                marker="o",
                capsize=3,
                color=color[m],
                label=m,
            )
    ax.set_xscale("log", base=2)
    ax.set_title("held-out pass@k (%), 95% interval over seeds")
    ax.set_xlabel("k")
    ax.legend(fontsize=8)
    ax = axes[1, 2]
    names = (["untrained"] if base is not None else []) + methods
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        if name == "untrained":
            means, errs, c = [100 * base["per_group"][t]["pass@1"] for t in TIER_NAMES], None, "gray"
        else:
            mine = [cell for cell in cells if cell["method"] == name and cell.get("passk")]
            if not mine:
                continue
            stats = [interval([100 * cell["passk"]["per_group"][t]["pass@1"] for cell in mine]) for t in TIER_NAMES]
            means, errs = [s[0] for s in stats], [0 if math.isnan(s[1]) else s[1] for s in stats]
            c = color[name]
        ax.bar(
            [j + i * width for j in range(len(TIER_NAMES))], means, width, yerr=errs, capsize=3, color=c, label=name
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(TIER_NAMES))], list(TIER_NAMES.values()), fontsize=8)
    ax.set_title("held-out pass@1 per tier (%)")
    ax.legend(fontsize=8)
    ax = axes[1, 3]
    styles = dict(zip(TIER_NAMES, ["-", "--", ":", "-."]))
    for m in methods:
        for t, style in styles.items():
            curves = [dict(c["curves"][f"tier{t}"]) for c in cells if c["method"] == m and c["curves"][f"tier{t}"]]
            steps, values = tier_curve(curves)
            ax.plot(steps, values, color=color[m], ls=style)
    ax.set_title("training accuracy per tier (each seed's last 5 steps)")
    ax.set_xlabel("step")
    from matplotlib.lines import Line2D

    # colour = arm, line style = tier: two short legends instead of one entry per (arm, tier)
    arms = ax.legend([Line2D([], [], color=color[m]) for m in methods], methods, fontsize=6, loc="lower left")
    ax.add_artist(arms)
    tiers = [Line2D([], [], color="k", ls=st) for st in styles.values()]
    ax.legend(tiers, list(TIER_NAMES.values()), fontsize=6, loc="lower right")
    fig.suptitle(
        f"{title or 'SmolLM2-135M-Instruct'}: arithmetic tiers, 2-shot chat prompts; mean over seeds, min–max band"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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


def cell_summary(arm: Arm, seed: int, record: dict) -> dict:
    return {
        "method": arm.name,
        "recipe": arm.recipe,
        "seed": seed,
        **training_summary(record["metrics"]),
        "no_answer_share": no_answer_share(record["passk"]),
        "passk": record["passk"],
    }


def claim_cell(study: Study, arm: Arm, seed: int) -> Path | None:
    """Claim a cell for this process: `<record dir>/.claim` holds the claiming process's id, created exclusively.
    None when a live process holds it (another queue on this machine is training the cell); a claim whose process
    is gone (killed) is taken over. Several queues can then share one list of studies, one cell each at a time."""
    out = record_dir(study, arm, seed)
    out.mkdir(parents=True, exist_ok=True)
    claim = out / ".claim"
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = int(claim.read_text().strip() or 0)
            except (OSError, ValueError):
                holder = 0
            if holder and holder != os.getpid() and _alive(holder):
                return None
            claim.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return claim
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def share_record(studies: list[Study], study: Study, arm: Arm, seed: int) -> Path | None:
    """Copy another study's record of the same cell (the same merged settings and seed) to this arm: one trained
    cell, recorded in every study that names it. Its `run.json` says where it came from."""
    wanted = settings_hash(study.merged(arm))
    for other in studies:
        for candidate in other.arms:
            source = record_dir(other, candidate, seed)
            if source == record_dir(study, arm, seed) or not (source / "run.json").is_file():
                continue
            if settings_hash(other.merged(candidate)) != wanted:
                continue
            out = record_dir(study, arm, seed)
            out.mkdir(parents=True, exist_ok=True)
            for name in (n for n in RECORD_FILES if n != "run.json"):
                shutil.copyfile(source / name, out / name)
            run = json.loads((source / "run.json").read_text())
            run.update(arm=arm.name, copied_from=str(source.relative_to(other.records.parent)))
            atomic_write(out / "run.json", json.dumps(run, indent=2))  # last: a record without it is unfinished
            print(f"{study.title} / {arm.name} seed {seed}: the same cell as {source}, record copied", flush=True)
            return out
    return None


def run_queue(
    studies: list[Study],
    output_dir: str | Path,
    evaluate_models: bool = True,
    seeds: list[int] | None = None,
    arms: list[str] | None = None,
) -> None:
    """Every missing cell of every study, seed-major across the studies (an interrupted queue leaves every arm at
    about the same number of seeds), each trained, evaluated and recorded before the next starts. A cell another
    live queue has claimed (`claim_cell`) is left to it, so two queues (e.g. one thread each on two cores, each with
    its own --output_dir) can work through the same studies. `seeds` / `arms` (names): only those cells of the
    studies are trained (the studies, and so their tables, keep every seed and arm; a record another study
    holds is copied for any arm)."""
    if arms is not None:
        known = {arm.name for study in studies for arm in study.arms}
        unknown = [name for name in arms if name not in known]
        if unknown:
            raise ValueError(f"arms {unknown} are in none of the studies; their arms: {sorted(known)}")
    base_done: dict[Path, dict] = {}
    for seed in sorted({s for study in studies for s in study.seeds}):
        if seeds is not None and seed not in seeds:
            continue
        for study in studies:
            if seed not in study.seeds:
                continue
            for arm in study.arms:
                # a record another study holds is copied whatever `arms` says (copying trains nothing: a queue
                # for the rivals alone still gets the shared reference's cells, and so its paired tables)
                if read_record(study, arm, seed) is not None or share_record(studies, study, arm, seed):
                    continue
                if arms is not None and arm.name not in arms:
                    continue
                claim = claim_cell(study, arm, seed)
                if claim is None:
                    print(f"{study.title} / {arm.name} seed {seed}: another queue has it", flush=True)
                    continue
                try:
                    _run_cell(study, arm, seed, output_dir, evaluate_models, base_done)
                finally:
                    claim.unlink(missing_ok=True)


def _run_cell(study: Study, arm: Arm, seed: int, output_dir, evaluate_models: bool, base_done: dict) -> None:
    """Train, evaluate and record one claimed cell (the untrained model's evaluation first, once per study)."""
    if evaluate_models and not (study.records / "base_passk.json").is_file():
        if study.records not in base_done:
            from ..gguf import convert_gguf

            base_done[study.records] = held_out(study, study.arms[0], str(convert_gguf()), output_dir)
            print(f"untrained: held-out pass@1 {100 * base_done[study.records]['pass@1']:.1f}%", flush=True)
        study.records.mkdir(parents=True, exist_ok=True)
        atomic_write(study.records / "base_passk.json", json.dumps(base_done[study.records], sort_keys=True))
    run = train_cell(study, arm, seed, output_dir)
    print(f"{study.title} / {arm.name} seed {seed}: trained ({run['seconds']:.0f} s)", flush=True)
    if not evaluate_models:
        return
    folder = cell_dir(study, arm, seed, output_dir)
    passk = held_out(study, arm, str(folder), output_dir)
    export_record(study, arm, seed, folder, passk)
    print(f"{arm.name} seed {seed}: held-out pass@1 {100 * passk['pass@1']:.1f}%, recorded", flush=True)


def tables(study: Study) -> dict:
    """The study's tables and figure from its records alone; {} when no cell has a record yet."""
    cells = []
    for seed in study.seeds:
        for arm in study.arms:
            record = read_record(study, arm, seed)
            if record is not None:
                cells.append(cell_summary(arm, seed, record))
    if not cells:
        return {}
    base_path = study.records / "base_passk.json"
    base = json.loads(base_path.read_text()) if base_path.is_file() else None
    for path in sorted(study.records.glob("tokens_seed*.json")):  # studies.tokens' records: which tokens carry H
        order = ["untrained", *(arm.name for arm in study.arms)]  # the study's order (the JSON's keys are sorted)
        atomic_write(study.records / f"{path.stem}.md", tokens_table(json.loads(path.read_text()), order))
    return aggregate(cells, base, study, study.figure)


def replace_block(docs: Path, name: str, body: str) -> bool:
    """Put `body` between `<!-- study:<name> -->` and `<!-- /study:<name> -->` in `docs`; False when the page has no
    such markers."""
    start, end = f"<!-- study:{name} -->", f"<!-- /study:{name} -->"
    text = docs.read_text()
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    atomic_write(docs, f"{head}{start}\n{body}{end}{tail}")
    return True


def update_docs(docs: Path, study: Study) -> bool:
    """The study's `study.md` (and its token tables) in its `<!-- study:<folder> -->` block of `docs`."""
    body = (study.records / "study.md").read_text()
    for path in sorted(study.records.glob("tokens_seed*.md")):
        body += "\n" + path.read_text()
    return replace_block(docs, study.records.name, body)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--study", nargs="+", default=None, help="study files (YAML): their cells in one queue")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="without --study: the recipes to compare (default grpo aer); with --study: only these arms are trained",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=None,
        help="without --study: the seeds (default 0); with --study: only these of the study's seeds are trained",
    )
    parser.add_argument("--output_dir", default=None, help="where cells train (default runs/real, or runs/real_llm)")
    parser.add_argument("--recipes_dir", default=str(RECIPES), help="one <method>.yaml per method")
    parser.add_argument("--eval_per_tier", type=int, default=16, help="held-out problems per tier")
    parser.add_argument("--eval_samples", type=int, default=16, help="samples per held-out problem (n of pass@k)")
    parser.add_argument("--no_eval", action="store_true", help="train only (evaluate later)")
    parser.add_argument("--aggregate_only", action="store_true", help="tables and figure from the records alone")
    parser.add_argument("--docs", default=None, help="a page whose <!-- study:<folder> --> blocks get the tables")
    args, args.recipe_overrides = parser.parse_known_args(argv)
    clash = [a for a in args.recipe_overrides if a.split("=")[0] in ("--output_dir", "--seed", "--config")]
    if clash:
        parser.error(f"{clash[0]} is set per cell by this script")
    try:
        if args.study:
            if args.recipe_overrides:
                parser.error(f"with --study, settings go in the study file, not {args.recipe_overrides[0]}")
            studies = [load_study(p) for p in args.study]
            queue_seeds, queue_arms = args.seeds, args.methods
            foreign = [s for s in (args.seeds or []) if not any(s in study.seeds for study in studies)]
            if foreign:
                parser.error(f"--seeds {foreign} are in none of the studies' seeds")
            known = {arm.name for study in studies for arm in study.arms}
            if args.methods and set(args.methods) - known:
                unknown = sorted(set(args.methods) - known)
                parser.error(f"--methods {unknown} are no arm of the studies: {sorted(known)}")
        else:
            args.output_dir = args.output_dir or "runs/real"
            args.methods = args.methods or ["grpo", "aer"]
            studies, queue_seeds, queue_arms = [study_from_flags(args)], None, None
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    output_dir = Path(args.output_dir or "runs/real_llm")
    if not args.aggregate_only:
        output_dir.mkdir(parents=True, exist_ok=True)
        run_queue(studies, output_dir, evaluate_models=not args.no_eval, seeds=queue_seeds, arms=queue_arms)
    results = {}
    for study in studies:
        rows = tables(study)
        if not rows:
            if args.aggregate_only and not args.study:
                raise SystemExit(f"no recorded cell under {study.records / 'cells'} for this study")
            print(f"{study.title}: no recorded cell yet under {study.records / 'cells'}", flush=True)
            continue
        print((study.records / "study.md").read_text(), flush=True)
        if args.docs:
            update_docs(Path(args.docs), study)
        results[study.title] = rows
    return results if args.study else next(iter(results.values()), {})


def cli() -> None:
    """The console script `aer-real-study`: main's return value is for Python callers, not an exit status."""
    main()


if __name__ == "__main__":
    cli()
