"""aer_trl.truncated_support: the truncated-support bonus (`aer_bonus_top_k`, method aer_topk)."""

import math

import pytest
import torch
from trl import GRPOTrainer

from tests import helpers
from tests.helpers import fixed_batch, manual_sequence_entropy


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
