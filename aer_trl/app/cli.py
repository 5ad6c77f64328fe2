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

  --config NAME|PATH  a shipped recipe by name, e.g. smollm2_135m_instruct/gsm8k/aer (CPU, a few minutes), or a
                      YAML file of your own; every key below can be given as a flag and overrides the recipe
  --list              print the shipped training recipes, one line each
  (accelerate launch -m aer_trl.app.run ... for several processes or DeepSpeed; docs/usage.md)
""",
    "aer-evaluate": """usage: aer-evaluate --config NAME|PATH [--KEY VALUE ...]
       aer-evaluate --models PATH ... --benchmarks NAME|FILE ... [--KEY VALUE ...]

  --config NAME|PATH  a shipped evaluation recipe by name, e.g. eval/paper, or a YAML file of your own
  --list              print the shipped evaluation recipes, one line each
""",
}


def usage(prog: str) -> str:
    return USAGE[prog]


def front_door(prog: str, argv: list[str], kind: str) -> list[str] | None:
    """What a command line does before anything heavy is imported: `--list` prints the shipped recipes of `kind` and
    returns None (nothing to run); `--help` prints the usage lines first (TRL's parser prints every key after them);
    a `--config` that names a shipped recipe becomes its path. Returns the arguments to parse."""
    if "--list" in argv:
        print(list_recipes(kind))
        return None
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
