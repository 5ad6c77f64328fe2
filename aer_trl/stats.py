"""Intervals over seeds, shared by the studies (lab ablations, the real-LLM study)."""

from __future__ import annotations

import math
import statistics

__all__ = ["T975", "interval"]

# two-sided 95% quantiles of Student's t by degrees of freedom
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t interval (nan with one value; both nan if a value is nan:
    a run that measured nothing is not averaged away)."""
    values = list(values)
    if not values or any(math.isnan(v) for v in values):
        return float("nan"), float("nan")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan")
    t = T975.get(len(values) - 1, 2.0)
    return mean, t * statistics.stdev(values) / math.sqrt(len(values))
