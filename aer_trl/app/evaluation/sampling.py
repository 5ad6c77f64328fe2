"""Sampling completions with `transformers` (the CPU backend of the harness, the lab's held-out evaluation, and
`PassAtKCallback` during training), inside a forked RNG so the caller's random state, CUDA included, is untouched.

`sample_chunk` is the harness's unit of work: one `generate` call for a chunk of prompts × n samples, seeded once.
Each prompt's prefill is computed once and its KV cache repeated n times (instead of prefilling the same prompt n
times, which is what `num_return_sequences` does), so the cost is about that of decoding the samples.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from ...compat import cache_kwarg
from ..kvcache import prefill

__all__ = ["isolated_rng", "sample_chunk", "sample_completions"]


@contextlib.contextmanager
def isolated_rng(seed: int | None = None, device: torch.device | None = None):
    """Fork the CPU RNG and, on CUDA, the RNG of every visible device; seed inside; restore everything after."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        if seed is not None:
            torch.manual_seed(seed)  # seeds CPU and every CUDA device; all restored on exit
        yield


def adds_special_tokens(tokenizer) -> bool:
    """Whether the evaluation encodes its prompt texts with the tokenizer's special tokens (a BOS). Not where the
    tokenizer has a chat template: the text came through it (the evaluation's prompts are conversations) and holds
    every special token the template wrote, as TRL's rollouts tokenize it. Yes for a tokenizer without one (a base
    model's plain text): TRL encodes a plain prompt with them (`processing_class(text=...)`), as lm-eval does, and a
    Llama-style base model sampled without its BOS answers other prompts than it was measured on elsewhere."""
    return not getattr(tokenizer, "chat_template", None)


def _left_padded(tokenizer, texts, device):
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        special = adds_special_tokens(tokenizer)
        return tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=special).to(device)
    finally:
        tokenizer.padding_side = side


@torch.no_grad()
def sample_chunk(
    model,
    tokenizer,
    texts: Sequence[str],
    n: int,
    seed: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    max_new_tokens: int = 32,
    stop: Sequence[str] | None = None,
) -> list[list[str]]:
    """`n` samples for each of `texts` from one `generate` call seeded with `seed` (inside a forked RNG); a sample
    ends at the first of `stop`'s strings, which is not kept (as vLLM's `stop`).

    Contract: the result is a function of (model, texts in order, n, seed, sampling settings) alone. The prompts are
    prefilled once (all but their last token), the cache is repeated n times, and `generate` samples the n·len(texts)
    rows from there; `top_k=0` samples from the full distribution (as TRL's training does). Models whose cache cannot
    be repeated fall back to `num_return_sequences` (same contract, prefill repeated)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    enc = _left_padded(tokenizer, texts, device)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    sampling = dict(
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )
    if stop:
        sampling.update(stop_strings=list(stop), tokenizer=tokenizer)
    try:
        with isolated_rng(seed):
            out = None
            if ids.shape[1] > 1:
                try:
                    rows = torch.arange(ids.size(0), device=ids.device).repeat_interleave(n)
                    cache = prefill(model, ids, mask, rows)
                except (TypeError, ValueError, NotImplementedError, AttributeError):
                    cache = None
                if cache is not None:
                    out = model.generate(
                        input_ids=ids.repeat_interleave(n, 0),
                        attention_mask=mask.repeat_interleave(n, 0),
                        **{cache_kwarg(model): cache},
                        **sampling,
                    )
            if out is None:
                out = model.generate(**enc, num_return_sequences=n, **sampling)
    finally:
        if was_training:
            model.train()
    texts_out = [
        cut_at_stop(t, stop) for t in tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
    ]
    return [texts_out[i * n : (i + 1) * n] for i in range(len(texts))]


def cut_at_stop(text: str, stop: Sequence[str] | None) -> str:
    """`text` up to the first of the `stop` strings (excluded); `text` where none occurs."""
    ends = [i for i in (text.find(s) for s in stop or ()) if i >= 0]
    return text[: min(ends)] if ends else text


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
    """`n` sampled completions per prompt with `transformers` generation, in batches of `batch_size` prompts from
    one random stream seeded with `seed` (the lab's held-out evaluation), with a progress bar. The harness samples
    through `sample_chunk` instead (one seed per chunk, prompts prefilled once)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    results: list[list[str]] = []
    try:
        with isolated_rng(seed):
            for start in tqdm(range(0, len(prompts), batch_size), desc=desc, disable=disable_tqdm):
                batch = list(prompts[start : start + batch_size])
                enc = _left_padded(tokenizer, batch, device)
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
        if was_training:
            model.train()
    return results
