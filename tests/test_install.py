"""The package installed from its wheel into a scratch virtualenv and run outside the repository: the recipes ship
inside it, the console scripts exist, and the lab demo runs a few steps from a folder that has no checkout in it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HELP_EVERY_SCRIPT = """
import contextlib, io, sys
from importlib.metadata import entry_points
found = {e.name: e for e in entry_points(group="console_scripts")}
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            found[name].load()()
            code = 0
        except SystemExit as stop:
            code = stop.code or 0
    assert "usage" in out.getvalue(), name
    print(f"{name}:{code}")
"""


@pytest.mark.slow
def test_the_wheel_installed_elsewhere_runs_the_lab_demo(tmp_path):
    # build from a copy of what the wheel is made of, so the checkout gets no build/ folder
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "aer_trl", src / "aer_trl", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)], check=True
    )
    (wheel,) = (tmp_path / "dist").glob("aer_trl-*.whl")
    # a scratch virtualenv: aer_trl from the wheel; its dependencies (torch, trl, ...) reached through one path line
    # to this environment's site-packages, whose editable aer_trl is not loaded (a path line runs no .pth files)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "deps.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    python = venv / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-compile", str(wheel)], check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | {"HF_HUB_OFFLINE": "1"}

    def run(*cmd):
        return subprocess.run(cmd, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900)

    where = run(
        str(python), "-c", "import aer_trl.resources as r; print(r.__file__); print(r.recipe_path('lab', 'aer'))"
    )
    assert where.returncode == 0, where.stderr
    module, recipe = where.stdout.split()
    assert module.startswith(str(site)) and recipe.startswith(str(site))  # the installed copy, not the checkout
    # every console script is installed and its entry point answers --help (one interpreter: each separate start
    # re-imports torch and TRL, ~6 s apiece); the lab demo below runs through its script file
    scripts = ("aer-train", "aer-evaluate", "aer-lab-demo", "aer-real-study")
    assert all(os.access(venv / "bin" / script, os.X_OK) for script in scripts)
    helps = run(str(python), "-c", HELP_EVERY_SCRIPT, *scripts)
    assert helps.returncode == 0 and helps.stdout.split() == [f"{s}:0" for s in scripts], helps.stdout + helps.stderr
    demo = run(str(venv / "bin" / "aer-lab-demo"), "--quick", "--output_dir", "demo", "--lab_cache_dir", "cache")
    assert demo.returncode == 0, demo.stderr[-3000:]  # the exit status of a run that worked is 0
    assert "| AER-GRPO (`aer`) | 1 |" in (elsewhere / "demo" / "passk.md").read_text()
    assert (elsewhere / "demo" / "aer-seed0" / "metrics.jsonl").is_file()


def test_requires_python_is_no_lower_than_what_the_dependencies_need():
    """pip on an older Python would otherwise fail far from the cause ("no matching distribution for trl")."""
    import tomllib
    from importlib.metadata import metadata

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ours = SpecifierSet(project["requires-python"])
    floor = min((spec.version for spec in ours if spec.operator == ">="), key=lambda v: tuple(map(int, v.split("."))))
    for dependency in project["dependencies"]:
        name = Requirement(dependency).name
        theirs = metadata(name).get("Requires-Python")
        assert not theirs or SpecifierSet(theirs).contains(floor), (name, theirs, floor)
