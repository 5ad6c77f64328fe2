"""AERGRPOTrainer on CPU in one process: equivalence with GRPO, the bonus formula, the controller wiring, the
per-difficulty telemetry. Resuming: test_resume.py; the bench's variants through the trainer's seams (the anchor
probe, the top-k bonus): bench/tests/test_anchor_probe.py, bench/tests/test_truncated_support.py."""

import pytest
import torch
import torch.nn.functional as F
from trl import GRPOConfig, GRPOTrainer

from aer_trl import AERGRPOTrainer
from tests import helpers
from tests.helpers import alphas, assert_same_params, fixed_batch, grads, manual_sequence_entropy, params, train_aer


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


@pytest.mark.slow  # 6-9 s on 2 cores
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


def test_a_mixture_of_experts_loss_counts_the_router_loss_once(tmp_path, tokenizer):
    """On a MoE (Qwen3-30B-A3B's architecture) TRL adds the router's load-balancing loss, weighted by
    `router_aux_loss_coef`; AER's loss is TRL's minus the bonus, so the router loss is in it once: AER's loss with
    the coefficient at 0.5 minus AER's loss at 0 is what TRL's loss moves by, and is not zero."""
    batch = fixed_batch(tokenizer, [0.6, 0.0, 0.3, 0.0])
    plain = {k: v for k, v in batch.items() if k != "aer_lambda"}
    losses = {}
    for coef in (0.0, 0.5):
        trainer = AERGRPOTrainer(
            model=helpers.make_moe_model(tokenizer),
            reward_funcs=[helpers.even_length_reward],
            args=helpers.make_config(tmp_path / str(coef), router_aux_loss_coef=coef),
            train_dataset=helpers.make_dataset(),
            processing_class=tokenizer,
        )
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        with torch.no_grad():
            aer = trainer.compute_loss(trainer.model, dict(batch))
            trl = GRPOTrainer.compute_loss(trainer, trainer.model, dict(plain))
            bonus = (batch["aer_lambda"] * manual_sequence_entropy(trainer.model, batch, 1.0)).mean()
        torch.testing.assert_close(aer, trl - bonus, rtol=1e-5, atol=1e-6)
        losses[coef] = (aer, trl)
    router = losses[0.5][1] - losses[0.0][1]
    assert router.abs() > 1e-3  # the router's loss is in play
    torch.testing.assert_close(losses[0.5][0] - losses[0.0][0], router, rtol=1e-5, atol=1e-6)


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
        seen.append(self.aer_core.entropy_stats.clone())
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


def test_lambda_is_kept_on_the_host(tmp_path, tokenizer):
    """λ rides through TRL's shuffle/split as a host tensor, so skipping λ = 0 micro-batches never waits on a GPU."""
    trainer = train_aer(tmp_path, tokenizer, max_steps=1)
    lams = [batch["aer_lambda"] for batch in trainer._buffered_inputs]
    assert lams and all(lam.device.type == "cpu" and lam.dim() == 1 for lam in lams)


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


def test_a_bucket_empty_in_the_latest_rollout_batch_logs_no_value(tmp_path, tokenizer):
    """Every prompt solved in odd rollout batches, none in even ones: a step logs the accuracy, λ and entropy of the
    buckets its own batch has, never an earlier batch's (measured before the fix: the hard bucket's entropy 0.3491
    repeated over steps 4-10 of a real run whose batches there had no hard prompt)."""
    calls = []

    def alternating(completions, **kwargs):
        calls.append(None)
        return [float(len(calls) % 2)] * len(completions)

    trainer = train_aer(tmp_path, tokenizer, reward_funcs=[alternating], max_steps=4, aer_alpha_init=0.1)
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["aer/bucket/solved/share"] for h in logged] == [1.0, 0.0, 1.0, 0.0]
    for h in logged:
        for bucket in ("unsolved", "hard", "learning", "solved"):
            present = h[f"aer/bucket/{bucket}/share"] > 0
            for metric in ("accuracy", "lambda", "entropy"):
                assert (f"aer/bucket/{bucket}/{metric}" in h) == present, (h["step"], bucket, metric)


# ---------------------------------------------------------------------------------- ours: forking tokens, anchor
def test_forking_token_bonus_is_grpo_minus_mean_lambda_top_entropy_tokens(tmp_path, tokenizer):
    """aer_bonus_quantile < 1 (method aer_fork): H_i over the batch's top-entropy tokens, computed independently."""
    from aer_trl.core_algos import sequence_entropy

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
    from aer_trl.core_algos import sequence_entropy

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


def test_anchor_over_three_rollouts_in_training(tmp_path, tokenizer):
    trainer = train_aer(tmp_path, tokenizer, aer_anchor_rollouts=3, aer_alpha_init=0.05, aer_eta=0.01, max_steps=5)
    logs = [h for h in trainer.state.log_history if "aer/entropy" in h]
    measured = [h["aer/entropy"] for h in logs]
    assert trainer.aer_callback.initial_entropy == pytest.approx(sum(measured[:3]) / 3, rel=1e-6)
    assert "aer/initial_entropy" not in logs[0] and "aer/initial_entropy" not in logs[1]
    assert alphas(trainer)[:2] == [0.05, 0.05]  # no target yet: α stays at its initial value
    assert logs[2]["aer/target_entropy"] == pytest.approx(0.4 * trainer.aer_callback.initial_entropy, rel=1e-6)


# ------------------------------------------------------------------------------------ bf16 on a CPU without kernels
@pytest.mark.parametrize("kernels", [False, True])
def test_bf16_on_a_cpu_without_bf16_kernels_is_warned_about(tmp_path, tokenizer, caplog, monkeypatch, kernels):
    """bf16 autocast on an AVX2-only CPU runs every matmul in PyTorch's reference GEMM (measured ~11x slower per step
    than float32): the trainer says so, naming the setting; where the kernels exist, or in float32, it says nothing."""
    import aer_trl.hardware as hardware

    monkeypatch.setattr(hardware, "cpu_has_bf16_kernels", lambda: kernels)
    with caplog.at_level("WARNING", logger="aer_trl.adapter"):
        helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "fp32"))
    assert "bfloat16 matrix kernels" not in caplog.text
    with caplog.at_level("WARNING", logger="aer_trl.adapter"):
        helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "bf16", bf16=True))
    assert ("bf16=True (autocast) on a CPU without bfloat16 matrix kernels" in caplog.text) is not kernels
    assert ("Train in float32 here: bf16=False" in caplog.text) is not kernels


def test_bf16_weights_on_a_cpu_without_kernels_name_the_dtype(monkeypatch):
    import aer_trl.hardware as hardware

    monkeypatch.setattr(hardware, "cpu_has_bf16_kernels", lambda: False)
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    message = hardware.cpu_bf16_warning("cpu", False, model)
    assert "the model's bfloat16 weights" in message and "dtype='float32'" in message
    assert hardware.cpu_bf16_warning("cuda", True, model) is None  # a GPU's bf16 is its own matter
    assert hardware.cpu_bf16_warning("cpu", False, torch.nn.Linear(2, 2)) is None


def test_whether_the_cpu_has_bf16_kernels_is_torchs_answer_and_true_where_it_cannot_say(monkeypatch):
    """No warning on a guess: where torch cannot say, the CPU is taken to have the kernels."""
    from aer_trl import hardware

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False, raising=False)
    assert hardware.cpu_has_bf16_kernels() is False

    def unknown():
        raise RuntimeError("no oneDNN here")

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", unknown, raising=False)
    assert hardware.cpu_has_bf16_kernels() is True
