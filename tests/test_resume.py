"""aer_trl.resume: killed and resumed, changed and resumed, a run resumes exactly as the one never stopped, and says
what it cannot carry over."""

import json
import logging

import pytest
import torch

from aer_trl import AERCallback
from tests import helpers
from tests.helpers import alphas, params, train_aer


def aer_logs(trainer, after: int) -> dict[int, dict]:
    """The aer/* values of each training log after step `after`."""
    return {
        h["step"]: {k: v for k, v in h.items() if k.startswith("aer/")}
        for h in trainer.state.log_history
        if "loss" in h and h["step"] > after
    }


# ----------------------------------------------------------------------------------------- resume
@pytest.mark.parametrize("restore_flag", [False, True])
def test_resume_continues_the_same_alpha_trajectory(tmp_path, tokenizer, restore_flag):
    common = dict(
        aer_tau=1.0,
        aer_eta=0.01,
        aer_alpha_init=0.02,
        max_steps=6,
        save_strategy="steps",
        save_steps=3,
        learning_rate=5e-2,
        restore_callback_states_from_checkpoint=restore_flag,
    )
    full = train_aer(tmp_path / "full", tokenizer, **common)
    ckpt = tmp_path / "full" / "checkpoint-3"
    saved = json.loads((ckpt / "trainer_state.json").read_text())["stateful_callbacks"]["AERCallback"]
    assert saved["attributes"]["controller_state"]["iteration"] == 3

    args = helpers.make_config(tmp_path / "resumed", **common)
    resumed = helpers.make_trainer(tokenizer, args)
    resumed.train(resume_from_checkpoint=str(ckpt))
    a, b = full.aer_callback.controller, resumed.aer_callback.controller
    assert len(set(alphas(full))) > 1, "the trajectory should move for this test to mean something"
    assert alphas(resumed) == alphas(full)
    assert (b.initial_entropy, b.target, b.iteration) == (a.initial_entropy, a.target, a.iteration)
    assert isinstance(resumed.aer_callback, AERCallback)


def test_a_finished_run_started_again_trains_nothing_more(tmp_path, tokenizer, caplog):
    """Resumed from its last checkpoint at max_steps (a job queued again, a kill after the last save), a run ends as
    the uninterrupted one did; transformers alone trains one step more (trl.GRPOTrainer: global_step 3 of 2)."""
    common = dict(aer_alpha_init=0.02, aer_eta=0.01, max_steps=2, save_strategy="steps", save_steps=1)
    full = train_aer(tmp_path / "full", tokenizer, **common)
    again = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "full", **common))
    with caplog.at_level(logging.WARNING, logger="aer_trl.resume"):
        again.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert again.state.global_step == 2 and not (tmp_path / "full" / "checkpoint-3").exists()
    assert "nothing left to train" in caplog.text
    assert alphas(again) == alphas(full)
    assert all(torch.equal(a, b) for a, b in zip(params(again.model).values(), params(full.model).values()))


def test_resuming_an_aer_checkpoint_as_a_trl_method_says_what_changed(tmp_path, tokenizer, caplog):
    """AER's checkpoint resumed with method grpo (no controller): not silent; the changes are named and the
    controller's α is said to be unused."""
    common = dict(max_steps=3, save_strategy="steps", save_steps=2)
    train_aer(tmp_path / "aer", tokenizer, aer_alpha_init=0.02, aer_eta=0.01, **common)
    grpo = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "grpo", method="grpo", **common))
    with caplog.at_level(logging.WARNING, logger="aer_trl.adapter"):
        grpo.train(resume_from_checkpoint=str(tmp_path / "aer" / "checkpoint-2"))
    assert grpo.aer_resume_changes["method"] == ("aer", "grpo") and grpo.state.global_step == 3
    alpha = json.loads((tmp_path / "aer" / "checkpoint-2" / "trainer_state.json").read_text())["stateful_callbacks"]
    alpha = alpha["AERCallback"]["attributes"]["controller_state"]["alpha"]
    assert "method 'aer' -> 'grpo'" in caplog.text and f"the checkpoint's α={alpha} is not used" in caplog.text


@pytest.mark.parametrize("restore_flag", [False, True])
def test_a_resume_with_a_changed_setting_applies_it_and_says_so(tmp_path, tokenizer, restore_flag, caplog):
    """Change one argument and resume: the new value applies from the checkpoint on (also where transformers would
    rebuild the callback from the checkpoint's arguments), the controller's state carries over, and the change is
    named; bookkeeping (output_dir, logging) is not a change."""
    common = dict(
        aer_eta=0.01,
        aer_alpha_init=0.02,
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        restore_callback_states_from_checkpoint=restore_flag,
    )
    full = train_aer(tmp_path / "full", tokenizer, aer_tau=1.0, **common)
    ckpt = tmp_path / "full" / "checkpoint-2"
    saved = json.loads((ckpt / "trainer_state.json").read_text())["stateful_callbacks"]["AERCallback"]
    assert saved["attributes"]["settings"]["aer_tau"] == 1.0 and "output_dir" not in saved["attributes"]["settings"]

    same = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "same", aer_tau=1.0, **common))
    with caplog.at_level(logging.WARNING, logger="aer_trl.adapter"):
        same.train(resume_from_checkpoint=str(ckpt))
    assert same.aer_resume_changes == {} and "differ from the checkpoint" not in caplog.text
    assert alphas(same) == alphas(full)

    changed = helpers.make_trainer(
        tokenizer,
        helpers.make_config(tmp_path / "changed", aer_tau=0.5, logging_steps=2, learning_rate=5e-2, **common),
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aer_trl.adapter"):
        changed.train(resume_from_checkpoint=str(ckpt))
    assert changed.aer_resume_changes == {"aer_tau": (1.0, 0.5), "learning_rate": (1e-2, 5e-2)}
    assert "Applied from here on: aer_tau 1.0 -> 0.5 " in caplog.text
    assert "NOT applied: learning_rate 0.01 -> 0.05 " in caplog.text  # what transformers does, said
    assert changed.optimizer.param_groups[0]["initial_lr"] == 1e-2
    ctrl, before = changed.aer_callback.controller, full.aer_callback.controller
    assert ctrl.tau == 0.5 and ctrl.initial_entropy == before.initial_entropy
    assert ctrl.target == pytest.approx(0.5 * before.initial_entropy)
    assert alphas(changed)[:2] == alphas(full)[:2]  # the checkpoint's history, then the new target's steps
    assert ctrl.iteration == 4


def test_a_deepspeed_resume_on_another_number_of_processes_says_the_way_out(caplog):
    """DeepSpeed refuses a ZeRO checkpoint on another number of processes; the warning before it says what to do."""
    from types import SimpleNamespace

    from aer_trl.resume import ResumeMixin

    trainer = SimpleNamespace(
        aer_resume_changes={"world_size": (2, 1)},
        accelerator=SimpleNamespace(is_main_process=True),
        state=SimpleNamespace(global_step=4),
        is_deepspeed_enabled=True,
    )
    with caplog.at_level(logging.WARNING, logger="aer_trl.resume"):
        ResumeMixin._warn_resume_changes(trainer, "α carries over")
    assert "world_size 2 -> 1" in caplog.text and "resume with 2 processes" in caplog.text
    assert "zero_to_fp32.py" in caplog.text
    caplog.clear()
    trainer.is_deepspeed_enabled = False  # DDP resumes on another number of processes; only the change is named
    with caplog.at_level(logging.WARNING, logger="aer_trl.resume"):
        ResumeMixin._warn_resume_changes(trainer, "α carries over")
    assert "world_size 2 -> 1" in caplog.text and "zero_to_fp32" not in caplog.text


def test_resuming_aer_from_a_checkpoint_without_its_state_says_so(tmp_path, tokenizer, caplog):
    common = dict(max_steps=4, save_strategy="steps", save_steps=2)
    train_aer(tmp_path / "grpo", tokenizer, method="grpo", aer_measurements=False, **common)
    resumed = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "aer", **common))
    with caplog.at_level(logging.WARNING, logger="aer_trl.adapter"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "grpo" / "checkpoint-2"))
    assert "without AER's controller state" in caplog.text
    assert resumed.aer_callback.controller.iteration == 2  # H0 anchored after the resume, α updated from there


def test_resume_from_every_checkpoint_at_an_off_policy_geometry(tmp_path, tokenizer):
    """steps_per_generation = 2 x gradient_accumulation_steps and num_iterations = 2: a rollout batch spans 4
    optimizer steps. save_steps=1: each save moves to the end of its rollout batch (a checkpoint inside an AER
    iteration cannot be resumed exactly), and resuming from every checkpoint continues the uninterrupted α
    trajectory, H0 and H*."""
    common = dict(
        aer_tau=1.0,
        aer_eta=0.01,
        aer_alpha_init=0.02,
        max_steps=12,
        steps_per_generation=2,
        num_iterations=2,
        save_strategy="steps",
        save_steps=1,
        learning_rate=5e-2,
    )
    full = train_aer(tmp_path / "full", tokenizer, **common)
    checkpoints = sorted((tmp_path / "full").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert [p.name for p in checkpoints] == ["checkpoint-4", "checkpoint-8", "checkpoint-12"]
    assert len(set(alphas(full))) > 1
    # every logging step carries every aer/* metric, including the steps without a new rollout batch (the entropy
    # ones once the first rollout batch has been measured, at step 4)
    logged = [h for h in full.state.log_history if "loss" in h]
    assert len(logged) == 12
    for key in ("aer/alpha", "aer/lambda_mean", "aer/hard_fraction", "aer/group_accuracy"):
        assert all(key in h for h in logged), key
    for key in ("aer/entropy", "aer/initial_entropy", "aer/target_entropy"):
        assert all(key in h for h in logged if h["step"] >= 4), key
    for ckpt in checkpoints[:-1]:
        resumed = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / f"resumed-{ckpt.name}", **common))
        resumed.train(resume_from_checkpoint=str(ckpt))
        a, b = full.aer_callback.controller, resumed.aer_callback.controller
        assert alphas(resumed) == alphas(full), ckpt.name
        assert (b.initial_entropy, b.target, b.iteration) == (a.initial_entropy, a.target, a.iteration)
        # and logs what the uninterrupted run logs (the values carried over steps without a new rollout batch too)
        step = int(ckpt.name.split("-")[1])
        assert aer_logs(resumed, after=step) == aer_logs(full, after=step), ckpt.name


@pytest.mark.slow  # 6-9 s on 2 cores
def test_resume_from_a_checkpoint_taken_while_h0_is_still_being_measured(tmp_path, tokenizer):
    common = dict(
        aer_anchor_rollouts=3, aer_tau=1.0, aer_eta=0.01, max_steps=5, save_strategy="steps", save_steps=2,
        learning_rate=5e-2,
    )  # fmt: skip
    full = train_aer(tmp_path / "full", tokenizer, **common)
    resumed = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "resumed", **common))
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert resumed.aer_callback.initial_entropy == pytest.approx(full.aer_callback.initial_entropy, rel=1e-6)
    assert alphas(resumed) == alphas(full)


def test_a_checkpoint_without_optimizer_state_resumes_on_the_learning_rate_schedule(tmp_path, caplog):
    """save_only_model: no optimizer.pt or scheduler.pt. transformers alone started the schedule over (lr 1e-2 at
    step 3 of a linear decay over 4 steps, resumed at step 2); the run continues it and says what is not restored."""
    import logging

    def config():
        return helpers.make_config(
            tmp_path,
            max_steps=4,
            save_strategy="steps",
            save_steps=1,
            save_only_model=True,
            lr_scheduler_type="linear",
        )

    first = helpers.make_trainer(helpers.make_tokenizer(), config())
    first.train()
    assert not (tmp_path / "checkpoint-2" / "scheduler.pt").exists()
    resumed = helpers.make_trainer(helpers.make_tokenizer(), config())
    with caplog.at_level(logging.WARNING, logger="aer_trl.resume"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert "holds no optimizer or scheduler state" in caplog.text
    logged = {r["step"]: r["learning_rate"] for r in resumed.state.log_history if "learning_rate" in r}
    assert logged[3] == pytest.approx(1e-2 * (1 - 2 / 4)) and logged[4] == pytest.approx(1e-2 * (1 - 3 / 4))


def test_a_resumed_clip_cov_run_draws_the_tokens_the_uninterrupted_run_draws(tmp_path, tokenizer):
    """Clip-Cov cuts tokens drawn at random (30% of them here, every token a candidate): the draw after a resume is
    the uninterrupted run's, so the final weights are equal (measured before the fix: the draw started over from
    the seed at the resume, and the weights differed)."""
    common = dict(
        method="clip_cov", clip_cov_ratio=0.3, clip_cov_lb=-1e9, clip_cov_ub=1e9, max_steps=4, save_strategy="steps",
        save_steps=2, learning_rate=5e-2,
    )  # fmt: skip
    full = train_aer(tmp_path / "full", tokenizer, **common)
    resumed = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "resumed", **common))
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    helpers.assert_same_params(params(resumed.model), params(full.model))
