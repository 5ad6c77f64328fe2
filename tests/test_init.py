"""The top level (aer_trl/__init__.py) loads lazily, as TRL's does, and every public name resolves."""

import re
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
    """Each lazy name is the object of the module it is declared in (not a copy, not None)."""
    import importlib
    import inspect

    source = inspect.getsource(aer_trl)
    modules = dict(re.findall(r'"([a-z_.]+)": \[([^\]]+)\]', source))
    declared = {name.strip().strip('"'): module for module, names in modules.items() for name in names.split(",")}
    assert set(declared) == set(aer_trl.__all__)
    for name, module in declared.items():
        assert getattr(aer_trl, name) is getattr(importlib.import_module(f"aer_trl.{module}"), name), name
    assert set(dir(aer_trl)) >= set(aer_trl.__all__)
    assert aer_trl.AERConfig is aer_trl.AERGRPOConfig  # the older name, kept for now, with a warning:
    with pytest.warns(FutureWarning, match="AERConfig is the old name of AERGRPOConfig"):
        assert importlib.import_module("aer_trl.config").AERConfig is aer_trl.AERGRPOConfig
    assert aer_trl.register_method.__module__ == "aer_trl.methods"
    assert "aer_trl.trainer" in sys.modules  # a lazy name is imported from its module where it is used
    with pytest.raises(AttributeError, match="update_alpha"):
        aer_trl.update_alpha  # noqa: B018  (internals stay in their modules)


def test_the_applications_old_import_paths_give_the_moved_modules_with_a_warning(tmp_path):
    """The modules that moved under aer_trl.app (0.1): `import aer_trl.rewards` is `aer_trl.app.rewards` itself (one
    module, one registry), with a FutureWarning naming the new path; `python -m aer_trl.run` still runs."""
    import importlib
    import os

    with pytest.warns(FutureWarning, match="aer_trl.rewards moved to aer_trl.app.rewards"):
        old = importlib.import_module("aer_trl.rewards")
    assert old is importlib.import_module("aer_trl.app.rewards")
    with pytest.warns(FutureWarning, match="aer_trl.evaluation moved"):
        passk = importlib.import_module("aer_trl.evaluation.passk")
    assert passk is importlib.import_module("aer_trl.app.evaluation.passk")
    for old_name, new_name in (("vllm_support", "upstream.vllm_engine"), ("local_rollout", "upstream.local_rollout")):
        with pytest.warns(FutureWarning, match=f"aer_trl.{old_name} moved to aer_trl.{new_name}"):
            assert importlib.import_module(f"aer_trl.{old_name}") is importlib.import_module(f"aer_trl.{new_name}")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "aer_trl.run", "--list"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "smollm2_135m_instruct/gsm8k/aer" in done.stdout, done.stderr
    assert "aer_trl.run moved to aer_trl.app.run" in done.stderr
