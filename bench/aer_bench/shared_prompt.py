"""The bench's CPU speed-ups, a mixin over `AERGRPOTrainer` (`aer_bench.training.BenchGRPOTrainer`): the completions
of a group share their prompt, so `share_prompt_generation` prefills each distinct prompt once for its group's
rollouts and `share_prompt_forward` runs each distinct prompt's forward once in the loss, its KV cache indexed out to
the rows that share it. The same tokens and the same loss as TRL's paths up to float rounding
(bench/tests/test_shared_generation.py, bench/tests/test_shared_prompt.py). On a GPU neither applies (vLLM rollouts,
gradient checkpointing), so they stay out of the library.
"""

from __future__ import annotations

import torch

from aer_trl.app.kvcache import positions, prefill
from aer_trl.compat import cache_kwarg


class SharedPromptMixin:
    def _logps_forward(self, *args, **kwargs):
        """The loss's log-prob forward (`AERGRPOTrainer._logps_forward`): the shared-prompt one where it applies."""
        shared = self._shared_prompt_logps(*args, **kwargs) if self.args.share_prompt_forward else None
        return shared if shared is not None else super()._logps_forward(*args, **kwargs)

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
        return self._with_shared_prefill(
            super()._generate_single_turn, prompt_ids, images, multimodal_fields, num_generations, has_tool_images
        )

    def _with_shared_prefill(self, rollout, *args):
        """Runs TRL's own rollout (`rollout(*args)`: its padding, generation config, ZeRO-3 gathering and EOS cut)
        with the unwrapped model's `generate` wrapped for the call: each distinct prompt row's prefill (all but its
        last token) runs once and its KV cache is indexed out to the rows that share it (`cache.batch_select_indices`),
        so sampling starts from the same states as TRL's: same distribution, and the same tokens for the same seed up
        to float rounding of the prefill (tests/test_shared_generation.py)."""
        model = self.accelerator.unwrap_model(self.model_wrapped)  # what TRL's unwrap_model_for_generation yields
        own = model.__dict__.get("generate")
        generate = model.generate

        def shared_generate(input_ids, attention_mask, **kwargs):
            keys = [tuple(row) for row in torch.cat([input_ids, attention_mask], 1).tolist()]
            order = {key: i for i, key in enumerate(dict.fromkeys(keys))}  # distinct rows, in order of appearance
            width = input_ids.size(1)
            if width > 1 and len(order) < len(keys):
                rows = torch.tensor(list(order), dtype=input_ids.dtype, device=input_ids.device)
                inverse = torch.tensor([order[key] for key in keys], device=input_ids.device)
                kwargs[cache_kwarg(model)] = prefill(model, rows[:, :width], rows[:, width:], inverse)
            return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

        model.generate = shared_generate
        try:
            return rollout(*args)
        finally:
            if own is None:
                del model.generate
            else:
                model.generate = own

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
        top_k = getattr(self, "_support_parts", None) is not None  # the truncated-support bonus collects
        with self.accelerator.autocast():
            cache = prefill(model, unique[:, :width], unique[:, width:], inverse, config=config)
            tail = input_ids[:, width - 1 :]  # the last prompt token, then the completion
            if top_k:  # the truncated-support bonus (aer_bench.truncated_support): the logits, not the fused head
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
        if top_k:
            logps, entropies = self._support_head(outputs.logits[:, :logits_to_keep], input_ids[:, width:])
            return logps, entropies if compute_entropy else None, None
        logps = outputs.log_probs[:, :logits_to_keep]
        entropies = outputs.entropy[:, :logits_to_keep] if compute_entropy else None
        return logps, entropies, None
