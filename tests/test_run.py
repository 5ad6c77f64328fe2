"""aer_trl.run: the training command line (aer-train, python -m aer_trl.run, recipes/train.py)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_train_script_default_is_the_lab(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "recipes"))
    import train  # recipes/train.py

    import aer_trl.run

    captured = {}
    monkeypatch.setattr(aer_trl.run, "train", lambda s, t, m: captured.update(script=s, training=t, model=m))
    train.main(["--output_dir", str(tmp_path)])
    assert captured["script"].dataset_name == "lab" and captured["model"].model_name_or_path is None
    assert captured["training"].use_cpu and captured["training"].method == "aer"
    assert captured["training"].output_dir == str(tmp_path)  # flags override the YAML


def test_a_shipped_recipe_runs_by_name_from_any_folder(tmp_path, monkeypatch):
    """The docs' `--config recipes/qwen3_4b_base/deepscaler/aer.yaml` works outside the checkout (an installed
    wheel): where no such file exists, the name is the shipped recipe's; a wrong name says so."""
    import pytest

    import aer_trl.run
    from aer_trl.resources import resolve_recipe

    monkeypatch.chdir(tmp_path)
    captured = {}
    monkeypatch.setattr(aer_trl.run, "train", lambda s, t, m: captured.update(script=s, training=t, model=m))
    aer_trl.run.main(["--config", "recipes/qwen3_4b_base/deepscaler/aer.yaml", "--output_dir", "out", "--use_cpu", "1",
                      "--bf16", "0", "--use_vllm", "0"])  # fmt: skip
    assert captured["model"].model_name_or_path == "Qwen/Qwen3-4B-Base" and captured["training"].max_steps == 480
    assert resolve_recipe("lab/aer") == resolve_recipe("recipes/lab/aer.yaml") and resolve_recipe("lab/aer").endswith(
        "aer_trl/recipes/lab/aer.yaml"
    )
    with pytest.raises(FileNotFoundError, match="no such file, and no shipped recipe"):
        resolve_recipe("recipes/lab/nope.yaml")


def test_the_command_line_logs_the_packages_info_lines(tmp_path, monkeypatch):
    """Entry points configure logging as transformers' example scripts do: the package's INFO lines are shown."""
    import logging

    import aer_trl.run

    monkeypatch.setattr(aer_trl.run, "train", lambda s, t, m: None)
    package = logging.getLogger("aer_trl")
    before = package.level
    try:
        package.setLevel(logging.NOTSET)
        aer_trl.run.main(["--output_dir", str(tmp_path)])
        assert package.getEffectiveLevel() == logging.INFO
        aer_trl.run.main(["--output_dir", str(tmp_path), "--log_level", "error"])
        assert package.getEffectiveLevel() == logging.ERROR
    finally:
        package.setLevel(before)  # later tests read the package's warnings from caplog
