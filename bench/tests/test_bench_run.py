"""aer_bench.run and aer_bench.training: the bench's training command line (`aer_trl.app.run` with the lab's classes),
and every recipe the bench ships loads strictly with them."""

import bench_helpers
import pytest

from aer_bench.training import BenchConfig, parse_recipe
from aer_trl.app.resources import recipes_dir

BENCH_RECIPES = sorted(recipes_dir(package="aer_bench").rglob("*.yaml"))


@pytest.mark.parametrize("recipe", BENCH_RECIPES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_bench_recipe_loads_in_strict_mode(recipe):
    """Into the bench's config for a GRPO recipe, into the library's config of its trainer for another
    (`trainer: async_grpo`: the arithmetic aer_async)."""
    from aer_trl.app.trainers import config_class_for, recipe_trainer

    argv = ["--config", str(recipe), "--bf16", "false", "--use_cpu", "true"]
    _, training_args, _ = parse_recipe(argv)
    kind = recipe_trainer(argv)
    assert type(training_args) is (BenchConfig if kind == "grpo" else config_class_for(kind))


def test_the_bench_command_line_defaults_to_the_lab(tmp_path, monkeypatch):
    import aer_trl.app.run
    import aer_trl.app.training
    from aer_bench import run
    from aer_bench.training import BenchGRPOTrainer

    captured = {}

    def fake_train(script, training, model, trainer_class):
        captured.update(script=script, training=training, model=model, trainer_class=trainer_class)

    monkeypatch.setattr(aer_trl.app.training, "train", fake_train)
    run.main(["--output_dir", str(tmp_path)])
    assert captured["script"].dataset_name == "lab" and captured["model"].model_name_or_path is None
    assert captured["training"].use_cpu and captured["training"].method == "aer"
    assert captured["training"].output_dir == str(tmp_path)  # flags override the YAML
    assert captured["trainer_class"] is BenchGRPOTrainer


def test_every_field_the_bench_adds_has_help():
    """The bench's argument classes follow TRL's convention too: each field they add has `metadata={"help": ...}`."""
    import dataclasses

    from aer_bench.training import BenchEvalArguments, BenchScriptArguments
    from aer_trl import AERGRPOConfig
    from aer_trl.app.evaluation.args import EvalArguments
    from aer_trl.app.training import AERScriptArguments

    for cls, base in (
        (BenchConfig, AERGRPOConfig),
        (BenchScriptArguments, AERScriptArguments),
        (BenchEvalArguments, EvalArguments),
    ):
        added = [f for f in dataclasses.fields(cls) if f.name not in {g.name for g in dataclasses.fields(base)}]
        assert added
        missing = [f.name for f in added if not f.metadata.get("help")]
        assert not missing, (cls.__name__, missing)


@pytest.mark.parametrize(
    "settings, mixin",
    [
        ({"aer_anchor_probe": 4}, "AnchorProbeMixin"),
        ({"aer_bonus_top_k": 5}, "TruncatedSupportMixin"),
        ({"aer_step": "pi"}, "SteppedControllerMixin"),
        ({"aer_gate": True}, "SteppedControllerMixin"),
        ({"share_prompt_forward": True}, "SharedPromptMixin"),
    ],
)
def test_the_librarys_trainer_refuses_a_bench_setting_it_would_ignore(tmp_path, tokenizer, settings, mixin):
    """A bench config with one of the bench's settings, handed to the library's trainer (any AER method takes them):
    refused by name, never trained as if the setting were off."""
    from aer_trl import AERGRPOTrainer
    from tests import helpers

    args = bench_helpers.make_bench_config(tmp_path, **settings)
    with pytest.raises(TypeError, match=mixin):
        AERGRPOTrainer(model=helpers.make_model(tokenizer), reward_funcs=[helpers.even_length_reward], args=args)
    assert bench_helpers.make_trainer(
        tokenizer, bench_helpers.make_bench_config(tmp_path / "bench", **settings)
    )  # the bench's
