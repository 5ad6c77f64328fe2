"""`AERCallback` alone: when α moves, what a checkpoint keeps, how transformers restores it, which saves it vetoes.
The callback inside a training run (α per rollout batch, resume): tests/test_trainer.py."""

from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from aer_trl import AERCallback, AERGRPOConfig


def args(steps_per_generation=2, num_iterations=1, gradient_accumulation_steps=1, aer_measurements=True):
    return SimpleNamespace(
        steps_per_generation=steps_per_generation,
        num_iterations=num_iterations,
        gradient_accumulation_steps=gradient_accumulation_steps,
        aer_measurements=aer_measurements,
    )


def test_a_submitted_entropy_moves_alpha_once_at_the_end_of_the_step():
    cb = AERCallback(tau=0.5, eta=0.1)
    cb.submit_entropy(2.0)
    assert cb.alpha == 0.0 and cb.initial_entropy is None  # nothing happens before the step ends
    cb.on_step_end(args(), TrainerState(global_step=2), TrainerControl())
    # H0 = 2.0, H* = 0.5 * 2.0 = 1.0; H = 2.0 > H* -> alpha = max(0, 0 - 0.1) = 0
    assert (cb.initial_entropy, cb.target, cb.alpha) == (2.0, 1.0, 0.0)
    cb.submit_entropy(0.5)  # below H* -> alpha rises by eta
    cb.on_substep_end(args(), TrainerState(global_step=2), TrainerControl())
    assert cb.alpha == pytest.approx(0.1)
    cb.on_step_end(args(), TrainerState(global_step=4), TrainerControl())  # nothing pending: no second update
    assert cb.alpha == pytest.approx(0.1) and cb.controller.iteration == 2


def test_a_checkpointed_callback_restores_through_transformers_and_continues_the_same_trajectory():
    original = AERCallback(tau=0.4, eta=0.05, alpha_max=0.12)
    for entropy in (1.0, 0.3, 0.2):
        original.submit_entropy(entropy)
        original.on_step_end(args(), TrainerState(global_step=2), TrainerControl())
    saved = original.state()

    # what Trainer does on resume: build the callback from the saved args, then set the saved attributes
    restored = AERCallback(**saved["args"])
    for name, value in saved["attributes"].items():
        setattr(restored, name, value)
    assert restored.controller.state_dict() == original.controller.state_dict()

    for entropy in (0.1, 0.1, 0.9):
        for cb in (original, restored):
            cb.submit_entropy(entropy)
            cb.on_step_end(args(), TrainerState(global_step=2), TrainerControl())
        assert restored.alpha == original.alpha
    # H* = 0.4 * 1.0; up by eta below H*, clamped at alpha_max (0.12, not 0.15), down above H*
    assert [h["alpha"] for h in restored.controller.history] == pytest.approx([0, 0.05, 0.10, 0.12, 0.12, 0.07])


def test_from_args_reads_the_config_fields(tmp_path):
    config = AERGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[],
        aer_tau=0.3, aer_eta=0.02, aer_alpha_init=0.01, aer_alpha_max=0.2, aer_fixed_target=0.9,
        aer_anchor_rollouts=2,
    )  # fmt: skip
    assert AERCallback.from_args(config).state()["args"] == {
        "tau": 0.3, "eta": 0.02, "alpha_init": 0.01, "alpha_max": 0.2, "fixed_target": 0.9, "adaptive": True,
        "anchor_rollouts": 2,
    }  # fmt: skip


def saves(cb: AERCallback, run_args, asked: dict[int, bool], max_steps: int = 10) -> list[int]:
    """The steps whose checkpoint is written, `asked[step]`: whether transformers asked for one at that step."""
    written = []
    for step, should_save in asked.items():
        control = TrainerControl(should_save=should_save)
        cb.on_step_end(run_args, TrainerState(global_step=step, max_steps=max_steps), control)
        written += [step] * control.should_save
    return written


def test_a_save_inside_a_rollout_batch_moves_to_the_end_of_that_batch_only_for_aer():
    asked = {1: False, 2: False, 3: True, 4: False, 5: False, 6: True, 7: False, 8: False}  # save_steps=3
    assert saves(AERCallback(), args(steps_per_generation=2), asked) == [4, 6]  # 2 optimizer steps per batch
    assert saves(AERCallback(), args(steps_per_generation=2, aer_measurements=False), asked) == [3, 6]
    assert saves(AERCallback(), args(steps_per_generation=1), asked) == [3, 6]  # every step ends a rollout batch


def test_the_last_step_inside_a_rollout_batch_writes_no_checkpoint_and_says_so():
    with pytest.warns(UserWarning, match="step 9 ends inside a rollout batch"):
        assert saves(AERCallback(), args(steps_per_generation=2), {8: False, 9: True}, max_steps=9) == []


def test_a_log_step_is_one_short_line_and_the_default_bar_becomes_the_compact_one(tmp_path):
    """transformers prints every log step's whole dict (1,250 characters with AER's telemetry); the run prints one
    short line (everything is in metrics.jsonl), and a bar of the user's own is left alone."""
    from types import SimpleNamespace

    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from aer_trl.callbacks import CompactPrinterCallback, log_line, use_compact_log_lines
    from tests import helpers

    state = SimpleNamespace(global_step=3, max_steps=10)
    logs = {"loss": 0.0123456, "reward": 0.5, "aer/entropy": 0.4521, "aer/alpha": 0.005, "learning_rate": 1e-6,
            "completions/mean_length": 48.0, **{f"aer/other_{i}": 1.0 for i in range(40)}}  # fmt: skip
    line = log_line(state, logs)
    assert line == "step 3/10 | loss 0.01235 | reward 0.5 | entropy 0.4521 | alpha 0.005 | length 48 | lr 1e-06"
    assert log_line(state, {"train_runtime": 12.3, "train_loss": 0.5}) == "done: 3 steps in 12 s, mean loss 0.5"
    trainer = helpers.make_trainer(helpers.make_tokenizer(), helpers.make_config(tmp_path))  # disable_tqdm: a printer
    use_compact_log_lines(trainer)
    kinds = [type(cb) for cb in trainer.callback_handler.callbacks]
    assert CompactPrinterCallback in kinds and PrinterCallback not in kinds

    class Mine(ProgressCallback):
        pass

    trainer.add_callback(Mine())
    use_compact_log_lines(trainer)
    assert Mine in [type(cb) for cb in trainer.callback_handler.callbacks]
