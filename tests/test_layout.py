"""The house (docs/design.md §0), checked by import-linter's contracts in pyproject.toml (`lint-imports`): imports go
down the floors only, the pure math stays pure, evaluation never imports the trainer. Every module has a place in
the floors contract, and the contracts do fail on an upward import."""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "aer_trl"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(cwd: Path, env_path: Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if env_path is not None:
        import os

        env = {**os.environ, "PYTHONPATH": str(env_path)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _floors() -> list[str]:
    """Every module the floors contracts name: the core's (`floors`) and the application's (`app-floors`)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = []
    for floors in (c for c in config["contracts"] if c["id"] in ("floors", "app-floors")):
        (container,) = floors["containers"]
        named += [f"{container}.{m.strip()}" for layer in floors["layers"] for m in layer.replace("|", ":").split(":")]
    return [m for m in named if m != "aer_trl.app"]  # the core's contract names the application as one floor


def _library_contracts(tmp_path: Path) -> Path:
    """The library's contracts alone (those whose modules are all aer_trl's, `library-without-bench` too), for a
    checkout whose research bench is not installed: import-linter cannot build the bench's graph without it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    keys = ("containers", "source_modules", "layers")

    def library_only(contract) -> bool:
        named = [m for key in keys for entry in contract.get(key, []) for m in entry.replace("|", ":").split(":")]
        return all(m.strip().startswith("aer_trl") or contract.get("containers") for m in named) and not any(
            c.startswith("aer_bench") for c in contract.get("containers", [])
        )

    lines = ["[importlinter]", "root_packages =\n    aer_trl", "include_external_packages = True",
             "exclude_type_checking_imports = True"]  # fmt: skip
    for contract in config["contracts"]:
        if "source_modules" in contract:  # a mixed contract keeps its rule for the library's modules
            kept = [m for m in contract["source_modules"] if m.startswith("aer_trl")]
            contract = {**contract, "source_modules": kept} if kept else {}
        if not contract or not library_only(contract):
            continue
        lines += ["", f"[importlinter:contract:{contract['id']}]"]
        for key, value in contract.items():
            if key != "id":
                value = "\n    ".join(["", *value]) if isinstance(value, list) else value
                lines.append(f"{key} = {value}")
    path = tmp_path / ".importlinter"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_contracts_are_kept(tmp_path):
    """Every contract; where the research bench is not installed (the library's tests alone), the library's."""
    try:
        import aer_bench  # noqa: F401

        bench = True
    except ImportError:
        bench = False
    if bench:
        result = _lint_imports(ROOT)
    else:
        config = _library_contracts(tmp_path)
        result = subprocess.run(
            [str(LINT_IMPORTS), "--no-cache", str(config)], cwd=ROOT, capture_output=True, text=True
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_every_module_has_a_place_on_a_floor():
    named = _floors()
    unplaced = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        module = ".".join(parts)
        if module in ("aer_trl", "aer_trl.app", "aer_trl.app.evaluation"):  # packages' re-exports, not floors
            continue
        if not any(module == m or module.startswith(m + ".") for m in named):
            unplaced.append(module)
    assert unplaced == [], "name these modules in pyproject.toml's floors contract and in docs/design.md §0"


def test_an_upward_import_breaks_the_floors(tmp_path):
    """A copy of the library and the bench where the pure math imports the training run and the library imports
    the bench: lint-imports must fail on both."""
    shutil.copytree(PACKAGE, tmp_path / "aer_trl", ignore=shutil.ignore_patterns("__pycache__", "recipes"))
    shutil.copytree(ROOT / "bench" / "aer_bench", tmp_path / "aer_bench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    core_algos = tmp_path / "aer_trl" / "core_algos.py"
    core_algos.write_text(core_algos.read_text() + "\nfrom .app import training  # noqa: E402, F401\n")
    rewards = tmp_path / "aer_trl" / "app" / "rewards.py"
    rewards.write_text(rewards.read_text() + "\nfrom aer_bench import stats  # noqa: E402, F401\n")
    result = _lint_imports(tmp_path, env_path=tmp_path)
    assert result.returncode != 0
    assert "aer_trl.core_algos -> aer_trl.app.training" in result.stdout
    assert "aer_trl.app.rewards -> aer_bench.stats" in result.stdout


def test_no_library_module_is_over_400_lines():
    """A module a newcomer reads in one sitting: the trainer wires AER into TRL and nothing else (what advises,
    carries metrics or patches another library lives in a module named for it), and no module is over 400 lines."""
    sizes = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 400} == {}
