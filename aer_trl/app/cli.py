"""What the two command lines (`aer-train`, `aer-evaluate`) share: the first lines of `--help`, `--list`, a recipe
named by `--config`, a key no setting has (with the closest one named), and errors a user reads: one short
paragraph naming the field or file, what was expected and what to do, without a traceback (`AER_TRACEBACK=1`
shows it). Nothing here imports TRL: `--list` answers at once."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable
from dataclasses import fields

from .resources import list_recipes, resolve_recipe

# what a user's mistake raises (a wrong value, file or name, a missing extra); anything else is a bug: traceback
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, ImportError, KeyError)
TRACEBACK_ENV = "AER_TRACEBACK"

USAGE = {
    "aer-train": """usage: aer-train --config NAME|PATH [--KEY VALUE ...]
       accelerate launch -m aer_trl.app.run --config NAME|PATH [--KEY VALUE ...]   (several processes, DeepSpeed)

Adaptive Entropy Regularization on TRL's GRPO, RLOO or asynchronous GRPO trainer.

example (a CPU, a few minutes):
  aer-train --config smollm2_135m_instruct/gsm8k/aer --max_steps 2 --output_dir runs/try

  --config NAME|PATH  a shipped recipe by name (--list), or a YAML file of your own; every setting can also be
                      given as a flag (--KEY VALUE), which overrides the recipe
  --list              the shipped training recipes, CPU ones first
  --help-all          every setting with its help: the script's, TRL's ModelConfig and the trainer's config
""",
    "aer-evaluate": """usage: aer-evaluate --config NAME|PATH [--KEY VALUE ...]
       aer-evaluate --models PATH ... --benchmarks NAME|FILE ... [--KEY VALUE ...]

  --config NAME|PATH  a shipped evaluation recipe by name (--list; eval/cpu runs on a laptop), or a YAML file
  --list              print the shipped evaluation recipes, CPU ones first
  --benchmarks        built-in data sets by name: {data}; or a local .jsonl/.json/.parquet file, or a Hub id
""",
}


def _wrap(text: str, indent: int) -> str:
    import textwrap

    return textwrap.fill(text, 119, initial_indent=" " * indent, subsequent_indent=" " * indent)


def usage(prog: str) -> str:
    """The first lines of a command's help (the whole of `aer-train --help`: `train_help`)."""
    from .data_names import MATH_TABLES

    return USAGE[prog].replace("{data}", ", ".join(MATH_TABLES))


def train_help() -> str:
    """`aer-train --help`: the usage and an example, the trainer choice, AER's settings by group, the built-in data
    sets, and where the full list is (`--help-all`). Imports neither TRL nor the data libraries: it answers at once."""
    from ..config_docs import AER_GROUPS, ASYNC_GROUPS, BASELINE_GROUPS
    from ..families import FAMILIES
    from .data_names import MATH_TABLES

    lines = [usage("aer-train"), "the trainer (trainer: KIND in a recipe, or --trainer KIND):"]
    lines += [f"  {kind:<11} {f.trainer_name} on {f.trl_trainer}" for kind, f in FAMILIES.items()]
    lines += ["", "AER's settings (--help-all, or help(aer_trl.AERGRPOConfig), describes each):"]
    groups = {**AER_GROUPS, **BASELINE_GROUPS, **ASYNC_GROUPS}
    for title, names in groups.items():
        title = title.removeprefix("Parameters of ").removeprefix("Parameters that ")
        lines.append(_wrap(f"{title}: {', '.join(names)}", 2))
    lines += ["", "data (dataset_name):", _wrap(
        f"a built-in data set by name ({', '.join(MATH_TABLES)}), a registered source, a Hub id (owner/name) or a "
        "local .jsonl/.json/.parquet file with a question and an answer column", 2
    )]  # fmt: skip
    lines += ["", "threads on a CPU: the cores other work leaves free; AER_CPU_THREADS=N sets them (docs/lab.md)"]
    return "\n".join(lines)


def front_door(prog: str, argv: list[str], kind: str) -> list[str] | None:
    """What a command line does before anything heavy is imported: `--list` prints the shipped recipes of `kind` and
    returns None (nothing to run); `aer-train --help` prints `train_help` and returns None, `--help-all` (and
    `aer-evaluate --help`) the usage lines first, then TRL's parser prints every key after them; a `--config` that
    names a shipped recipe becomes its path. Returns the arguments to parse."""
    if "--list" in argv:
        print(list_recipes(kind))
        return None
    if prog == "aer-train" and ("-h" in argv or "--help" in argv):
        print(train_help())
        return None
    if "--help-all" in argv:
        argv = ["--help" if arg == "--help-all" else arg for arg in argv]
    if "-h" in argv or "--help" in argv:
        print(usage(prog))
    return resolve_config(argv, kind)


def resolve_config(argv: list[str], kind: str) -> list[str]:
    """`--config NAME` of a shipped recipe (where no such file exists) becomes its path."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            argv[i + 1] = resolve_recipe(argv[i + 1], kind)
        elif arg.startswith("--config="):
            argv[i] = "--config=" + resolve_recipe(arg.split("=", 1)[1], kind)
    return argv


def check_keys(keys: dict, classes, what: str) -> None:
    """Refuses a recipe key or flag that is a field of none of `classes`, naming the closest field (TRL's parser
    only says to add it to a dataclass). `env` (TRL's environment block) and `--no_<bool field>` are accepted."""
    known = {f.name for cls in classes for f in fields(cls)} | {"env", "config", "help", "h", "list"}
    for key in keys:
        if key in known or (key.startswith("no_") and key[3:] in known):
            continue
        close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
        raise ValueError(
            f"{key}: no such setting in {what}"
            + (f"; did you mean {' or '.join(close)}?" if close else "")
            + " (`--help` lists every setting)"
        )


def run_friendly(prog: str, fn: Callable[[], object]):
    """`fn()`, with a user's mistake printed as `<prog>: error: <message>` and exit status 2 instead of a traceback
    (`AER_TRACEBACK=1` re-raises it)."""
    try:
        return fn()
    except USER_ERRORS as error:
        if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"{prog}: error: {message}\n(set {TRACEBACK_ENV}=1 to see the traceback)", file=sys.stderr)
        raise SystemExit(2) from None
