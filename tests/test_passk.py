"""pass@k against exact combinatorics."""

from fractions import Fraction
from itertools import combinations
from math import comb

import pytest

from aer_trl.app.evaluation import k50, mean_pass_at_k, pass_at_k


def brute_force(n, c, k):
    samples = [1] * c + [0] * (n - c)
    draws = list(combinations(range(n), k))
    return Fraction(sum(any(samples[i] for i in d) for d in draws), len(draws))


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_against_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(brute_force(n, c, k)), abs=1e-15)


@pytest.mark.parametrize(("n", "c", "k"), [(256, 1, 128), (256, 3, 256), (256, 100, 32), (1000, 7, 500), (256, 1, 1)])
def test_exact_at_large_n(n, c, k):
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == float(exact)  # correctly rounded: no overflow, no drift


def test_edge_cases():
    assert pass_at_k(16, 0, 8) == 0.0
    assert pass_at_k(16, 16, 1) == 1.0
    assert pass_at_k(16, 10, 7) == 1.0  # k > n - c
    assert pass_at_k(256, 1, 1) == 1 / 256
    with pytest.raises(ValueError, match="k must be in"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)


def test_aggregate_and_k50():
    counts = [(4, 0), (4, 1), (4, 4)]
    assert mean_pass_at_k(counts, 1) == pytest.approx((0 + 0.25 + 1) / 3)
    assert k50(counts) == 2  # pass@2 = (0 + 0.5 + 1) / 3 = 0.5
    assert k50([(4, 0), (4, 0)]) is None


def test_passk_summary_is_the_one_scoring_path():
    from aer_trl.app.evaluation import passk_summary

    counts = [(4, 0), (4, 2), (4, 4)]
    s = passk_summary(counts, [1, 2, 8])
    assert s["k_list"] == [1, 2] and "pass@8" not in s  # k above the smallest n is left out, not extrapolated
    assert s["pass@1"] == pytest.approx((0 + 0.5 + 1) / 3) == pytest.approx(s["mean@n"])
    assert s["pass@2"] == pytest.approx((0 + (1 - 1 / 6) + 1) / 3)
    assert s["num_problems"] == 3 and s["num_samples"] == 4 and s["k50"] == 1
    with pytest.raises(ValueError, match="no problems"):
        passk_summary([], [1])
