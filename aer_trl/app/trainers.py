"""Which AER trainer a recipe trains with: its `trainer:` key (`grpo`, the default, `rloo` or `async_grpo`) picks the
config class the recipe is parsed into and the trainer `aer-train` / `recipes/train.py` build. A value that is not a
trainer, or a key that only another trainer's config has, is refused before anything is built, naming the field and
what is accepted."""

from __future__ import annotations

import difflib
import importlib
from dataclasses import fields
from pathlib import Path

import yaml

from ..families import FAMILIES, HONOURED_BY, honours

# kind -> (config class, trainer class), as "module:Name" under aer_trl (imported when used): aer_trl.families
TRAINERS = {kind: (f.config, f.trainer) for kind, f in FAMILIES.items()}


def _load(spec: str) -> type:
    module, name = spec.split(":")
    return getattr(importlib.import_module(f"aer_trl.{module}"), name)


def check_kind(kind: str) -> str:
    if kind not in TRAINERS:
        close = difflib.get_close_matches(str(kind), TRAINERS, n=1)
        raise ValueError(
            f"trainer: {kind!r} is not an AER trainer; accepted: {sorted(TRAINERS)}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
        )
    return kind


def config_class_for(kind: str) -> type:
    """The config class of an AER trainer kind (`AERGRPOConfig`, `AERRLOOConfig`)."""
    return _load(TRAINERS[check_kind(kind)][0])


def trainer_class_for(kind: str) -> type:
    """The trainer class of an AER trainer kind (`AERGRPOTrainer`, `AERRLOOTrainer`)."""
    return _load(TRAINERS[check_kind(kind)][1])


def recipe_keys(argv: list[str]) -> dict:
    """The keys a command line sets, its `--config` YAML's first, then its `--key value` flags (the value of a flag
    with none is True)."""
    values: dict = {}
    flags: dict = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            key, eq, value = arg[2:].partition("=")
            if not eq:
                has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
                value = argv[i + 1] if has_value else True
                i += has_value
            if key == "config":
                path = Path(value)
                if path.is_file():
                    values.update(yaml.safe_load(path.read_text()) or {})
            else:
                flags[key] = value
        i += 1
    return {**values, **flags}


def recipe_trainer(argv: list[str]) -> str:
    """The trainer kind a command line asks for: `--trainer`, else its recipe's `trainer:` key, else "grpo"."""
    return check_kind(str(recipe_keys(argv).get("trainer", "grpo")))


def check_recipe_for(argv: list[str], config_class: type, also_known=()) -> None:
    """Refuses a key of a recipe (or flag) that is a field of another AER trainer's config but not of `config_class`
    (RLOO's `normalize_advantages` in a GRPO recipe, GRPO's `loss_type` in an RLOO one), naming it and the trainer
    that has it; the other unknown keys are left to TRL's parser, which refuses them too. `also_known`: the recipe's
    other argument classes (the script's, TRL's `ModelConfig`), whose keys are this recipe's too."""
    own = {f.name for c in (config_class, *also_known) for f in fields(c)}
    for kind in TRAINERS:
        other = config_class_for(kind)
        if other.trainer_kind == config_class.trainer_kind:
            continue
        theirs = {f.name for f in fields(other)} - own
        stray = sorted(k for k in recipe_keys(argv) if k in theirs)
        if stray:
            raise ValueError(
                f"{', '.join(stray)}: a setting of {other.__name__} (trainer: {kind}), not of {config_class.__name__} "
                f"(trainer: {config_class.trainer_kind}), which this recipe trains with: remove it, or set trainer: "
                f"{kind}"
            )


def settings_table() -> str:
    """docs/usage.md's table of AER's settings by trainer, from the one source the configs check against: every field
    of `AERArguments` and of each AER config's own, and what each trainer does with a value set away from its default
    ("acts", or refused at construction and why: `aer_trl.families.HONOURED_BY`, a baseline's `Method.reads`, the
    local worker's limits). tests/test_trainer_fields.py sets each one on each trainer and checks the table."""
    from ..methods import methods

    configs = {kind: config_class_for(kind) for kind in FAMILIES}
    names = list(dict.fromkeys(f.name for cls in configs.values() for f in fields(cls) if is_aer_field(cls, f.name)))
    header = "| setting | " + " | ".join(f"`{f.trainer_name}`" for f in FAMILIES.values()) + " |"
    rows = [header, "|---|" + "---|" * len(FAMILIES)]
    for name in names:
        cells = [setting_status(kind, name, configs[kind], methods()) for kind in FAMILIES]
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def is_aer_field(cls: type, name: str) -> bool:
    """A field AER declares (AERArguments' or the AER config's own), not one inherited from TRL's config alone."""
    from ..config import AERArguments

    trl_fields = {f.name for f in fields(cls.trl_config())}
    return name in {f.name for f in fields(AERArguments)} or name not in trl_fields


def setting_status(kind: str, name: str, config_class: type, registered_methods) -> str:
    """What a trainer of `kind` does with the AER setting `name` set away from its default: "acts", "with method
    ..." (a baseline's setting), "refused" with the trainers that honour it, or "—" where its config has no such
    field."""
    if name not in {f.name for f in fields(config_class)}:
        return "—"
    if not honours(kind, name):
        return "refused (" + " / ".join(f"`{k}`" for k in HONOURED_BY[name][0]) + " only)"
    readers = [n for n, m in registered_methods.items() if name in m.reads]
    if readers:
        return "with method " + " / ".join(f"`{n}`" for n in readers) + ", else refused"
    if name == "aer_max_lag":
        return "acts (AER methods; refused without AER's measurements)"
    return "acts"
