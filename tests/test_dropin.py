"""AERGRPOTrainer as a drop-in for trl.GRPOTrainer: what TRL's own test suite exercises works the same way."""

import pytest
from trl import GRPOConfig, GRPOTrainer

from aer_trl import AERConfig, AERGRPOTrainer
from tests import helpers


def _trainer(cls, args, **kw):
    tokenizer = helpers.make_tokenizer()
    return cls(
        model=helpers.make_model(tokenizer),
        reward_funcs=[helpers.even_length_reward, helpers.digit_count_reward],
        args=args,
        train_dataset=helpers.make_dataset(),
        processing_class=tokenizer,
        **kw,
    )


def test_evaluate_before_train(tmp_path):
    args = helpers.make_config(tmp_path, method="grpo", per_device_eval_batch_size=4, eval_strategy="no")
    trainer = _trainer(AERGRPOTrainer, args, eval_dataset=helpers.make_dataset(8))
    metrics = trainer.evaluate()
    assert "eval_reward" in metrics and "eval_loss" in metrics


@pytest.mark.parametrize("options", [{"entropy_coef": 0.05}, {"use_adaptive_entropy": True}])
def test_trls_entropy_options_work_with_trls_method_as_trl_defines_them(tmp_path, options):
    common = helpers.config_kwargs(tmp_path / "trl", max_steps=2, **options)
    reference = _trainer(GRPOTrainer, GRPOConfig(**common))
    reference.train()
    ours = _trainer(AERGRPOTrainer, AERConfig(**{**common, "output_dir": str(tmp_path / "ours")}, method="grpo"))
    ours.train()
    losses = [[r["loss"] for r in t.state.log_history if "loss" in r] for t in (reference, ours)]
    assert losses[0] == losses[1]  # bit for bit: the option is TRL's, untouched
    # with the AER bonus in the same run it is refused, naming both
    with pytest.raises(ValueError, match="AER has its own entropy bonus"):
        AERConfig(**common)


def test_save_steps_untouched_for_trls_methods(tmp_path):
    kw = helpers.config_kwargs(tmp_path, steps_per_generation=2, save_strategy="steps", save_steps=1)
    assert AERConfig(**kw, method="grpo").save_steps == 1
    assert AERConfig(**kw, method="aer").save_steps == 2  # an AER iteration cannot be resumed from its middle


def test_a_plain_grpo_config_is_accepted(tmp_path):
    grpo = GRPOConfig(**helpers.config_kwargs(tmp_path, max_steps=1, learning_rate=3e-3))
    trainer = _trainer(AERGRPOTrainer, grpo)
    assert isinstance(trainer.args, AERConfig) and trainer.args.learning_rate == 3e-3
    assert trainer.args.method == "aer" and trainer.args.aer_tau == AERConfig.aer_tau
    trainer.train()
