"""AERGRPOTrainer on CPU in one process: equivalence with GRPO, the bonus formula, the controller wiring, resume."""

import json
import logging
import math

import pytest
import torch
import torch.nn.functional as F
from trl import GRPOConfig, GRPOTrainer

from aer_trl import AERCallback, AERGRPOTrainer
from tests import helpers


def train_aer(tmp_path, tokenizer, reward_funcs=None, seed=0, **overrides):
    args = helpers.make_config(tmp_path, **overrides)
    trainer = helpers.make_trainer(tokenizer, args, seed=seed, reward_funcs=reward_funcs)
    trainer.train()
    return trainer


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_same_params(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def alphas(trainer):
    return [h["alpha"] for h in trainer.aer_callback.controller.history]


# ----------------------------------------------------------------------------------------- equivalence with GRPO
def test_bonus_off_trains_exactly_like_grpo(tmp_path, tokenizer):
    rewards = [helpers.even_length_reward, helpers.digit_count_reward]
    aer = train_aer(tmp_path / "aer", tokenizer, rewards, aer_adaptive=False, aer_alpha_init=0.0, max_steps=4)
    grpo_args = GRPOConfig(**helpers.config_kwargs(tmp_path / "grpo", max_steps=4))
    grpo = GRPOTrainer(
        model=helpers.make_model(tokenizer),
        reward_funcs=rewards,
        args=grpo_args,
        train_dataset=helpers.make_dataset(),
        processing_class=tokenizer,
    )
    before = params(grpo.model)
    grpo.train()
    assert any(not torch.equal(before[n], p) for n, p in params(grpo.model).items()), "GRPO did not train"
    assert_same_params(params(aer.model), params(grpo.model))


def test_bonus_acts_only_through_hard_prompts(tmp_path, tokenizer):
    """Correctness from a reward that calls every prompt easy: λ = 0, so α > 0 changes nothing; all-hard changes it."""
    common = dict(aer_adaptive=False, aer_alpha_init=1.0, max_steps=3)
    shaping = helpers.digit_count_reward
    easy = train_aer(
        tmp_path / "easy",
        tokenizer,
        [shaping, helpers.always_correct],
        **common,
        aer_correctness_reward="always_correct",
    )
    off = train_aer(
        tmp_path / "off",
        tokenizer,
        [shaping, helpers.always_correct],
        aer_adaptive=False,
        aer_alpha_init=0.0,
        max_steps=3,
    )
    hard = train_aer(tmp_path / "hard", tokenizer, [shaping, helpers.always_wrong], **common, aer_correctness_reward=1)
    assert_same_params(params(easy.model), params(off.model))
    assert any(not torch.equal(p, params(off.model)[n]) for n, p in params(hard.model).items())
    logs = [h for h in hard.state.log_history if "aer/hard_fraction" in h]
    assert all(h["aer/hard_fraction"] == 1.0 and h["aer/lambda_mean"] == pytest.approx(1.0) for h in logs)
    easy_logs = [h for h in easy.state.log_history if "aer/hard_fraction" in h]
    assert all(h["aer/hard_fraction"] == 0.0 and h["aer/lambda_mean"] == 0.0 for h in easy_logs)


# ----------------------------------------------------------------------------------------- loss on a fixed batch
def fixed_batch(tokenizer, lam):
    torch.manual_seed(1)
    b, p_len, c_len = len(lam), 5, 6
    vocab = len(tokenizer)
    completion_mask = torch.ones(b, c_len, dtype=torch.long)
    completion_mask[1, 4:] = 0  # padding inside the batch
    completion_mask[3, 2:] = 0
    return {
        "prompt_ids": torch.randint(4, vocab, (b, p_len)),
        "prompt_mask": torch.ones(b, p_len, dtype=torch.long),
        "completion_ids": torch.randint(4, vocab, (b, c_len)),
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.0, -0.5, 0.25, -0.75]),
        "num_items_in_batch": completion_mask.sum(),
        "aer_lambda": torch.tensor(lam),
    }


def manual_sequence_entropy(model, batch, temperature):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    c_len = batch["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=att).logits[:, -c_len - 1 : -1] / temperature
    logp = F.log_softmax(logits.float(), -1)
    h = -(logp.exp() * logp).sum(-1)
    m = batch["completion_mask"].float()
    return (h * m).sum(-1) / m.sum(-1)


def grads(model, loss):
    model.zero_grad()
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_loss_is_grpo_minus_mean_lambda_entropy(tmp_path, tokenizer, temperature):
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, temperature=temperature))
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; we call compute_loss directly
    lam = [0.6, 0.0, 0.3, 0.0]  # prompts 0 and 2 hard, 1 and 3 easy
    batch = fixed_batch(tokenizer, lam)
    plain = {k: v for k, v in batch.items() if k != "aer_lambda"}

    loss_aer = trainer.compute_loss(model, batch)
    g_aer = grads(model, loss_aer)
    loss_grpo = GRPOTrainer.compute_loss(trainer, model, plain)
    g_grpo = grads(model, loss_grpo)
    h = manual_sequence_entropy(model, batch, temperature)
    bonus = (torch.tensor(lam) * h).mean()
    torch.testing.assert_close(loss_aer, loss_grpo - bonus, rtol=1e-5, atol=1e-6)

    # the bonus's gradient is the gradient of -mean(λ·H) (hard rows only), computed independently
    g_bonus = grads(model, -bonus)
    for name in g_grpo:
        torch.testing.assert_close(g_aer[name], g_grpo[name] + g_bonus[name], rtol=1e-4, atol=1e-6)
    # ...and it is not zero: the hard prompts do move the parameters
    assert any(g_bonus[n].abs().sum() > 0 for n in g_bonus)

    # all prompts easy (λ = 0): exactly GRPO, bit for bit
    easy = dict(batch, aer_lambda=torch.zeros(4))
    g_easy = grads(model, trainer.compute_loss(model, easy))
    for name in g_grpo:
        assert torch.equal(g_easy[name], g_grpo[name]), name


def test_bonus_is_scaled_for_gradient_accumulation(tmp_path, tokenizer):
    trainer = helpers.make_trainer(
        tokenizer, helpers.make_config(tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=4)
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    batch = fixed_batch(tokenizer, [0.5, 0.5, 0.0, 0.0])
    plain = {k: v for k, v in batch.items() if k != "aer_lambda"}
    with torch.no_grad():
        diff = GRPOTrainer.compute_loss(trainer, trainer.model, plain) - trainer.compute_loss(trainer.model, batch)
        h = manual_sequence_entropy(trainer.model, batch, 1.0)
    torch.testing.assert_close(diff, (torch.tensor([0.5, 0.5, 0.0, 0.0]) * h).mean() / 2, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------- controller wiring
def test_h0_is_the_first_measured_entropy(tmp_path, tokenizer):
    trainer = train_aer(tmp_path, tokenizer, max_steps=1)
    first = trainer.state.log_history[0]
    assert trainer.aer_callback.initial_entropy == pytest.approx(first["entropy"], rel=1e-6)
    assert first["aer/initial_entropy"] == pytest.approx(first["entropy"], rel=1e-6)
    assert first["aer/target_entropy"] == pytest.approx(0.4 * first["entropy"], rel=1e-6)
    for key in ("aer/alpha", "aer/entropy", "aer/lambda_mean", "aer/hard_fraction", "aer/group_accuracy"):
        assert key in first, key


def test_alpha_rises_below_target_and_falls_but_not_below_zero_above(tmp_path, tokenizer):
    up = train_aer(tmp_path / "up", tokenizer, aer_fixed_target=100.0, aer_eta=0.01, max_steps=4)
    assert alphas(up) == pytest.approx([0.01, 0.02, 0.03, 0.04])
    down = train_aer(
        tmp_path / "down", tokenizer, aer_fixed_target=1e-3, aer_eta=0.01, aer_alpha_init=0.025, max_steps=4
    )
    assert alphas(down) == pytest.approx([0.015, 0.005, 0.0, 0.0])


def test_method_aer_prop_moves_alpha_by_the_proportional_step_in_training(tmp_path, tokenizer):
    """Ours (method aer_prop): α_{t+1} = [α_t + η·(H* − H_t)/H*]_+ from the entropies the trainer measured."""
    trainer = train_aer(tmp_path, tokenizer, method="aer_prop", aer_fixed_target=5.0, aer_eta=0.01, max_steps=4)
    assert trainer.args.aer_step == "proportional"
    measured = [h["entropy"] for h in trainer.aer_callback.controller.history]
    expected, alpha = [], 0.0
    for h in measured:
        alpha = max(0.0, alpha + 0.01 * (5.0 - h) / 5.0)
        expected.append(alpha)
    assert alphas(trainer) == pytest.approx(expected, rel=1e-9)
    assert len(set(alphas(trainer))) == 4 and alphas(trainer) != pytest.approx([0.01, 0.02, 0.03, 0.04])


def test_method_aer_pi_steers_alpha_by_the_pi_law_and_the_gate_zeroes_the_applied_alpha(tmp_path, tokenizer):
    """Ours (method aer_pi): α_t = clip(kp·e_t + ki·Σe, 0, α_max) from the entropies the trainer measured, and the
    α the loss applies (logged aer/alpha) is 0 after a batch at or above H*."""
    from aer_trl.controller import pi_step

    trainer = train_aer(tmp_path, tokenizer, method="aer_pi", aer_fixed_target=5.0, max_steps=4)
    assert trainer.args.aer_step == "pi" and trainer.args.aer_gate
    measured = [h["entropy"] for h in trainer.aer_callback.controller.history]
    expected, integral = [], 0.0
    for h in measured:
        alpha, integral = pi_step(integral, h, 5.0, kp=0.1, ki=0.02)
        expected.append(alpha)
    assert alphas(trainer) == pytest.approx(expected, rel=1e-9) and all(a > 0 for a in expected)
    logged = [r["aer/alpha"] for r in trainer.state.log_history if "aer/alpha" in r and "train_runtime" not in r]
    assert logged == pytest.approx(expected)  # logged after step t's update: the α step t + 1 trains with

    shut = train_aer(tmp_path / "gate", tokenizer, method="aer_pi", aer_fixed_target=1e-3, max_steps=3)
    assert [h["applied_alpha"] for h in shut.aer_callback.controller.history] == [0.0, 0.0, 0.0]
    assert shut.aer_callback.alpha == 0.0


@pytest.mark.parametrize(
    ("overrides", "steps", "iterations"),
    [
        ({"gradient_accumulation_steps": 2}, 3, 3),  # default: one rollout batch per optimizer step
        ({"gradient_accumulation_steps": 2, "steps_per_generation": 4}, 4, 2),  # rollout spans 2 optimizer steps
        ({"steps_per_generation": 1, "num_iterations": 2}, 4, 2),  # each rollout trained on twice
        ({"gradient_accumulation_steps": 4, "steps_per_generation": 2}, 2, 4),  # two rollouts per optimizer step
    ],
)
def test_alpha_updates_once_per_rollout_batch(tmp_path, tokenizer, overrides, steps, iterations):
    trainer = train_aer(tmp_path, tokenizer, aer_fixed_target=100.0, aer_eta=0.01, max_steps=steps, **overrides)
    assert trainer.aer_callback.controller.iteration == iterations
    assert alphas(trainer) == pytest.approx([0.01 * (i + 1) for i in range(iterations)])
    logged = [h["aer/alpha"] for h in trainer.state.log_history if "loss" in h]
    per_step = iterations / steps
    assert logged == pytest.approx([0.01 * int((s + 1) * per_step) for s in range(steps)])


def test_entropy_is_token_weighted_over_the_rollout_batch(tmp_path, tokenizer, monkeypatch):
    """H_t = Σ H over every trained token of the rollout batch / token count, not a mean of micro-batch means."""
    seen = []
    original = AERGRPOTrainer.compute_loss

    def spy(self, model, inputs, *a, **kw):
        loss = original(self, model, inputs, *a, **kw)
        seen.append(self._aer_entropy_stats.clone())
        return loss

    monkeypatch.setattr(AERGRPOTrainer, "compute_loss", spy)
    trainer = train_aer(
        tmp_path,
        tokenizer,
        gradient_accumulation_steps=2,
        steps_per_generation=2,
        max_steps=1,
        max_completion_length=12,
    )
    total = seen[-1]  # running (sum, count) after the last micro-batch of the rollout
    assert len(seen) == 2 and total[1] > seen[0][1]
    assert trainer.aer_callback.initial_entropy == pytest.approx((total[0] / total[1]).item(), rel=1e-6)


def test_works_with_peft_lora(tmp_path, tokenizer):
    from peft import LoraConfig

    args = helpers.make_config(tmp_path, aer_fixed_target=100.0, aer_alpha_init=0.5, max_steps=2, learning_rate=5e-2)
    trainer = helpers.make_trainer(
        tokenizer, args, peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    lora_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert lora_before and any(
        not torch.equal(p, lora_before[n]) for n, p in trainer.model.named_parameters() if "lora_B" in n
    )
    assert trainer.aer_callback.controller.iteration == 2


def test_requires_a_grpo_config_and_valid_correctness_reward(tmp_path, tokenizer):
    with pytest.raises(TypeError, match="AERGRPOConfig or a trl.GRPOConfig"):
        helpers.make_trainer(tokenizer, {"output_dir": str(tmp_path)}, reward_funcs=[helpers.always_correct])
    with pytest.raises(ValueError, match="aer_correctness_reward='nope' is not one of"):
        helpers.make_trainer(
            tokenizer,
            helpers.make_config(tmp_path, aer_correctness_reward="nope"),
            reward_funcs=[helpers.always_correct],
        )


def test_nan_rewards_are_left_out_of_group_accuracy(tmp_path, tokenizer):
    def half_unscorable(completions, **kwargs):
        return [None if i % 2 else 0.0 for i in range(len(completions))]

    trainer = train_aer(tmp_path, tokenizer, [half_unscorable], max_steps=2, aer_alpha_init=0.2, aer_adaptive=False)
    logs = [h for h in trainer.state.log_history if "aer/group_accuracy" in h]
    assert all(h["aer/group_accuracy"] == 0.0 and h["aer/lambda_mean"] == pytest.approx(0.2) for h in logs)

    def unscorable(completions, **kwargs):
        return [None] * len(completions)

    trainer = train_aer(tmp_path / "none", tokenizer, [unscorable], max_steps=1, aer_alpha_init=0.2)
    log = trainer.state.log_history[0]
    assert log["aer/lambda_mean"] == 0.0 and log["aer/hard_fraction"] == 0.0


def test_reward_functions_are_told_which_completions_the_length_limit_cut(tmp_path, tokenizer):
    """`completion_truncated`, per completion: all `max_completion_length` tokens used and the last neither EOS nor
    padding (TRL's own test of truncation; the length keeps a completion a stop string ended from counting)."""
    seen = []

    def recording(completions, completion_ids, completion_truncated, **kwargs):
        seen.extend(zip(completion_ids, completion_truncated, strict=True))
        return [0.0] * len(completions)

    trainer = train_aer(tmp_path, tokenizer, [recording], max_steps=2, max_completion_length=4)
    ends = {*trainer.eos_token_ids, tokenizer.pad_token_id}
    assert seen and all(cut == (ids[-1] not in ends and len(ids) == 4) for ids, cut in seen)
    assert any(cut for _, cut in seen)  # an untrained model rarely stops within 4 tokens


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
    with caplog.at_level(logging.WARNING, logger="aer_trl.trainer"):
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
    with caplog.at_level(logging.WARNING, logger="aer_trl.trainer"):
        same.train(resume_from_checkpoint=str(ckpt))
    assert same.aer_resume_changes == {} and "differ from the checkpoint" not in caplog.text
    assert alphas(same) == alphas(full)

    changed = helpers.make_trainer(
        tokenizer,
        helpers.make_config(tmp_path / "changed", aer_tau=0.5, logging_steps=2, learning_rate=5e-2, **common),
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aer_trl.trainer"):
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
    with caplog.at_level(logging.WARNING, logger="aer_trl.trainer"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "grpo" / "checkpoint-2"))
    assert "without AER's controller state" in caplog.text
    assert resumed.aer_callback.controller.iteration == 2  # H0 anchored after the resume, α updated from there


def test_lambda_is_kept_on_the_host(tmp_path, tokenizer):
    """λ rides through TRL's shuffle/split as a host tensor, so skipping λ = 0 micro-batches never waits on a GPU."""
    trainer = train_aer(tmp_path, tokenizer, max_steps=1)
    lams = [batch["aer_lambda"] for batch in trainer._buffered_inputs]
    assert lams and all(lam.device.type == "cpu" and lam.dim() == 1 for lam in lams)


def test_resume_from_every_checkpoint_at_an_off_policy_geometry(tmp_path, tokenizer):
    """steps_per_generation = 2 x gradient_accumulation_steps and num_iterations = 2: a rollout batch spans 4
    optimizer steps. save_steps=1 is rounded up to 4 (a checkpoint inside an AER iteration cannot be resumed
    exactly), and resuming from every checkpoint continues the uninterrupted α trajectory, H0 and H*."""
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
    assert full.args.save_steps == 4
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


def test_clip_cov_cut_tokens_keep_their_kl_gradient(tmp_path, tokenizer):
    """Clip-Cov cuts only the policy-gradient term of a token (per-token advantage 0, as verl masks pg_losses): with
    β > 0 the KL term's gradient survives. Every token is cut here, so the loss and its gradient are exactly TRL's
    with zero advantages, i.e. β·KL alone."""

    def trainer_for(method, **extra):
        t = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / method, method=method, **extra))
        t.beta = 0.5  # after construction: no reference model is built, the batch carries its log-probs
        t.model.train()
        t.current_gradient_accumulation_steps = 1
        return t

    batch = fixed_batch(tokenizer, [0.0] * 4)
    batch["ref_per_token_logps"] = torch.full(batch["completion_ids"].shape, -3.0)
    cut_all = dict(clip_cov_ratio=1.0, clip_cov_lb=-1e9, clip_cov_ub=1e9)
    cov = trainer_for("clip_cov", **cut_all)
    loss = cov.compute_loss(cov.model, dict(batch))
    assert cov._metrics["train"]["clip_cov/zeroed_fraction"][-1] == 1.0
    plain = trainer_for("grpo")
    zero_adv = dict(batch, advantages=torch.zeros(4))
    reference = plain.compute_loss(plain.model, zero_adv)
    torch.testing.assert_close(loss, reference)
    g_cov, g_ref = grads(cov.model, loss), grads(plain.model, reference)
    assert any(g.abs().sum() > 0 for g in g_ref.values()), "the KL term must carry gradient for this test to mean it"
    for name in g_ref:
        torch.testing.assert_close(g_cov[name], g_ref[name], msg=name)


def test_per_difficulty_telemetry(tmp_path, tokenizer):
    """Share, λ, accuracy and token-weighted entropy per bucket of g (unsolved / hard / learning / solved)."""
    trainer = train_aer(tmp_path, tokenizer, max_steps=3, aer_alpha_init=0.1, aer_rho=0.5)
    for h in [h for h in trainer.state.log_history if "loss" in h]:
        shares = [h[f"aer/bucket/{b}/share"] for b in ("unsolved", "hard", "learning", "solved")]
        assert sum(shares) == pytest.approx(1.0)
        entropies = [v for k, v in h.items() if k.startswith("aer/bucket/") and k.endswith("/entropy")]
        assert entropies and min(entropies) - 1e-6 <= h["aer/entropy"] <= max(entropies) + 1e-6  # a weighted mean
        if "aer/bucket/solved/lambda" in h:
            assert h["aer/bucket/solved/lambda"] == 0.0  # solved prompts never get the bonus


# ---------------------------------------------------------------------------------- ours: forking tokens, anchor
def test_forking_token_bonus_is_grpo_minus_mean_lambda_top_entropy_tokens(tmp_path, tokenizer):
    """aer_bonus_quantile < 1 (method aer_fork): H_i over the batch's top-entropy tokens, computed independently."""
    from aer_trl.controller import sequence_entropy

    trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, method="aer_fork"))
    assert trainer.args.aer_bonus_quantile == 0.2  # the method's default
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    lam = [0.6, 0.0, 0.3, 0.0]
    batch = fixed_batch(tokenizer, lam)
    plain = {k: v for k, v in batch.items() if k != "aer_lambda"}
    loss_aer = trainer.compute_loss(model, batch)
    loss_grpo = GRPOTrainer.compute_loss(trainer, model, plain)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    c_len = batch["completion_ids"].size(1)
    logp = F.log_softmax(model(input_ids=ids, attention_mask=att).logits[:, -c_len - 1 : -1].float(), -1)
    tokens = -(logp.exp() * logp).sum(-1)
    fork = sequence_entropy(tokens, batch["completion_mask"], 0.2)
    every = sequence_entropy(tokens, batch["completion_mask"], 1.0)
    torch.testing.assert_close(loss_aer, loss_grpo - (torch.tensor(lam) * fork).mean(), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(fork, every)  # the test tells the two apart


def test_capped_bonus_is_grpo_minus_mean_lambda_min_entropy_target(tmp_path, tokenizer):
    """Method aer_cap (ours): the entropy term is λ_i·min(H_i, H*), computed independently; rows above H* get no
    gradient from the bonus."""
    from aer_trl.controller import sequence_entropy

    probe = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "p"))
    batch = fixed_batch(tokenizer, [0.6, 0.0, 0.3, 0.5])
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    c_len = batch["completion_ids"].size(1)
    with torch.no_grad():
        logp = F.log_softmax(probe.model(input_ids=ids, attention_mask=att).logits[:, -c_len - 1 : -1].float(), -1)
    h = sequence_entropy(-(logp.exp() * logp).sum(-1), batch["completion_mask"])
    target = float(h.median())  # the cap binds on some rows and not on others
    args = helpers.make_config(tmp_path / "c", method="aer_cap", aer_fixed_target=target)
    trainer = helpers.make_trainer(tokenizer, args)
    assert trainer.args.aer_bonus_cap == 1.0
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    lam = torch.tensor([0.6, 0.0, 0.3, 0.5])
    plain = {k: v for k, v in batch.items() if k != "aer_lambda"}
    loss_cap = trainer.compute_loss(model, batch)
    loss_grpo = GRPOTrainer.compute_loss(trainer, model, plain)
    torch.testing.assert_close(loss_cap, loss_grpo - (lam * torch.clamp(h, max=target)).mean(), rtol=1e-5, atol=1e-6)
    assert (h > target).any() and (h < target).any()


@pytest.mark.parametrize("share", [False, True], ids=["trl-forward", "shared-prompt-forward"])
def test_truncated_support_bonus_is_grpo_minus_mean_lambda_topk_entropy(tmp_path, tokenizer, share):
    """Method aer_topk (ours): H_i over each token's top-k renormalised distribution at TRL's temperature, computed
    independently from the model's logits, through TRL's forward and the shared-prompt one; TRL's loss reads the same
    log-probs as through its fused head, and the controller still measures the full entropy."""
    from aer_trl.controller import sequence_entropy, truncated_entropy

    settings = dict(method="aer_topk", aer_bonus_top_k=3, temperature=0.7)
    # the shared-prompt forward is the research bench's (its config and trainer)
    args = helpers.make_bench_config(tmp_path, share_prompt_forward=True, **settings) if share else None
    args = args or helpers.make_config(tmp_path, **settings)
    trainer = helpers.make_trainer(tokenizer, args)
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    lam = torch.tensor([0.6, 0.0, 0.3, 0.5])
    batch = fixed_batch(tokenizer, lam.tolist())
    batch["prompt_ids"][1], batch["prompt_ids"][3] = batch["prompt_ids"][0], batch["prompt_ids"][2]  # groups of 2
    plain = {k: v for k, v in batch.items() if k != "aer_lambda"}
    calls, support_logps = [], trainer._support_logps
    trainer._support_logps = lambda *a, **k: calls.append(1) or support_logps(*a, **k)
    loss = trainer.compute_loss(model, batch)
    assert calls == ([] if share else [1])  # the shared forward's own logits head, or the plain one
    stats = trainer._aer_entropy_stats
    loss_grpo = GRPOTrainer.compute_loss(trainer, model, plain)  # TRL's fused head (or the shared fused forward)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    c_len = batch["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=att).logits[:, -c_len - 1 : -1].float() / 0.7
    topk = sequence_entropy(truncated_entropy(logits, 3), batch["completion_mask"])
    torch.testing.assert_close(loss, loss_grpo - (lam * topk).mean(), rtol=1e-5, atol=1e-6)
    full = manual_sequence_entropy(model, batch, 0.7)
    assert (topk < full).all() and (topk <= math.log(3) + 1e-6).all()  # the test tells the two apart
    m = batch["completion_mask"].float()
    torch.testing.assert_close(stats[0] / stats[1], (full * m.sum(-1)).sum() / m.sum(), rtol=1e-5, atol=1e-6)


def test_anchor_over_three_rollouts_in_training(tmp_path, tokenizer):
    trainer = train_aer(tmp_path, tokenizer, aer_anchor_rollouts=3, aer_alpha_init=0.05, aer_eta=0.01, max_steps=5)
    logs = [h for h in trainer.state.log_history if "aer/entropy" in h]
    measured = [h["aer/entropy"] for h in logs]
    assert trainer.aer_callback.initial_entropy == pytest.approx(sum(measured[:3]) / 3, rel=1e-6)
    assert "aer/initial_entropy" not in logs[0] and "aer/initial_entropy" not in logs[1]
    assert alphas(trainer)[:2] == [0.05, 0.05]  # no target yet: α stays at its initial value
    assert logs[2]["aer/target_entropy"] == pytest.approx(0.4 * trainer.aer_callback.initial_entropy, rel=1e-6)


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


def spy_on_generate(trainer):
    """Records each `_generate` call's prompts and completion lengths."""
    calls, generate = [], trainer._generate

    def spy(prompts):
        out = generate(prompts)
        calls.append((list(prompts), [len(c) for c in out[1]]))
        return out

    trainer._generate = spy
    return calls


def test_probe_anchors_h0_before_step_1_and_leaves_the_rollout_metrics_alone(tmp_path, tokenizer):
    args = helpers.make_config(tmp_path, aer_anchor_probe=6, aer_tau=2.0, aer_eta=0.01, max_steps=2)
    trainer = helpers.make_trainer(tokenizer, args)
    calls = spy_on_generate(trainer)
    trainer.train()
    (probe, probe_lengths), (step1, step1_lengths), _ = calls
    assert len(probe) == 6 * 4 and len(set(probe)) == 6  # 6 prompts x num_generations, from the training set
    assert set(probe) <= set(helpers.make_dataset()["prompt"])
    logs = [h for h in trainer.state.log_history if "aer/entropy" in h]
    h0 = logs[0]["aer/anchor_probe_entropy"]
    assert trainer.aer_callback.initial_entropy == pytest.approx(h0, rel=1e-6) and h0 > 0
    assert abs(h0 - logs[0]["aer/entropy"]) > 1e-6  # not the first rollout batch's
    assert logs[0]["aer/target_entropy"] == pytest.approx(2 * h0, rel=1e-6)  # τ = 2
    assert alphas(trainer)[0] == 0.01  # α moves from the first rollout batch on: H0 is known before it
    # step 1 logs its own rollout batch only, as it would without the probe
    assert logs[0]["completions/mean_length"] == pytest.approx(sum(step1_lengths) / len(step1_lengths))
    prompt_tokens = sum(len(tokenizer(p)["input_ids"]) for p in step1)
    assert logs[0]["num_tokens"] == prompt_tokens + sum(step1_lengths)


def test_probe_is_not_taken_again_on_resume(tmp_path, tokenizer):
    common = dict(aer_anchor_probe=4, aer_tau=1.0, aer_eta=0.01, max_steps=4, save_strategy="steps", save_steps=2)
    full = train_aer(tmp_path / "full", tokenizer, **common)
    resumed = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "resumed", **common))
    calls = spy_on_generate(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert len(calls) == 2  # steps 3 and 4, no probe
    assert resumed.aer_callback.initial_entropy == full.aer_callback.initial_entropy
    assert alphas(resumed) == alphas(full)


def test_probe_leaves_truncated_completions_out_when_training_does(tmp_path, tokenizer):
    """With mask_truncated_completions, the probe measures H0 over the completions that ended, as H_t is measured:
    the same probe completions (same seed) give another H0 than without the mask."""
    runs = []
    for masked in (False, True):
        args = helpers.make_config(
            tmp_path / str(masked), aer_anchor_probe=16, mask_truncated_completions=masked, max_steps=1
        )
        trainer = helpers.make_trainer(tokenizer, args)
        calls = spy_on_generate(trainer)
        trainer.train()
        runs.append((calls[0], trainer.aer_callback.initial_entropy))
    (probe, lengths), h0 = runs[0]
    assert runs[1][0] == (probe, lengths)  # the same completions
    assert 0 < sum(n < 8 for n in lengths) < len(lengths)  # some ended, some were cut at max_completion_length
    assert runs[1][1] > 0 and abs(runs[1][1] - h0) > 1e-4
