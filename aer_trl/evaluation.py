"""pass@k and sampling for evaluation (SPEC §4).

`pass_at_k(n, c, k)` is the unbiased estimator 1 − C(n−c, k) / C(n, k), computed in exact integer arithmetic and
rounded once, so it neither overflows nor drifts at n = 256 or beyond.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from tqdm.auto import tqdm

__all__ = ["pass_at_k", "mean_pass_at_k", "k50", "sample_completions"]


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


@torch.no_grad()
def sample_completions(
    model,
    tokenizer,
    prompts: Sequence[str],
    n: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 32,
    batch_size: int = 64,
    seed: int = 0,
    desc: str = "sampling",
    disable_tqdm: bool = False,
) -> list[list[str]]:
    """`n` sampled completions per prompt with `transformers` generation (the CPU backend), with a progress bar."""
    model.eval()
    device = next(model.parameters()).device
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    results: list[list[str]] = []
    try:
        for start in tqdm(range(0, len(prompts), batch_size), desc=desc, disable=disable_tqdm):
            batch = list(prompts[start : start + batch_size])
            enc = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                num_return_sequences=n,
                pad_token_id=tokenizer.pad_token_id,
            )
            texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            results.extend(texts[i * n : (i + 1) * n] for i in range(len(batch)))
    finally:
        tokenizer.padding_side = side
        torch.random.set_rng_state(generator_state)
    return results
