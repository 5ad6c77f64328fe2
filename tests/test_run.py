"""aer_trl.app.run: the training command line (aer-train, python -m aer_trl.app.run, recipes/train.py)."""


def test_a_shipped_recipe_runs_by_name_from_any_folder(tmp_path, monkeypatch):
    """The docs' `--config recipes/qwen3_4b_base/deepscaler/aer.yaml` works outside the checkout (an installed
    wheel): where no such file exists, the name is the shipped recipe's; a wrong name says so."""
    import pytest

    import aer_trl.app.run
    import aer_trl.app.training
    from aer_trl.app.resources import resolve_recipe

    monkeypatch.chdir(tmp_path)
    captured = {}
    monkeypatch.setattr(
        aer_trl.app.training, "train", lambda s, t, m, trainer_class: captured.update(script=s, training=t, model=m)
    )
    aer_trl.app.run.main(["--config", "recipes/qwen3_4b_base/deepscaler/aer.yaml", "--output_dir", "out",
                          "--use_cpu", "1", "--bf16", "0", "--use_vllm", "0"])  # fmt: skip
    assert captured["model"].model_name_or_path == "Qwen/Qwen3-4B-Base" and captured["training"].max_steps == 480
    gsm8k = "smollm2_135m_instruct/gsm8k/aer"
    assert resolve_recipe(gsm8k) == resolve_recipe(f"recipes/{gsm8k}.yaml")
    assert resolve_recipe(gsm8k).endswith(f"aer_trl/recipes/{gsm8k}.yaml")
    with pytest.raises(FileNotFoundError, match="no such file, and no shipped recipe"):
        resolve_recipe("recipes/lab/aer.yaml")  # the research bench's, not shipped with the library


def test_the_command_line_logs_the_packages_info_lines(tmp_path, monkeypatch):
    """Entry points configure logging as transformers' example scripts do: the package's INFO lines are shown."""
    import logging

    import aer_trl.app.run
    import aer_trl.app.training

    monkeypatch.setattr(aer_trl.app.training, "train", lambda s, t, m, trainer_class: None)
    package = logging.getLogger("aer_trl")
    before = package.level
    try:
        package.setLevel(logging.NOTSET)
        cpu = ["--use_cpu", "true", "--bf16", "false"]
        aer_trl.app.run.main(["--output_dir", str(tmp_path), *cpu])
        assert package.getEffectiveLevel() == logging.INFO
        aer_trl.app.run.main(["--output_dir", str(tmp_path), *cpu, "--log_level", "error"])
        assert package.getEffectiveLevel() == logging.ERROR
    finally:
        package.setLevel(before)  # later tests read the package's warnings from caplog


def test_the_command_line_hides_only_the_deprecations_other_libraries_raise_from_their_own_calls(monkeypatch):
    """TRL 1.16 reads `model.is_gradient_checkpointing`, which transformers 5 deprecates: a user of aer-train cannot
    act on it, so the command line does not show it (docs/upstream.md); any other FutureWarning still shows, and a
    user who sets PYTHONWARNINGS gets every warning."""
    import warnings

    from aer_trl.app.logs import configure_logging

    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        configure_logging()
        warnings.warn_explicit(
            "`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning, "x.py", 1,
            module="transformers.modeling_utils",
        )  # fmt: skip
        warnings.warn_explicit("something else is deprecated", FutureWarning, "x.py", 2, module="transformers.x")
    assert [str(w.message) for w in seen] == ["something else is deprecated"]
