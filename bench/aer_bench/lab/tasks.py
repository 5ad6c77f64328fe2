"""Verifiable arithmetic with difficulty tiers, deterministic by seed.

Tier 0 is trivially easy for the lab model after its warm start, the last tier is mostly out of its reach, so GRPO
sees both easy and hard prompts, the situation AER's difficulty-aware coefficient (C1) is made for.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from datasets import Dataset

# tier -> (name, generator returning (expression, answer))
TIERS: dict[int, tuple[str, Callable[[random.Random], tuple[str, int]]]] = {
    0: ("1-digit addition", lambda r: _binary(r, "+", (0, 9), (0, 9))),
    1: ("2-digit addition", lambda r: _binary(r, "+", (10, 99), (10, 99))),
    2: ("1-digit multiplication", lambda r: _binary(r, "*", (2, 9), (2, 9))),
    3: ("2-digit x 1-digit multiplication", lambda r: _binary(r, "*", (11, 99), (2, 9))),
}


def _binary(rng: random.Random, op: str, left: tuple[int, int], right: tuple[int, int]) -> tuple[str, int]:
    a, b = rng.randint(*left), rng.randint(*right)
    return f"{a}{op}{b}", (a + b if op == "+" else a * b)


def format_prompt(expression: str) -> str:
    return f"{expression}="


def format_completion(answer: int | str) -> str:
    """What the lab model is taught to answer: the result in `\\boxed{}`, as the real recipes ask."""
    return f"\\boxed{{{answer}}}"


def make_arithmetic_dataset(
    n: int,
    seed: int = 0,
    tiers: list[int] | None = None,
    weights: list[float] | None = None,
    exclude: set[str] | None = None,
) -> Dataset:
    """`n` problems with columns `prompt`, `answer` (string) and `difficulty` (tier index), the same for a seed.

    Args:
        tiers: which tiers to draw from (default: all), in equal shares unless `weights` are given.
        exclude: prompts to leave out (e.g. the training prompts, to build a held-out set).
    """
    tiers = sorted(TIERS) if tiers is None else list(tiers)
    unknown = [t for t in tiers if t not in TIERS]
    if unknown:
        raise ValueError(f"unknown difficulty tiers {unknown}; known tiers are {sorted(TIERS)}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    exclude = exclude or set()
    rows = {"prompt": [], "answer": [], "difficulty": []}
    attempts = 0
    while len(rows["prompt"]) < n:
        attempts += 1
        if attempts > 100 * max(n, 1):
            raise ValueError(f"could not draw {n} problems outside `exclude` from tiers {tiers}")
        tier = rng.choices(tiers, weights=weights)[0]
        expression, answer = TIERS[tier][1](rng)
        prompt = format_prompt(expression)
        if prompt in exclude:
            continue
        rows["prompt"].append(prompt)
        rows["answer"].append(str(answer))
        rows["difficulty"].append(tier)
    return Dataset.from_dict(rows)


def make_sft_dataset(n: int, seed: int = 0, noise: float = 0.3, tiers: list[int] | None = None) -> Dataset:
    """Worked examples for the warm start (prompt/completion columns), a share `noise` of them with a wrong answer.

    The wrong answers (off by a small amount) stand in for a base model's uncertainty: they leave the warm-started
    policy with partial accuracy and high entropy on the answer tokens, the state RL starts from in the paper.
    """
    if not 0.0 <= noise < 1.0:
        raise ValueError(f"noise must be in [0, 1), got {noise}")
    base = make_arithmetic_dataset(n, seed=seed, tiers=tiers)
    rng = random.Random(seed + 1)
    completions = []
    for answer in base["answer"]:
        value = int(answer)
        if rng.random() < noise:
            value = max(0, value + rng.choice([-1, 1]) * rng.randint(1, 10))
        completions.append(format_completion(value))
    return Dataset.from_dict({"prompt": base["prompt"], "completion": completions})


# ---------------------------------------------------------------------------------------------------------------
# The same tiers as questions for real chat models (`dataset_name: arithmetic`): a held-out split, a pool of solved
# examples for few-shot prompts, and a training split, pairwise disjoint.
HELD_OUT_SEED, SHOT_POOL_SEED = 10_000, 20_000


def chat_question(expression: str) -> str:
    return f"What is {expression}?"


def chat_solution(expression: str, answer: int | str) -> str:
    """A solved example's answer turn: the worked line, then the final answer in `\\boxed{}`."""
    return f"{expression} = {answer}. The answer is \\boxed{{{answer}}}."


def _draw_per_tier(per_tier: int, seed: int, tiers: list[int], exclude: set[str]) -> list[tuple[str, int, int]]:
    rows = []
    for tier in tiers:
        rng, seen, attempts = random.Random(seed + tier), set(), 0
        while len(seen) < per_tier:
            attempts += 1
            if attempts > 1000 * per_tier:
                raise ValueError(f"arithmetic: tier {tier} has fewer than {per_tier} problems left for this split")
            expression, answer = TIERS[tier][1](rng)
            if expression in exclude or expression in seen:
                continue
            seen.add(expression)
            rows.append((expression, answer, tier))
    return rows


def arithmetic_splits(
    train_size: int,
    test_per_tier: int = 32,
    pool_per_tier: int = 4,
    seed: int = 0,
    tiers: list[int] | None = None,
    test_extra: list[int] | None = None,
) -> dict:
    """`{"train": Dataset, "test": Dataset, "shots": [(question, solution), ...]}` with columns `question`,
    `answer`, `difficulty`. The held-out split (distinct problems, `test_per_tier` per tier, fixed: it does not
    depend on `seed`) and the shot pool are drawn first; training problems (`seed`, equal tier shares, repeats
    allowed as in the lab) never come from either, so the splits are disjoint on every tier, the small ones included
    (1-digit addition has 100 problems, 1-digit multiplication 64).

    `test_extra` (one number per tier of `tiers`, in order): that many more held-out problems of each tier, drawn
    after the shot pool from the same stream, so the first `test_per_tier` of each tier and the shot pool (the
    few-shot examples) are those drawn without them; training draws from neither."""
    tiers = sorted(TIERS) if tiers is None else sorted(tiers)
    unknown = [t for t in tiers if t not in TIERS]
    if unknown:
        raise ValueError(f"arithmetic_tiers: unknown tiers {unknown}; known tiers are {sorted(TIERS)}")
    if test_extra is not None and (len(test_extra) != len(tiers) or any(n < 0 for n in test_extra)):
        raise ValueError(
            f"arithmetic_test_extra: one number >= 0 per tier {tiers} (in that order), got {list(test_extra)}"
        )
    test = _draw_per_tier(test_per_tier, HELD_OUT_SEED, tiers, set())
    pool = _draw_per_tier(pool_per_tier, SHOT_POOL_SEED, tiers, {e for e, _, _ in test})
    if test_extra is not None and any(test_extra):
        # the same stream with the pool left out: its first test_per_tier problems are the ones drawn above (the
        # pool was drawn outside them), the rest are new
        pool_set = {e for e, _, _ in pool}
        test = [
            row
            for tier, extra in zip(tiers, test_extra)
            for row in _draw_per_tier(test_per_tier + extra, HELD_OUT_SEED, [tier], pool_set)
        ]
    reserved = {e for e, _, _ in test} | {e for e, _, _ in pool}
    train = make_arithmetic_dataset(train_size, seed=seed, tiers=tiers, exclude={format_prompt(e) for e in reserved})

    def table(rows):
        return Dataset.from_dict(
            {
                "question": [chat_question(e) for e, _, _ in rows],
                "answer": [str(a) for _, a, _ in rows],
                "difficulty": [t for _, _, t in rows],
            }
        )

    train_rows = [
        (p.removesuffix("="), int(a), t) for p, a, t in zip(train["prompt"], train["answer"], train["difficulty"])
    ]
    return {
        "train": table(train_rows),
        "test": table(test),
        "shots": [(chat_question(e), chat_solution(e, a)) for e, a, _ in pool],
    }
