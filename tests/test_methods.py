"""Baselines: pure functions against hand-computed tensors, refusals, every lab recipe trains 2 steps."""

import sys
from pathlib import Path

import pytest
import torch

from aer_trl import AERGRPOConfig
from aer_trl.core_algos import clip_cov_mask, ent_adv_advantages, kl_cov_advantages, token_covariance
from tests import helpers

ROOT = Path(__file__).resolve().parents[1]
ADV = torch.tensor([1.0, -1.0])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # the last token of row 0 is padding
LOGPS = torch.tensor([[-1.0, -2.0, 0.0], [-3.0, -1.5, -2.0]])
# valid tokens: A = [1, 1, -1, -1, -1] (mean -0.2), logπ = [-1, -2, -3, -1.5, -2] (mean -1.9)
COV = torch.tensor([[1.2 * 0.9, 1.2 * -0.1, 0.0], [-0.8 * -1.1, -0.8 * 0.4, -0.8 * -0.1]])


def test_token_covariance_hand_computed():
    torch.testing.assert_close(token_covariance(ADV, LOGPS, MASK), COV)


def test_ent_adv_hand_computed():
    h = torch.tensor([[0.5, 5.0, 9.0], [1.0, 0.1, 2.0]])
    # min(0.4·H, |A|/2 = 0.5): [[0.2, 0.5, pad], [0.4, 0.04, 0.5]]
    expected = torch.tensor([[1.2, 1.5, 0.0], [-0.6, -0.96, -0.5]])
    torch.testing.assert_close(ent_adv_advantages(ADV, h, MASK, alpha=0.4, kappa=2.0), expected)
    h_grad = h.clone().requires_grad_()
    assert not ent_adv_advantages(ADV, h_grad, MASK).requires_grad  # entropy enters detached


def test_clip_cov_candidates_bounds_ratio_and_seed():
    old = LOGPS.clone()
    # bounds (0.5, 1.1): candidates are the tokens with cov 1.08 and 0.88; ratio 1 picks all candidates
    cut = clip_cov_mask(ADV, LOGPS, old, MASK, ratio=1.0, cov_low=0.5, cov_high=1.1)
    assert cut.tolist() == [[True, False, False], [True, False, False]]
    # ratio 0.01 -> max(1, 0.05) = 1 token, the same one for the same seed
    picks = {
        tuple(
            clip_cov_mask(ADV, LOGPS, old, MASK, 0.01, 0.5, 1.1, generator=torch.Generator().manual_seed(3))
            .flatten()
            .tolist()
        )
        for _ in range(3)
    }
    assert len(picks) == 1 and sum(next(iter(picks))) == 1
    # a token the PPO clip already cuts (ratio > 1 + ε_high with A > 0) is not a candidate
    old_clipped = old.clone()
    old_clipped[0, 0] = -5.0  # ratio e^4 on a positive-advantage token
    cut = clip_cov_mask(ADV, LOGPS, old_clipped, MASK, 1.0, 0.5, 1.1, epsilon_low=0.2, epsilon_high=0.2)
    assert cut.tolist() == [[False, False, False], [True, False, False]]
    # padding is never picked, whatever its covariance
    assert not clip_cov_mask(ADV, LOGPS, old, MASK, 1.0, -10, 10)[0, 2]


def test_kl_cov_topk_and_exact_gradient():
    old = torch.tensor([[-1.5, -2.0, 0.0], [-2.5, -1.0, -2.0]])
    adv_k2, sel = kl_cov_advantages(ADV, LOGPS, old, MASK, ratio=0.4, coef=1.0)  # k = int(0.4·5) = 2
    assert sel.tolist() == [[True, False, False], [True, False, False]]
    _, sel1 = kl_cov_advantages(ADV, LOGPS, old, MASK, ratio=0.2)  # k = max(1, 1)
    assert sel1.tolist() == [[True, False, False], [False, False, False]]
    # the gradient of TRL's unclipped loss with A' equals that of -A·ratio + κ|logπ - logπ_old| on the top-k
    lp = LOGPS.clone().requires_grad_()
    (-(adv_k2 * torch.exp(lp - old) * MASK).sum()).backward()
    ours = lp.grad.clone()
    lp.grad = None
    ratio = torch.exp(lp - old)
    reference = -(ADV[:, None] * ratio * MASK).sum() + (1.0 * (lp - old).abs() * sel).sum()
    reference.backward()
    torch.testing.assert_close(ours, lp.grad)


BASE = dict(output_dir="/tmp/aer-methods", use_cpu=True, bf16=False, report_to="none")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"method": "ppo"}, "unknown method 'ppo'; known methods are"),
        ({"method": "ent_adv", "entropy_coef": 0.01}, "two exploration terms"),
        ({"method": "clip_cov", "use_adaptive_entropy": True}, "two exploration terms"),
        ({"method": "aer", "entropy_coef": 0.01}, "AER has its own entropy bonus"),
        ({"method": "aer_c1"}, "needs aer_alpha_init > 0"),
        ({"method": "grpo", "aer_alpha_init": 0.1}, "only applies to the AER methods"),
        ({"method": "entropy_coef"}, "needs entropy_coef > 0"),
        ({"method": "kl_cov", "loss_type": "cispo"}, "acts on per-token"),
        ({"method": "clip_cov", "importance_sampling_level": "sequence"}, "acts on per-token"),
        ({"method": "clip_cov", "clip_cov_ratio": 0.0}, r"clip_cov_ratio must be in \(0, 1\]"),
    ],
)
def test_invalid_combinations_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        AERGRPOConfig(**BASE, **overrides)


def test_methods_set_the_papers_settings():
    assert AERGRPOConfig(**BASE, method="clip_higher").epsilon_high == 0.28
    cov = AERGRPOConfig(**BASE, method="clip_cov")
    assert (cov.epsilon, cov.epsilon_high) == (1.0, 1.0)
    assert AERGRPOConfig(**BASE, method="skywork").use_adaptive_entropy
    c2c3 = AERGRPOConfig(**BASE, method="aer_c2c3")
    assert not c2c3.aer_difficulty_aware and c2c3.aer_adaptive
    grpo = AERGRPOConfig(**BASE, method="grpo")
    assert grpo.aer_alpha_init == 0 and not grpo.aer_adaptive


def test_generated_recipes_are_up_to_date():
    sys.path.insert(0, str(ROOT / "recipes"))
    import make_recipes

    assert make_recipes.main(["--check"]) == 0


def _losses(tmp_path, method, **overrides):
    tokenizer = helpers.make_tokenizer()
    args = helpers.make_config(tmp_path / f"{method}-{len(overrides)}", method=method, max_steps=3, **overrides)
    trainer = helpers.make_trainer(tokenizer, args)
    trainer.train()
    return [r["loss"] for r in trainer.state.log_history if "loss" in r]


@pytest.mark.slow
def test_clip_higher_and_kl_cov_train_as_grpo_with_one_optimizer_step_per_rollout_batch(tmp_path):
    """What the real-model rivals study found (docs/real_llm.md §3.6): with one optimizer step per rollout batch the
    policy has not moved when its loss is taken (ratio ≡ 1), so neither a higher clip bound nor a penalty on
    π − π_old changes a gradient: both train as GRPO bit for bit. With two passes over each batch KL-Cov acts."""
    grpo = _losses(tmp_path, "grpo")
    assert _losses(tmp_path, "clip_higher") == grpo
    assert _losses(tmp_path, "kl_cov") == grpo
    assert _losses(tmp_path, "kl_cov", num_iterations=2) != _losses(tmp_path, "grpo", num_iterations=2)
