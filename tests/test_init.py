"""The top level (aer_trl/__init__.py) loads lazily, as TRL's does, and every public name resolves."""

import subprocess
import sys

import pytest

import aer_trl


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "statement",
    [
        "import aer_trl",
        "import aer_trl.core_algos",
        "import aer_trl.app.evaluation.passk",
        "from aer_trl import methods",
    ],
)
def test_the_top_level_and_the_pure_math_load_no_trl_or_transformers(statement):
    loaded = _loaded_after(statement)
    assert not {"trl", "transformers", "accelerate", "datasets", "deepspeed"} & loaded


def test_every_public_name_resolves():
    for name in aer_trl.__all__:
        assert getattr(aer_trl, name) is not None, name
    assert set(dir(aer_trl)) >= set(aer_trl.__all__)
    assert aer_trl.AERConfig is aer_trl.AERGRPOConfig  # the older name, kept
    assert aer_trl.register_method.__module__ == "aer_trl.methods"
    assert "aer_trl.trainer" in sys.modules  # a lazy name is imported from its module where it is used
    with pytest.raises(AttributeError, match="update_alpha"):
        aer_trl.update_alpha  # noqa: B018  (internals stay in their modules)
