"""aer_bench.truncated_support: the truncated-support bonus (`aer_bonus_top_k`, method aer_topk), a method an
extension registers: the library's config and trainer refuse it by name."""

import math

import bench_helpers
import pytest
import torch
from trl import GRPOTrainer

from aer_bench.training import BenchConfig
from aer_trl import AERGRPOConfig, AERGRPOTrainer
from tests import helpers
from tests.helpers import fixed_batch, manual_sequence_entropy


@pytest.mark.parametrize("share", [False, True], ids=["trl-forward", "shared-prompt-forward"])
def test_truncated_support_bonus_is_grpo_minus_mean_lambda_topk_entropy(tmp_path, tokenizer, share):
    """Method aer_topk (ours): H_i over each token's top-k renormalised distribution at TRL's temperature, computed
    independently from the model's logits, through TRL's forward and the shared-prompt one; TRL's loss reads the same
    log-probs as through its fused head, and the controller still measures the full entropy."""
    from aer_bench.truncated_support import truncated_entropy
    from aer_trl.core_algos import sequence_entropy

    settings = dict(method="aer_topk", aer_bonus_top_k=3, temperature=0.7)
    # the shared-prompt forward is the research bench's (its config and trainer)
    args = bench_helpers.make_bench_config(tmp_path, share_prompt_forward=share, **settings)
    trainer = bench_helpers.make_trainer(tokenizer, args)
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
    stats = trainer.aer_core.entropy_stats
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


def test_truncated_entropy_hand_computed_and_no_gradient_into_the_tail():
    """Method aer_topk (ours, AEnt's clamped entropy): the entropy of the distribution renormalised over the top-k
    logits. logits (2, 1, 0, -1), k = 2: p = (e²/(e²+e), e/(e²+e)) = (0.7311, 0.2689), H = 0.5822 nats."""
    from aer_bench.truncated_support import truncated_entropy

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0]], requires_grad=True)
    h = truncated_entropy(logits, 2)
    torch.testing.assert_close(h, torch.tensor([0.5822, math.log(2)]), atol=1e-4, rtol=0)
    h.sum().backward()
    assert logits.grad[0, 2:].abs().sum() == 0  # the tail gets no push
    assert logits.grad[0, 0] < 0 < logits.grad[0, 1]  # raising H flattens the top two
    full = -(torch.log_softmax(logits.detach(), -1).exp() * torch.log_softmax(logits.detach(), -1)).sum(-1)
    torch.testing.assert_close(truncated_entropy(logits.detach(), 10), full)  # k >= V: the full entropy
    with pytest.raises(ValueError, match="top_k"):
        truncated_entropy(logits, 0)


@pytest.mark.parametrize("bad", [1, 2.5, True, 0])
def test_bad_top_k_is_refused_by_name(tmp_path, bad):
    with pytest.raises(ValueError, match="aer_bonus_top_k must be an integer >= 2"):
        bench_helpers.make_bench_config(tmp_path, aer_bonus_top_k=bad)


def test_the_library_refuses_the_benchs_method_by_name(tmp_path, tokenizer):
    """aer_topk is registered by the bench: the library's config has no aer_bonus_top_k and says so; the bench's
    config with the library's trainer is refused (its bonus would silently be the full entropy's)."""
    assert bench_helpers.make_bench_config(tmp_path, method="aer_topk").aer_bonus_top_k == 20
    with pytest.raises(ValueError, match=r"method='aer_topk' sets \['aer_bonus_top_k'\], which AERGRPOConfig has no"):
        AERGRPOConfig(**helpers.config_kwargs(tmp_path, method="aer_topk"))
    args = bench_helpers.make_bench_config(tmp_path, method="aer_topk")
    assert isinstance(args, BenchConfig)
    with pytest.raises(TypeError, match="TruncatedSupportMixin"):
        AERGRPOTrainer(model=helpers.make_model(tokenizer), reward_funcs=[helpers.even_length_reward], args=args)
