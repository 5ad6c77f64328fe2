"""AER math against hand-computed values: group accuracy, λ (C1), α update (C3), the controller (C2)."""

import math

import pytest
import torch

from aer_trl.core_algos import (
    AERController,
    difficulty_coefficients,
    group_accuracy,
    hard_mask,
    sequence_entropy,
    sign,
    update_alpha,
)

NAN = float("nan")


def assert_close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), equal_nan=True)


def test_group_accuracy_per_completion():
    correct = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    assert_close(group_accuracy(correct, 4), [0.75] * 4 + [0.0] * 4)


def test_group_accuracy_ignores_nan_and_marks_unscorable_groups():
    correct = torch.tensor([1.0, NAN, 0.0, NAN, NAN, NAN])
    # group 1: (1 + 0) / 2 scorable = 0.5; group 2: nothing scorable -> NaN
    assert_close(group_accuracy(correct, 3), [0.5] * 3 + [NAN] * 3)


def test_group_accuracy_rejects_ragged_input():
    with pytest.raises(ValueError, match="num_generations"):
        group_accuracy(torch.zeros(5), 4)


def test_lambda_hand_computed():
    g = torch.tensor([0.0, 0.1, 0.2, 0.5, 1.0])
    lam = difficulty_coefficients(g, alpha=0.5, rho=0.2, eps=1e-8)
    # 0.5 * max(0, 0.2 - g) / (0.2 + 1e-8)
    expected = [0.5 * 0.2 / (0.2 + 1e-8), 0.5 * 0.1 / (0.2 + 1e-8), 0.0, 0.0, 0.0]
    assert_close(lam, expected)


def test_lambda_g_equal_rho_is_zero_and_g_above_rho_is_zero():
    lam = difficulty_coefficients(torch.tensor([0.25, 0.75]), alpha=1.0, rho=0.25)
    assert lam.tolist() == [0.0, 0.0]


def test_lambda_rho_zero_only_unsolved_prompts():
    g = torch.tensor([0.0, 0.25, 1.0])
    lam = difficulty_coefficients(g, alpha=0.3, rho=0.0)
    assert_close(lam, [0.3, 0.0, 0.0])


def test_lambda_rho_one():
    lam = difficulty_coefficients(torch.tensor([0.0, 0.5, 1.0]), alpha=2.0, rho=1.0, eps=0.0)
    assert_close(lam, [2.0, 1.0, 0.0])


def test_lambda_unscorable_group_gets_zero():
    lam = difficulty_coefficients(torch.tensor([NAN, 0.0]), alpha=1.0, rho=0.2)
    assert lam[0].item() == 0.0 and lam[1].item() > 0


def test_lambda_alpha_zero_is_zero_everywhere():
    assert difficulty_coefficients(torch.tensor([0.0, 0.1]), alpha=0.0, rho=0.2).abs().sum().item() == 0.0


def test_lambda_not_difficulty_aware_is_alpha_for_scorable():
    lam = difficulty_coefficients(torch.tensor([0.0, 0.9, NAN]), alpha=0.4, rho=0.2, difficulty_aware=False)
    assert_close(lam, [0.4, 0.4, 0.0])


def test_hard_mask():
    g = torch.tensor([0.0, 0.1, 0.2, 0.9, NAN])
    assert hard_mask(g, 0.2).tolist() == [True, True, False, False, False]
    assert hard_mask(g, 0.0).tolist() == [True, False, False, False, False]


def test_sign_of_zero_is_zero():
    assert (sign(0.0), sign(2.5), sign(-1e-9)) == (0, 1, -1)


def test_update_alpha_up_down_hold_and_clamps():
    assert update_alpha(0.1, entropy=0.2, target=0.4, eta=0.05) == pytest.approx(0.15)  # below target: raise
    assert update_alpha(0.1, entropy=0.6, target=0.4, eta=0.05) == pytest.approx(0.05)  # above target: lower
    assert update_alpha(0.1, entropy=0.4, target=0.4, eta=0.05) == 0.1  # sgn(0) = 0
    assert update_alpha(0.01, entropy=0.6, target=0.4, eta=0.05) == 0.0  # clamped at 0
    assert update_alpha(0.0, entropy=0.6, target=0.4, eta=0.05) == 0.0
    assert update_alpha(0.19, entropy=0.1, target=0.4, eta=0.05, alpha_max=0.2) == 0.2  # upper clamp


def test_controller_anchors_h0_then_tracks_target():
    ctrl = AERController(tau=0.5, eta=0.1, alpha=0.0)
    assert ctrl.target is None
    # first call: H0 = 2.0, H* = 1.0; 2.0 > 1.0 -> alpha stays clamped at 0
    assert ctrl.observe(2.0) == 0.0
    assert ctrl.initial_entropy == 2.0 and ctrl.target == 1.0
    assert ctrl.observe(0.5) == pytest.approx(0.1)  # under target: raise
    assert ctrl.observe(0.8) == pytest.approx(0.2)
    assert ctrl.observe(1.5) == pytest.approx(0.1)  # above: lower
    assert ctrl.observe(1.0) == pytest.approx(0.1)  # at target: hold
    assert ctrl.initial_entropy == 2.0 and ctrl.iteration == 5


def test_controller_fixed_target_and_non_adaptive():
    ctrl = AERController(tau=0.5, eta=0.1, alpha=0.3, fixed_target=3.0)
    ctrl.observe(2.0)
    assert ctrl.target == 3.0 and ctrl.alpha == pytest.approx(0.4)
    fixed = AERController(alpha=0.3, adaptive=False)
    fixed.observe(2.0)
    fixed.observe(0.1)
    assert fixed.alpha == 0.3 and fixed.initial_entropy == 2.0


def test_controller_skips_non_finite_measurement():
    ctrl = AERController(alpha=0.2)
    assert ctrl.observe(math.nan) == 0.2 and ctrl.initial_entropy is None and ctrl.iteration == 0


def test_controller_state_round_trip():
    ctrl = AERController(tau=0.4, eta=0.01)
    for h in (1.0, 0.3, 0.2):
        ctrl.observe(h)
    other = AERController(tau=0.4, eta=0.01)
    other.load_state_dict(ctrl.state_dict())
    assert other.state_dict() == ctrl.state_dict() and other.target == ctrl.target


def test_difficulty_buckets():
    from aer_trl.core_algos import difficulty_buckets

    g = torch.tensor([0.0, 0.125, 0.25, 0.5, 1.0, float("nan")])
    assert difficulty_buckets(g, 0.25).tolist() == [0, 1, 2, 2, 3, -1]
    assert difficulty_buckets(g, 0.0).tolist() == [0, 2, 2, 2, 3, -1]  # ρ = 0: nothing lies between 0 and ρ
    assert difficulty_buckets(g, 1.0).tolist() == [0, 1, 1, 1, 3, -1]


ENT = torch.tensor([[0.1, 0.5, 0.9, 0.0], [0.3, 0.7, 0.2, 0.8]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])


def test_sequence_entropy_over_every_trained_token_is_the_paper():
    assert torch.allclose(sequence_entropy(ENT, MASK), torch.tensor([0.5, 0.5]))  # (0.1+0.5+0.9)/3, (0.3+..+0.8)/4


def test_sequence_entropy_over_forking_tokens_hand_computed():
    # trained entropies sorted: .1 .2 .3 .5 .7 .8 .9; the 0.7 quantile is .7 + 0.2·(.8 − .7) = .72 (the padded 0.0
    # is not a trained token); the tokens at or above it are .9 (row 0) and .8 (row 1)
    assert torch.allclose(sequence_entropy(ENT, MASK, quantile=0.3), torch.tensor([0.9, 0.8]))


def test_forking_bonus_gradient_reaches_only_the_forking_tokens_and_a_row_without_one_gets_none():
    ent = torch.tensor([[0.1, 0.2, 0.1], [0.9, 1.0, 0.8]], requires_grad=True)
    h = sequence_entropy(ent, torch.ones(2, 3), quantile=0.5)
    assert h[0].item() == 0.0  # no token of row 0 is in the top half of the batch
    h.sum().backward()
    assert torch.equal(ent.grad[0], torch.zeros(3))
    assert torch.allclose(ent.grad[1], torch.full((3,), 1 / 3))


def test_sequence_entropy_rejects_a_quantile_outside_0_1():
    for q in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="quantile"):
            sequence_entropy(ENT, MASK, quantile=q)


def test_capped_entropy_hand_computed_and_no_gradient_above_the_cap():
    from aer_trl.core_algos import capped_entropy

    h = torch.tensor([0.1, 0.3, 0.5], requires_grad=True)
    out = capped_entropy(h, 0.3)
    assert out.tolist() == pytest.approx([0.1, 0.3, 0.3])
    out.sum().backward()
    assert h.grad.tolist() == [1.0, 1.0, 0.0]  # at the cap the gradient still flows (clamp's convention); above, none
    assert capped_entropy(h, None) is h


def test_anchor_over_several_rollouts_holds_alpha_until_h0_is_known():
    c = AERController(tau=0.5, eta=0.1, alpha=0.0, anchor_rollouts=3)
    assert c.observe(0.6) == 0.0 and c.initial_entropy is None and c.target is None
    assert c.observe(0.2) == 0.0 and c.initial_entropy is None  # 0.2 < any target, but there is no target yet
    assert c.observe(0.4) == 0.0 and c.initial_entropy == pytest.approx(0.4)  # H0 = mean, H = 0.4 > H* = 0.2
    c2 = AERController(tau=0.5, eta=0.1, alpha=0.0, anchor_rollouts=2)
    c2.observe(1.0)
    assert c2.observe(0.2) == pytest.approx(0.1)  # H0 = 0.6, H* = 0.3 > 0.2: α rises at the anchoring step
    assert c2.initial_entropy == pytest.approx(0.6)


def test_anchor_state_survives_a_checkpoint_taken_before_h0_is_known():
    c = AERController(tau=0.5, eta=0.1, anchor_rollouts=3)
    c.observe(0.6)
    restored = AERController(tau=0.5, eta=0.1, anchor_rollouts=3)
    restored.load_state_dict(c.state_dict())
    for h in (0.3, 0.9):
        c.observe(h)
        restored.observe(h)
    assert restored.initial_entropy == c.initial_entropy == pytest.approx(0.6)


def test_anchor_rollouts_must_be_a_positive_integer():
    for k in (0, -1, 1.5):
        with pytest.raises(ValueError, match="anchor_rollouts"):
            AERController(anchor_rollouts=k)


def test_a_probe_anchors_h0_before_the_first_rollout_batch():
    c = AERController(tau=0.5, eta=0.1, alpha=0.0)
    c.anchor(0.8)
    assert c.initial_entropy == 0.8 and c.target == pytest.approx(0.4)
    assert c.observe(0.6) == 0.0  # 0.6 > H* = 0.4: α stays at 0 (it cannot go below)
    assert c.observe(0.3) == pytest.approx(0.1) and c.initial_entropy == 0.8  # the rollouts do not move H0
    with pytest.raises(RuntimeError, match="already anchored"):
        c.anchor(0.5)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="anchor entropy"):
            AERController().anchor(bad)
