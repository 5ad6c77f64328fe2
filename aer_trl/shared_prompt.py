"""AERGRPOTrainer's shared-prompt speed-ups, a mixin over TRL's GRPOTrainer: the completions of a group share their
prompt, so `share_prompt_generation` prefills each distinct prompt once for its group's rollouts and
`share_prompt_forward` runs each distinct prompt's forward once in the loss, its KV cache indexed out to the rows
that share it. The same tokens and the same loss as TRL's paths up to float rounding (tests/test_shared_generation.py,
tests/test_shared_prompt.py). The AER core (aer_trl/trainer.py) calls `_shared_prompt_logps` from its log-prob hook.
"""

from __future__ import annotations

import torch

from .compat import cache_kwarg
from .kvcache import positions, prefill


class SharedPromptMixin:
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """`share_prompt_generation`: TRL's transformers rollout with each distinct prompt prefilled once; TRL's own
        path everywhere else (vLLM, continuous batching, multimodal or tool rollouts, or no repeated prompt)."""
        if not (
            self.args.share_prompt_generation
            and not self.use_vllm
            and not self.use_transformers_continuous_batching
            and not images
            and not multimodal_fields
            and not has_tool_images
            and len(set(map(tuple, prompt_ids))) < len(prompt_ids)
        ):
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images=has_tool_images
            )
        return self._shared_prompt_generate(prompt_ids), None

    def _shared_prompt_generate(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        """TRL's regular `generate` rollout (the same left padding, generation config and EOS cut) with each distinct
        prompt's prefill run once (all but its last token) and its KV cache indexed out to the rows that share it
        (`cache.batch_select_indices`), so sampling starts from the same states as TRL's: same distribution, and the
        same tokens for the same seed up to float rounding of the prefill (tests/test_shared_generation.py)."""
        from trl.models import unwrap_model_for_generation
        from trl.trainer.utils import pad

        device = self.accelerator.device
        keys = [tuple(ids) for ids in prompt_ids]
        order = list(dict.fromkeys(keys))
        inverse = torch.tensor([order.index(k) for k in keys], device=device)
        tensors = [torch.tensor(k) for k in order]
        padding = {"padding_side": "left", "pad_to_multiple_of": self.pad_to_multiple_of}
        ids = pad(tensors, padding_value=self._tokenizer.pad_token_id, **padding).to(device)
        mask = pad([torch.ones_like(t) for t in tensors], padding_value=0, **padding).to(device)
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as unwrapped_model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            cache = prefill(unwrapped_model, ids, mask, inverse) if ids.size(1) > 1 else None
            out = unwrapped_model.generate(
                input_ids=ids[inverse],
                attention_mask=mask[inverse],
                generation_config=self.generation_config,
                **({cache_kwarg(unwrapped_model): cache} if cache is not None else {}),
            )
        completion_ids = out[:, ids.size(1) :]
        is_eos = torch.isin(completion_ids, torch.tensor(self.eos_token_ids, device=completion_ids.device))
        eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long, device=completion_ids.device)
        eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
        keep = torch.arange(is_eos.size(1), device=completion_ids.device).unsqueeze(0) <= eos_idx.unsqueeze(1)
        return [c[m].tolist() for c, m in zip(completion_ids.cpu(), keep.cpu(), strict=True)]

    # Every keyword TRL passes to `_get_per_token_logps_and_entropies` (trl 1.16), as an allow-list: these, when set,
    # send the batch to TRL's own forward (multimodal inputs); an unknown one is refused, so a keyword a later TRL
    # adds cannot take the shared path unnoticed (tests/test_trl_seams.py pins the list against TRL's signature).
    _SHARED_PROMPT_FALLBACK = (
        "pixel_values",
        "image_grid_thw",
        "num_images",
        "pixel_attention_mask",
        "spatial_shapes",
        "num_tiles",
        "image_sizes",
        "token_type_ids",
        "mm_token_type_ids",
        "image_position_ids",
    )
    _SHARED_PROMPT_KNOWN = frozenset({"compute_aux_loss", *_SHARED_PROMPT_FALLBACK})

    def _shared_prompt_logps(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        """TRL's per-token log-probs and entropies, computing each distinct prompt once (`share_prompt_forward`).

        The completions of a group share their prompt, so the prompt's forward is run once per distinct prompt (all
        but its last token, with gradient), its KV cache is indexed out to the rows that share it, and the last
        prompt token plus the completion run on top through TRL's fused LM head (pre-shifted labels). The same
        loss and gradient as TRL's full forward up to floating-point rounding, with the prompt's cost divided by the
        group size. Returns None (TRL's own path runs) where it does not apply: multimodal or MoE inputs, gradient
        checkpointing, a DDP-wrapped model, or no prompt shared by two rows."""
        unknown = sorted(set(kwargs) - self._SHARED_PROMPT_KNOWN)
        if unknown:
            raise ValueError(
                f"share_prompt_forward: TRL passed {unknown} to _get_per_token_logps_and_entropies, which the shared "
                "prompt forward does not know (this TRL is newer than aer_trl's seam); set share_prompt_forward: "
                "false, or use the TRL version pyproject.toml names"
            )
        if (
            kwargs.get("compute_aux_loss")
            or any(kwargs.get(k) is not None for k in self._SHARED_PROMPT_FALLBACK)
            or self.args.gradient_checkpointing
            or isinstance(model, torch.nn.parallel.DistributedDataParallel)
        ):
            return None
        width = input_ids.size(1) - logits_to_keep  # prompt columns (left-padded)
        if width < 2:
            return None
        if batch_size and batch_size < input_ids.size(0):  # TRL's memory chunking, kept chunk by chunk
            parts = [
                self._shared_prompt_logps(
                    model, input_ids[i : i + batch_size], attention_mask[i : i + batch_size], logits_to_keep,
                    compute_entropy=compute_entropy, **kwargs,
                )
                for i in range(0, input_ids.size(0), batch_size)
            ]  # fmt: skip
            if any(p is None for p in parts):
                return None
            entropies = torch.cat([p[1] for p in parts]) if compute_entropy else None
            return torch.cat([p[0] for p in parts]), entropies, None
        prompts = torch.cat([input_ids[:, :width], attention_mask[:, :width]], dim=1)
        unique, inverse = torch.unique(prompts, dim=0, return_inverse=True)
        if unique.size(0) == input_ids.size(0):
            return None
        config = self.accelerator.unwrap_model(model).config  # a DeepSpeed engine's `.config` is its JSON dict
        cache_name = cache_kwarg(model)  # `cache`, or `past_key_values` before transformers renamed it
        with self.accelerator.autocast():
            cache = prefill(model, unique[:, :width], unique[:, width:], inverse, config=config)
            tail = input_ids[:, width - 1 :]  # the last prompt token, then the completion
            if getattr(self, "_aer_support_parts", None) is not None:  # the truncated-support bonus (support.py)
                head = {"use_cache": False}
            else:
                shift_labels = input_ids[:, width:].masked_fill(attention_mask[:, width:] == 0, -100)
                pad = shift_labels.new_full((shift_labels.size(0), 1), -100)
                head = {"shift_labels": torch.cat([shift_labels, pad], dim=1), "fused_lm_head": True}
            outputs = model(
                input_ids=tail,
                attention_mask=attention_mask,
                position_ids=positions(attention_mask)[:, width - 1 :],
                **{cache_name: cache},
                **head,
            )
        if getattr(self, "_aer_support_parts", None) is not None:
            logps, entropies = self._support_head(outputs.logits[:, :logits_to_keep], input_ids[:, width:])
            return logps, entropies if compute_entropy else None, None
        logps = outputs.log_probs[:, :logits_to_keep]
        entropies = outputs.entropy[:, :logits_to_keep] if compute_entropy else None
        return logps, entropies, None
