"""AER math against hand-computed values: group accuracy, λ (C1), α update (C3), the controller (C2)."""

import math

import pytest
import torch

from aer_trl.controller import AERController, difficulty_coefficients, group_accuracy, hard_mask, sign, update_alpha

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


def test_controller_absolute_target_and_non_adaptive():
    ctrl = AERController(tau=0.5, eta=0.1, alpha=0.3, absolute_target=3.0)
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


def test_old_spellings_still_work_for_one_release():
    with pytest.warns(DeprecationWarning, match="absolute_target"):
        ctrl = AERController(tau=0.5, target_entropy=2.0)
    assert ctrl.absolute_target == 2.0 and ctrl.target == 2.0
    from aer_trl import AERCallback

    cb = AERCallback(target_entropy=1.5)  # the args saved in checkpoints written before the rename
    assert cb.target == 1.5
    with pytest.warns(DeprecationWarning, match="AERCallback.target"):
        assert cb.target_entropy == 1.5


def test_difficulty_buckets():
    from aer_trl.controller import difficulty_buckets

    g = torch.tensor([0.0, 0.125, 0.25, 0.5, 1.0, float("nan")])
    assert difficulty_buckets(g, 0.25).tolist() == [0, 1, 2, 2, 3, -1]
    assert difficulty_buckets(g, 0.0).tolist() == [0, 2, 2, 2, 3, -1]  # ρ = 0: nothing lies between 0 and ρ
    assert difficulty_buckets(g, 1.0).tolist() == [0, 1, 1, 1, 3, -1]
