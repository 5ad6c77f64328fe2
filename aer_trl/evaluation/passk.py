"""The pass@k estimator (docs/design.md, "Evaluation").

`pass_at_k(n, c, k)` is the unbiased estimator 1 − C(n−c, k) / C(n, k), computed in exact integer arithmetic and
rounded once, so it neither overflows nor drifts at n = 256 or beyond.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["pass_at_k", "mean_pass_at_k", "k50"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"n, c and k must be integers, got n={n!r}, c={c!r}, k={k!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got k={k}")
    total = math.comb(n, k)
    return (total - math.comb(n - c, k)) / total  # comb(n - c, k) = 0 when k > n - c: pass@k = 1


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """Mean over problems of pass@k, each problem given as (n samples, c correct)."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    if not values:
        raise ValueError("no problems to average over")
    return sum(values) / len(values)


def k50(counts: Sequence[tuple[int, int]], max_k: int | None = None) -> int | None:
    """k50 = min{k : mean pass@k ≥ 50%}, or None when no k up to `max_k` (default: the smallest n) reaches it."""
    max_k = max_k or min(n for n, _ in counts)
    for k in range(1, max_k + 1):
        if mean_pass_at_k(counts, k) >= 0.5:
            return k
    return None
