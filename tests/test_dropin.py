"""AERGRPOTrainer as a drop-in for trl.GRPOTrainer: what TRL's own test suite exercises works the same way."""

import pytest
from trl import GRPOConfig, GRPOTrainer

from aer_trl import AERGRPOConfig, AERGRPOTrainer
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
    ours = _trainer(AERGRPOTrainer, AERGRPOConfig(**{**common, "output_dir": str(tmp_path / "ours")}, method="grpo"))
    ours.train()
    losses = [[r["loss"] for r in t.state.log_history if "loss" in r] for t in (reference, ours)]
    assert losses[0] == losses[1]  # bit for bit: the option is TRL's, untouched
    # with the AER bonus in the same run it is refused, naming both
    with pytest.raises(ValueError, match="AER has its own entropy bonus"):
        AERGRPOConfig(**common)


def _card(trainer, out):
    trainer.create_model_card(model_name="tiny")
    return (out / "README.md").read_text().replace(str(out), "OUT")


def test_trls_method_trains_logs_and_writes_its_card_exactly_as_trl(tmp_path):
    """method='grpo' (AER's outputs off, the default for a non-AER method): the same losses, the same logged keys,
    no metrics.jsonl, TRL's tags and TRL's model card; switching the measurements on changes no number trained."""
    common = helpers.config_kwargs(tmp_path / "trl", max_steps=2)
    reference = _trainer(GRPOTrainer, GRPOConfig(**common))
    reference.train()
    ours = _trainer(AERGRPOTrainer, AERGRPOConfig(**common, method="grpo"))  # same output_dir: the card names it
    assert ours.args.aer_measurements is False
    ours.train()
    logs = [[r for r in t.state.log_history if "loss" in r] for t in (reference, ours)]
    assert [r["loss"] for r in logs[0]] == [r["loss"] for r in logs[1]]
    assert [sorted(r) for r in logs[0]] == [sorted(r) for r in logs[1]]  # no aer/* key added
    assert not (tmp_path / "trl" / "metrics.jsonl").exists()
    assert ours.model.model_tags == reference.model.model_tags
    # TRL's card, but for the line that would link huggingface.co/None for a base model without a Hub id
    trl_card = _card(reference, tmp_path / "trl")
    assert "huggingface.co/None" in trl_card and "huggingface.co/None" not in _card(ours, tmp_path / "trl")
    fixed = trl_card.replace("fine-tuned version of [None](https://huggingface.co/None)", "fine-tuned model")
    fixed = fixed.replace('model="None"', 'model="OUT"')  # the usage snippet loads this run's model (TRL: "None")
    assert _card(ours, tmp_path / "trl") == fixed

    measured = _trainer(
        AERGRPOTrainer, helpers.make_config(tmp_path / "m", max_steps=2, method="grpo", aer_measurements=True)
    )
    measured.train()
    assert [r["loss"] for r in measured.state.log_history if "loss" in r] == [r["loss"] for r in logs[0]]
    assert "aer/entropy" in measured.state.log_history[0] and (tmp_path / "m" / "metrics.jsonl").exists()
    with pytest.raises(RuntimeError, match="aer_measurements is off"):
        _ = ours.aer_callback


def test_a_plain_grpo_config_with_trls_entropy_bonus_trains_trls_method(tmp_path, caplog):
    grpo = GRPOConfig(**helpers.config_kwargs(tmp_path, max_steps=1, entropy_coef=0.05))
    with caplog.at_level("WARNING", logger="aer_trl.config"):
        trainer = _trainer(AERGRPOTrainer, grpo)
    assert trainer.args.method == "grpo" and trainer.args.entropy_coef == 0.05
    assert "because it sets TRL's entropy_coef" in caplog.text


def test_save_steps_is_the_users_for_every_method(tmp_path):
    """The config keeps `save_steps` as given (as TRL's does); for AER's methods `AERCallback` moves a save inside a
    rollout batch to the batch's end (tests/test_callbacks.py), since an AER iteration cannot be resumed from its
    middle."""
    kw = helpers.config_kwargs(tmp_path, steps_per_generation=2, save_strategy="steps", save_steps=1)
    assert AERGRPOConfig(**kw, method="grpo").save_steps == AERGRPOConfig(**kw, method="aer").save_steps == 1


def test_a_plain_grpo_config_is_accepted(tmp_path):
    grpo = GRPOConfig(**helpers.config_kwargs(tmp_path, max_steps=1, learning_rate=3e-3))
    trainer = _trainer(AERGRPOTrainer, grpo)
    assert isinstance(trainer.args, AERGRPOConfig) and trainer.args.learning_rate == 3e-3
    assert trainer.args.method == "aer" and trainer.args.aer_tau == AERGRPOConfig.aer_tau
    trainer.train()


@pytest.mark.slow
def test_a_stop_inside_a_rollout_batch_writes_no_checkpoint_there_and_resumes_exactly(tmp_path):
    """2 optimizer steps per rollout batch; stopped at step 3, resumed to 6: the α trajectory of an uninterrupted run
    (the checkpoint at step 3 would have left α one update behind)."""
    from aer_trl.app.checkpoints import resolve_resume

    def config(out, max_steps):
        return helpers.make_config(
            out,
            max_steps=max_steps,
            steps_per_generation=2,
            save_strategy="steps",
            save_steps=2,
            aer_alpha_init=0.05,
            aer_eta=0.05,
            aer_fixed_target=100.0,  # entropy always below target: α rises once per rollout batch
        )

    full = _trainer(AERGRPOTrainer, config(tmp_path / "full", 6))
    full.train()
    stopped = _trainer(AERGRPOTrainer, config(tmp_path / "stopped", 3))
    with pytest.warns(UserWarning, match="step 3 ends inside a rollout batch"):
        stopped.train()
    assert sorted(p.name for p in (tmp_path / "stopped").glob("checkpoint-*")) == ["checkpoint-2"]
    resumed = _trainer(AERGRPOTrainer, config(tmp_path / "stopped", 6))
    resumed.train(resume_from_checkpoint=resolve_resume("latest", str(tmp_path / "stopped")))
    assert resumed.aer_callback.alpha == pytest.approx(full.aer_callback.alpha) == pytest.approx(0.2)
    # α after every iteration and H0 / H* as uninterrupted (the sampled completions after a resume are TRL's own
    # business: their entropies agree to ~1e-3, not bit for bit)
    alphas = [[h["alpha"] for h in t.aer_callback.controller.history] for t in (resumed, full)]
    assert alphas[0] == pytest.approx(alphas[1]) and len(alphas[0]) == 3
    assert resumed.aer_callback.initial_entropy == full.aer_callback.initial_entropy
    # the killed run's step 3 (past checkpoint-2) is trained and logged again, and counted once
    from aer_trl.metrics import read_metrics

    logged = [r["step"] for r in read_metrics(tmp_path / "stopped" / "metrics.jsonl") if "loss" in r]
    assert logged == [1, 2, 3, 4, 5, 6]
