"""aer_trl.stats: the mean over seeds and the half-width of its 95% Student-t interval."""

import math

from aer_trl.stats import interval


def test_t_interval_hand_computed():
    mean, half = interval([1.0, 2.0, 3.0])  # sd 1, n 3, t(0.975, 2 dof) = 4.303
    assert mean == 2.0 and abs(half - 4.303 * 1.0 / 3**0.5) < 1e-9


def test_one_seed_has_no_interval_and_a_nan_run_is_not_averaged_away():
    mean, half = interval([0.5])
    assert mean == 0.5 and math.isnan(half)
    assert all(math.isnan(v) for v in interval([1.0, float("nan"), 2.0]))
    assert all(math.isnan(v) for v in interval([]))
