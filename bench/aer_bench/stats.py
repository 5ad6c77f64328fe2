"""Intervals over seeds and the batch-to-batch noise of a run, shared by the studies (lab ablations, the real-LLM
study)."""

from __future__ import annotations

import math
import statistics

__all__ = ["t975", "interval", "batch_noise", "sign_test"]


def t975(dof: int) -> float:
    """The two-sided 95% quantile of Student's t with `dof` degrees of freedom (12.706 at 1, 2.228 at 10, 2.093 at
    19: the 20-seed studies need the exact value, not the normal's 1.96 nor a rounded 2)."""
    from scipy import stats as scipy_stats

    return float(scipy_stats.t.ppf(0.975, dof))


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t interval (nan with one value; both nan if a value is nan:
    a run that measured nothing is not averaged away)."""
    values = list(values)
    if not values or any(math.isnan(v) for v in values):
        return float("nan"), float("nan")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def batch_noise(values: list[float], window: int = 5, start: int = 0) -> float:
    """How much one measurement moves around the run's local level, relative to it, drift excluded: the median of
    |x_t − m_t| / m_t over the points t ≥ `start` with a full centred `window` (m_t, their moving average), scaled by
    1/sqrt(1 − 1/window) (x_t is one of the points averaged, which shrinks white noise's residual by that factor).
    For white noise around a level this estimates the median |x − level|/level that a controller holding the level
    exactly would score; a slow drift, which the spread around the run's overall median counts, is left out.
    nan with no such point."""
    if window < 3 or window % 2 == 0:
        raise ValueError(f"window must be an odd number >= 3, got {window}")
    half = window // 2
    residuals = []
    for t in range(max(start, half), len(values) - half):
        level = statistics.fmean(values[t - half : t + half + 1])
        if level:
            residuals.append(abs(values[t] - level) / level)
    if not residuals:
        return float("nan")
    return statistics.median(residuals) / math.sqrt(1 - 1 / window)


def sign_test(differences: list[float]) -> tuple[int, int, float]:
    """Two-sided exact sign test of paired differences: (how many are above 0, how many below, p). Ties (0) are
    dropped; p = min(1, 2·P(X ≤ min(above, below))) for X ~ Binomial(above + below, 1/2); 1.0 with no untied pair."""
    above = sum(d > 0 for d in differences)
    below = sum(d < 0 for d in differences)
    n = above + below
    if n == 0:
        return above, below, 1.0
    tail = sum(math.comb(n, i) for i in range(min(above, below) + 1)) / 2**n
    return above, below, min(1.0, 2 * tail)
