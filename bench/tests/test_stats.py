"""aer_bench.stats: the mean over seeds and the half-width of its 95% Student-t interval."""

import math

import pytest

from aer_bench import stats
from aer_bench.stats import interval


def test_t_interval_hand_computed():
    mean, half = interval([1.0, 2.0, 3.0])  # sd 1, n 3, t(0.975, 2 dof) = 4.302653
    assert mean == 2.0 and half == pytest.approx(4.302653 * 1.0 / 3**0.5, rel=1e-6)


def test_t_interval_uses_the_exact_quantile_beyond_ten_degrees_of_freedom():
    # 20 seeds, values 0..19: sd = sqrt(35), t(0.975, 19 dof) = 2.093024 (tables); a rounded 2.0 would understate
    # the half-width by 4.5%, the normal's 1.96 by 6.4%
    mean, half = interval([float(v) for v in range(20)])
    assert mean == 9.5 and half == pytest.approx(2.093024 * 35**0.5 / 20**0.5, rel=1e-6)
    assert stats.t975(1) == pytest.approx(12.7062, rel=1e-5) and stats.t975(10) == pytest.approx(2.22814, rel=1e-5)


def test_one_seed_has_no_interval_and_a_nan_run_is_not_averaged_away():
    mean, half = interval([0.5])
    assert mean == 0.5 and math.isnan(half)
    assert all(math.isnan(v) for v in interval([1.0, float("nan"), 2.0]))
    assert all(math.isnan(v) for v in interval([]))


def test_batch_noise_hand_computed_and_blind_to_drift():
    from aer_bench.stats import batch_noise

    # alternating 0.9, 1.1 around 1: every centred 5-window averages 0.98 or 1.02; residuals 0.08/0.98 and
    # 0.08/1.02, median of [0.0816, 0.0784, 0.0816] = 0.0816..., times 1/sqrt(0.8)
    values = [0.9, 1.1, 0.9, 1.1, 0.9, 1.1, 0.9]
    assert batch_noise(values) == pytest.approx((0.08 / 0.98) / math.sqrt(0.8))
    # a straight ramp has no noise, whatever its drift (the spread around its median would be large)
    assert batch_noise([1 + 0.1 * t for t in range(20)]) == pytest.approx(0.0, abs=1e-12)
    assert batch_noise([1.0, 2.0]) != batch_noise([1.0, 2.0])  # nan: no full window
    assert batch_noise(values, start=3) == pytest.approx(0.5 * (0.08 / 1.02 + 0.08 / 0.98) / math.sqrt(0.8))
    with pytest.raises(ValueError, match="odd"):
        batch_noise(values, window=4)


def test_sign_test_hand_computed():
    # 10 of 10 above: p = 2 · (1/2)^10 = 2/1024
    assert stats.sign_test([0.5] * 10) == (10, 0, 2 / 1024)
    # 7 above, 2 below, one tie dropped: p = 2 · (C(9,0) + C(9,1) + C(9,2)) / 2^9 = 2 · 46 / 512
    above, below, p = stats.sign_test([1, 2, 3, 4, 5, 6, 7, -1, -2, 0])
    assert (above, below) == (7, 2) and p == pytest.approx(92 / 512)
    assert stats.sign_test([1, -1])[2] == 1.0  # capped at 1
    assert stats.sign_test([0, 0]) == (0, 0, 1.0)  # no untied pair: no evidence
