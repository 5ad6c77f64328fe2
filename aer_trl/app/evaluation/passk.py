"""The pass@k estimator (docs/design.md, "Evaluation").

`pass_at_k(n, c, k)` is the unbiased estimator 1 − C(n−c, k) / C(n, k), computed in exact integer arithmetic and
rounded once, so it neither overflows nor drifts at n = 256 or beyond.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["pass_at_k", "mean_pass_at_k", "k50", "passk_summary"]


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


def passk_summary(counts: Sequence[tuple[int, int]], k_list: Iterable[int]) -> dict:
    """The numbers every report gives from verdict counts (n samples, c correct) per problem: pass@k for each k of
    `k_list` up to the smallest n, mean@n, k50, the number of problems and of samples. The one scoring path of the
    harness, `PassAtKCallback` and the lab report."""
    counts = list(counts)
    if not counts:
        raise ValueError("no problems to score")
    n_min = min(n for n, _ in counts)
    ks = [k for k in k_list if k <= n_min]
    entry = {f"pass@{k}": mean_pass_at_k(counts, k) for k in ks}
    entry["mean@n"] = sum(c / n for n, c in counts) / len(counts)
    entry["k50"] = k50(counts)
    entry["num_problems"] = len(counts)
    entry["num_samples"] = n_min
    entry["k_list"] = ks
    return entry
