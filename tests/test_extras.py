"""What training does not need is optional (pyproject's extras): with matplotlib, gguf, vllm and deepspeed hidden from
the import system, AERGRPOTrainer trains and the evaluation harness evaluates (metrics.json and table.md, no figure,
a warning naming the `plots` extra), and each feature that needs an extra raises an ImportError that names it."""

import subprocess
import sys
from pathlib import Path

import pytest

from aer_trl.app import extras

SCRIPT = Path(__file__).parent / "scripts" / "without_extras.py"


@pytest.mark.slow
def test_training_and_evaluation_run_without_the_optional_extras():
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_core_dependencies_are_what_training_needs_and_the_rest_are_extras():
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    core = {dep.split(">")[0].split("<")[0].split("=")[0].strip() for dep in project["dependencies"]}
    assert not core & set(extras.EXTRAS), "an optional package is a core dependency"
    for package, (extra, _) in extras.EXTRAS.items():
        assert any(dep.startswith(package) for dep in project["optional-dependencies"][extra]), (package, extra)


def test_a_missing_extra_is_named():
    assert extras.available("json") and not extras.available("surely_not_a_package_aer")
    extras.EXTRAS["surely_not_a_package_aer"] = ("plots", "a test")
    try:
        with pytest.raises(
            ImportError, match=r'a test needs the `surely_not_a_package_aer` package: pip install "aer-trl\[plots\]"'
        ):
            extras.require("surely_not_a_package_aer")
    finally:
        del extras.EXTRAS["surely_not_a_package_aer"]
