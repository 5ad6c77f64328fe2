"""TRL's asynchronous GRPO (`trl.experimental.async_grpo`) on a machine without FlashAttention-3 or CUDA, written so
it could be proposed to TRL as its CPU and test path:

- `tree_attention_sdpa`: the tree attention of TRL's packed rows (each segment of a prefix trie attends to the K/V of
  its root-to-segment path, causally) in plain torch, used by itself where the FA3 kernel cannot load
  (`register_tree_attention`); tests/test_async_grpo.py checks it against a dense causal attention on the same rows;
- `peak_flops_per_device`: TRL's MFU estimate asks CUDA for the device's name even on a CPU (`torch.cuda.
  get_device_name` raises there); off CUDA there is no peak to divide by, and MFU is simply not logged;
The AER trainer runs TRL's constructor and data loader with `get_peak_flops_per_device` and the collator bound to its
own (`upstream.rebind.with_names`), TRL's module left as it is (docs/upstream.md: the hooks TRL could add instead).
"""

from __future__ import annotations

import functools
import logging

import torch

logger = logging.getLogger(__name__)


def tree_attention_sdpa(
    module,
    query,
    key,
    value,
    attention_mask,
    *,
    tree_kv_index,
    tree_cu_seqlens_q,
    tree_cu_seqlens_k,
    tree_max_seqlen_q=None,
    tree_max_seqlen_k=None,
    scaling=None,
    sliding_window=None,
    softcap=None,
    **kwargs,
):
    """TRL's `tree_attention` without FA3: for each segment s, queries `query[cu_q[s]:cu_q[s+1]]` attend to the keys
    and values at `tree_kv_index[cu_k[s]:cu_k[s+1]]` (the segment's root-to-segment path, ending with the segment
    itself), causally aligned at the end (FA's varlen `causal=True`: query i of Lq sees keys j <= i + Lk - Lq). Same
    arguments and return as TRL's (`(1, N, H, D)` output, no weights). Shapes in: (1, H, N, D) for q, (1, Hkv, N, D)
    for k and v, as transformers' attention interface passes them."""
    q = query[0].transpose(0, 1)  # (N, H, D)
    k = key[0].transpose(0, 1).index_select(0, tree_kv_index)  # (K, Hkv, D)
    v = value[0].transpose(0, 1).index_select(0, tree_kv_index)
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:  # grouped-query attention
        k, v = k.repeat_interleave(heads // kv_heads, dim=1), v.repeat_interleave(heads // kv_heads, dim=1)
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    out = torch.empty_like(q)
    cu_q, cu_k = tree_cu_seqlens_q.tolist(), tree_cu_seqlens_k.tolist()
    for s in range(len(cu_q) - 1):
        qs = q[cu_q[s] : cu_q[s + 1]].transpose(0, 1)  # (H, Lq, D)
        ks, vs = (x[cu_k[s] : cu_k[s + 1]].transpose(0, 1) for x in (k, v))  # (H, Lk, D)
        lq, lk = qs.shape[1], ks.shape[1]
        scores = (qs.float() @ ks.float().transpose(-1, -2)) * scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        i = torch.arange(lq, device=q.device).unsqueeze(1) + (lk - lq)
        j = torch.arange(lk, device=q.device).unsqueeze(0)
        allowed = j <= i
        if sliding_window:
            allowed &= j > i - sliding_window
        scores = scores.masked_fill(~allowed, float("-inf"))
        out[cu_q[s] : cu_q[s + 1]] = (scores.softmax(-1) @ vs.float()).to(q.dtype).transpose(0, 1)
    return out.unsqueeze(0), None


AER_TREE_ATTENTION = "aer_tree_attention"  # the attention the AER trainer's model runs, by this package's name


@functools.cache
def flash_attention_3_available() -> bool:
    """Whether TRL's tree attention can load its FA3 kernel on a CUDA device (the Hub kernel cached or reachable).
    Asked once, the first time a CUDA tensor reaches `tree_attention_by_device`."""
    try:
        from trl.experimental.async_grpo.packing import _flash_attn

        _flash_attn()
    except Exception as error:  # no `kernels` package, no network, an older GPU
        logger.warning("FlashAttention-3 for tree attention is unavailable (%s): using the torch fallback", error)
        return False
    return True


def uses_fa3(device: torch.device) -> bool:
    """Whether tree attention on `device` runs TRL's FA3 kernel: a CUDA device where the kernel loads; the torch
    fallback everywhere else (a CPU, also on a machine with a GPU and the kernel cached)."""
    return device.type == "cuda" and flash_attention_3_available()


def tree_attention_by_device(module, query, key, value, attention_mask, **kwargs):
    """TRL's tree attention where the tensors are on a CUDA device that loads FA3, `tree_attention_sdpa` elsewhere:
    the choice follows the trainer's device, call by call, not the machine."""
    if uses_fa3(query.device):
        from trl.experimental.async_grpo.packing import tree_attention

        return tree_attention(module, query, key, value, attention_mask, **kwargs)
    return tree_attention_sdpa(module, query, key, value, attention_mask, **kwargs)


def _no_mask(**kwargs):
    return None


def use_tree_attention_by_device(model) -> None:
    """Points `model` (loaded by TRL with its FA3-only tree attention) at `tree_attention_by_device`, registered under
    this package's own name: TRL's registration is left as TRL made it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(AER_TREE_ATTENTION, tree_attention_by_device)  # the same function each time
    AttentionMaskInterface.register(AER_TREE_ATTENTION, _no_mask)  # as TRL's: the packed rows carry the tree
    model.set_attn_implementation(AER_TREE_ATTENTION)


def peak_flops_per_device(accelerator, dtype: str) -> float | None:
    """TRL's `get_peak_flops_per_device`, None off CUDA (where TRL's asks `torch.cuda` for a device name and fails)."""
    if accelerator.device.type != "cuda":
        return None
    from trl.trainer.utils import get_peak_flops_per_device

    return get_peak_flops_per_device(accelerator, dtype)
