"""Each distinct prompt's prefill once, its KV cache indexed out to the rows that share it: the one mechanism behind
the shared prompt forward (training loss), the shared rollout generation and the harness's sampling.

`prefill(model, ids, mask, rows)` runs the left-padded prompts `ids` (all but their last token) through `model` with a
fresh `DynamicCache`, then selects the cache's rows by `rows` (a row index per output row: the group's prompt, or each
prompt repeated n times), so that the last prompt token and what follows run on top exactly as if every row had been
prefilled itself. Gradient flows when the caller's context allows it (the loss's forward); sampling wraps it in
`torch.no_grad()`.
"""

from __future__ import annotations

import torch

from ..compat import cache_kwarg

__all__ = ["positions", "prefill"]


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of left-padded rows: 0 at each row's first real token (padding gets 0 too)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def prefill(model, ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, config=None):
    """The KV cache of `ids[:, :-1]` (left-padded prompts, their attention `mask`), with its batch rows selected by
    `rows`. `config`: the model config for the cache (default `model.config`)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config or model.config)
    model(
        input_ids=ids[:, :-1],
        attention_mask=mask[:, :-1],
        position_ids=positions(mask)[:, :-1],
        use_cache=True,
        logits_to_keep=1,
        **{cache_kwarg(model): cache},
    )
    cache.batch_select_indices(rows)
    return cache
