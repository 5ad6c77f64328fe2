"""The house (docs/design.md §0): imports go down only, never from a lower floor to a higher one."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "aer_trl"

# module (path under aer_trl/, without .py) -> floor; docs/design.md §0 draws the same table
FLOORS = {
    "controller": 1, "methods": 1, "registry": 1, "config": 1, "prompts": 1, "rewards": 1, "verifier": 1, "stats": 1,
    "io": 1, "gguf": 1, "resources": 1, "evaluation/passk": 1, "evaluation/sampling": 1, "evaluation/store": 1,
    "evaluation/args": 1,
    "callback": 2, "sources": 2, "data": 2, "evaluation/harness": 2, "evaluation/plan": 2,
    "evaluation/backends": 2, "evaluation/scoring": 2, "evaluation/reports": 2, "lab/warmstart": 2, "lab/tasks": 2,
    "lab/model": 2, "lab/tokenizer": 2, "lab/rewards": 2, "studies/report": 4,
    "trainer": 3, "training": 3, "metrics": 3, "evaluation/callback": 3, "card": 3,
    "run": 4, "studies/demo": 4, "studies/real_study": 4, "evaluation/__main__": 4, "notebooks": 4,
}  # fmt: skip


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return "/".join(rel.parts[:-1]) if rel.name == "__init__" else "/".join(rel.parts)


def _imports(path: Path) -> set[str]:
    """aer_trl modules imported by `path` (relative and absolute imports, at any depth of the file)."""
    here = path.relative_to(PACKAGE).parent.parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[: len(here) - (node.level - 1)])
            elif node.module and node.module.startswith("aer_trl"):
                base, node_module = [], node.module.removeprefix("aer_trl").lstrip(".")
                parts = node_module.split(".") if node_module else []
                for alias in node.names:
                    found.add("/".join([*parts, alias.name]))
                    found.add("/".join(parts))
                continue
            else:
                continue
            parts = [*base, *(node.module.split(".") if node.module else [])]
            for alias in node.names:
                found.add("/".join([*parts, alias.name]))
            found.add("/".join(parts))
    return {name for name in found if name in FLOORS}


def test_every_module_has_a_floor():
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    assert modules - set(FLOORS) == set(), "add the new module to FLOORS here and to docs/design.md §0"


def test_no_import_goes_up_a_floor():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py":
            continue
        me = _module_name(path)
        for other in _imports(path):
            if FLOORS[other] > FLOORS[me]:
                upward.append(f"{me} (floor {FLOORS[me]}) imports {other} (floor {FLOORS[other]})")
    assert not upward, "\n".join(sorted(upward))


def test_nothing_imports_the_command_line():
    """`run.py` is the command line only: the lab, the notebooks and the studies train through `training.py`."""
    importers = [_module_name(p) for p in PACKAGE.rglob("*.py") if "run" in _imports(p)]
    assert importers == []
