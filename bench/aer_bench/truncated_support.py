"""The bonus on a truncated support (`aer_bonus_top_k`, method `aer_topk`; ours, AEnt's clamped entropy), a research
variant the bench trains through the library's seams: `BenchConfig.aer_bonus_top_k`, this mixin in
`BenchGRPOTrainer`, and the method registered when `aer_bench.training` is imported.

TRL's fused LM head returns each token's log-prob and full entropy without ever making the logits; the entropy over
the top-k of each token's distribution needs them. While the loss runs with this bonus on, the log-prob forward goes
through `_support_logps` (or the shared-prompt forward's logits head), which runs the model's own forward for the
completion positions' logits and computes, from the same logits, TRL's log-probs and full entropies
(`trl.trainer.utils.selective_log_softmax_and_entropy`, at TRL's temperature) and the truncated entropies the bonus
raises; `bonus_entropies` hands those to the library's loss (`AERGRPOTrainer.compute_loss`). The controller's H_t
stays the full entropy.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import selective_log_softmax_and_entropy

from aer_trl.methods import Method, register_method


def truncated_entropy(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Each position's entropy over its truncated support: the distribution renormalised over its ``top_k`` largest
    logits, the rest masked. The bonus raised on it reshapes probability among the tokens the policy already ranks
    highest and has no gradient into the vocabulary's tail, so it cannot buy entropy by spreading mass over tokens
    nobody samples on purpose.

    Args:
        logits: (..., V) logits (temperature already applied); they may carry gradient.
        top_k: how many of the largest logits form the support (>= 1; more than V means all of them).

    Returns:
        (...) entropies in nats, at most ln(top_k).
    """
    if int(top_k) != top_k or top_k < 1:
        raise ValueError(f"top_k must be an integer >= 1, got {top_k}")
    top = logits.topk(min(int(top_k), logits.size(-1)), dim=-1).values.float()
    logp = torch.log_softmax(top, dim=-1)
    return -(logp.exp() * logp).sum(-1).to(logits.dtype)


def check_top_k(value) -> None:
    """`aer_bonus_top_k`: an integer >= 2 (a support of one token has no entropy) or None."""
    if value is not None and (isinstance(value, bool) or int(value) != value or value < 2):
        raise ValueError(
            f"aer_bonus_top_k must be an integer >= 2 (a support of one token has no entropy) or None, got {value}"
        )


class TruncatedSupportMixin:
    # the truncated entropies of the loss forward running now (one tensor per forward chunk); None outside it
    _support_parts: list | None = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.args.aer_bonus_top_k is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        with self._capturing("_support_parts", []):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def bonus_entropies(self, entropies: torch.Tensor) -> torch.Tensor:
        if self._support_parts is None:
            return super().bonus_entropies(entropies)
        if not self._support_parts:
            raise RuntimeError("aer_bonus_top_k: the log-prob forward produced no truncated entropies")
        return torch.cat(self._support_parts)

    def _logps_forward(self, *args, **kwargs):
        if self._support_parts is not None:
            return self._support_logps(*args, **kwargs)
        return super()._logps_forward(*args, **kwargs)

    def _support_head(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`logits` (B, K, V) of the positions that predict `labels` (B, K): TRL's log-probs and full entropies at
        TRL's temperature; the truncated entropies (with gradient) are kept for `bonus_entropies`."""
        logits = logits.float() / self.temperature
        logps, entropies = selective_log_softmax_and_entropy(logits, labels)
        self._support_parts.append(truncated_entropy(logits, self.args.aer_bonus_top_k))
        return logps, entropies

    def _support_logps(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        """TRL's `_get_per_token_logps_and_entropies` for text batches, through the model's logits (not the fused
        head), chunked as TRL chunks. Multimodal, MoE-auxiliary or unknown keywords are refused: the truncated
        support is built for text policies."""
        used = sorted(k for k, v in kwargs.items() if v not in (None, False))
        if used:
            raise ValueError(
                f"aer_bonus_top_k supports text-only, non-MoE training: TRL passed {used} to the log-prob forward; "
                "set aer_bonus_top_k: null"
            )
        batch_size = batch_size or input_ids.size(0)
        all_logps, all_entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            with self.accelerator.autocast():
                outputs = model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1, use_cache=False)
            logits = outputs.logits
            logps, entropies = self._support_head(logits[:, :-1], ids[:, -logits_to_keep:])
            all_logps.append(logps)
            all_entropies.append(entropies)
        entropies = torch.cat(all_entropies) if compute_entropy else None
        return torch.cat(all_logps), entropies, None


AER_TOPK = register_method(
    Method(
        "aer_topk",
        "AER with the bonus on a truncated support: each token's entropy over its top aer_bonus_top_k (default 20) "
        "logits renormalised, no push into the vocabulary's tail (AEnt's clamped entropy); ours, not the paper's, "
        "the research bench's (docs/methods.md)",
        "AER-GRPO (ours: bonus on a truncated support)",
        aer=True,
        defaults={"aer_adaptive": True, "aer_difficulty_aware": True, "aer_bonus_top_k": 20},
        trl_entropy=False,
        trainer=TruncatedSupportMixin,
    ),
    replace=True,
)
