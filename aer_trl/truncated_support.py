"""AERGRPOTrainer's truncated-support bonus (`aer_bonus_top_k`, method aer_topk; ours, AEnt's clamped entropy), a
mixin over TRL's GRPOTrainer. TRL's fused LM head returns each token's log-prob and full entropy without ever making
the logits; the entropy over the top-k of each token's distribution needs them. While the loss runs with this bonus
on, the log-prob hook goes through `_support_logps` (or the shared-prompt forward's logits head), which runs the
model's own forward for the completion positions' logits and computes, from the same logits, TRL's log-probs and
full entropies (`trl.trainer.utils.selective_log_softmax_and_entropy`, at TRL's temperature) and the truncated
entropies the bonus raises, into the loss's capture (`aer_trl.trainer.LossCapture.top_k_parts`).
"""

from __future__ import annotations

import torch
from trl.trainer.utils import selective_log_softmax_and_entropy

from .controller import truncated_entropy


class TruncatedSupportMixin:
    def _support_head(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`logits` (B, K, V) of the positions that predict `labels` (B, K): TRL's log-probs and full entropies at
        TRL's temperature; the truncated entropies (with gradient) go to the loss's capture (`LossCapture`)."""
        logits = logits.float() / self.temperature
        logps, entropies = selective_log_softmax_and_entropy(logits, labels)
        self._loss_capture.top_k_parts.append(truncated_entropy(logits, self.args.aer_bonus_top_k))
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
