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
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_config_model_id

from .callback import AERCallback
from .card import write_model_card
from .config import AERGRPOConfig
from .core_algos import (
    BUCKETS,
    capped_entropy,
    difficulty_buckets,
    difficulty_coefficients,
    group_accuracy,
    hard_mask,
    sequence_entropy,
)
from .methods import TokenBatch, get_method
from .metrics import MetricsFileCallback
from .prompts import prompts_are_conversational, set_chat_template
from .resume import ResumeMixin, ScheduleResumeCallback
from .rewards import resolve_correctness_index
from .vllm_support import (
    EngineDriftGuard,
    colocate_on_cpu,
    colocated_engine_settings,
    prepare_vllm_on_cpu,
    synced_through_reload,
)

logger = logging.getLogger(__name__)

# aer/* values set afresh at every logging step from the controller (never carried over from an earlier one)
LIVE_KEYS = ("aer/alpha", "aer/initial_entropy", "aer/target_entropy")


def metric_phase(key: str) -> str:
    """The part of a rollout batch that measures an aer/* metric: "entropy" (`aer/entropy` and the per-bucket
    entropies, over the batch's training, at its end) or "rollout" (λ, g(q) and the buckets' shares, at its
    generation). A logging step carries each phase's last values; a phase that ran since replaces all of them."""
    entropy = key == "aer/entropy" or (key.startswith("aer/bucket/") and key.endswith("/entropy"))
    return "entropy" if entropy else "rollout"


@dataclass
class RolloutCapture:
    """What TRL's scoring of a rollout batch hands back to AER: the rewards per function, gathered over processes."""

    rewards: torch.Tensor | None = None


@dataclass
class LossCapture:
    """What one loss forward hands back to AER beside TRL's loss: the per-token entropies TRL's fused head computed
    (with gradient). `inputs`: the batch TRL's loss reads, for a method's per-token hook."""

    inputs: dict | None = None
    entropies: torch.Tensor | None = None


def cpu_has_bf16_kernels() -> bool:
    """Whether PyTorch multiplies bfloat16 matrices on this CPU with oneDNN's kernels (x86 with AVX-512 or AMX, Arm
    with bf16). Without them (an AVX2-only CPU, e.g. AMD EPYC Milan) a bf16 matmul falls back to PyTorch's reference
    GEMM. True when torch cannot say."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True


def cpu_bf16_warning(device, bf16: bool, model) -> str | None:
    """What to tell a user who trains in bfloat16 (`bf16=True`: autocast, TRL's default; or bf16 weights) on a CPU
    without bf16 matrix kernels (`cpu_has_bf16_kernels`): every matmul then runs in PyTorch's reference GEMM. Measured
    on a 2-core AMD EPYC (AVX2), SmolLM2-135M, 32 completions of 138 tokens, GRPO: 198-200 s per step under bf16
    autocast against 18 s in float32 (docs/usage.md). None where it does not apply."""
    if torch.device(device).type != "cpu":
        return None
    weights = any(p.dtype == torch.bfloat16 for p in model.parameters())
    if not (bf16 or weights) or cpu_has_bf16_kernels():
        return None
    what = "bf16=True (autocast)" if bf16 else "the model's bfloat16 weights"
    return (
        f"{what} on a CPU without bfloat16 matrix kernels (torch.ops.mkldnn._is_mkldnn_bf16_supported() is False: "
        "no AVX-512 or AMX): every bf16 matmul runs in PyTorch's reference GEMM, about 10x slower per step than "
        "float32 (measured: 200 s against 18 s for SmolLM2-135M). Train in float32 here: bf16=False"
        + ("" if bf16 else " and dtype='float32'")
    )


class AERGRPOTrainer(ResumeMixin, GRPOTrainer):
    """GRPO with Adaptive Entropy Regularization. Same constructor as `trl.GRPOTrainer`; `args` is an `AERGRPOConfig`
    (a plain `trl.GRPOConfig` is converted, the AER fields at their defaults)."""

    _tag_names = ["trl", "grpo", "aer", "aer_trl"]
    _name = "AER-GRPO"
    # alive only while TRL's scoring / loss runs inside AER's override (`_capturing`), None otherwise
    _rollout_capture: RolloutCapture | None = None
    _loss_capture: LossCapture | None = None

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: AERGRPOConfig | None = None,
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
            args = AERGRPOConfig(f"{model_name.split('/')[-1]}-AER")
        if isinstance(args, GRPOConfig) and not isinstance(args, AERGRPOConfig):
            # a drop-in for trl.GRPOTrainer: TRL's config is taken as it is, the AER fields at their defaults; a config
            # that asks for TRL's own entropy bonus trains it (method 'grpo'), since AER's would be a second one
            trl_entropy = args.entropy_coef != 0.0 or args.use_adaptive_entropy
            method = "grpo" if trl_entropy else AERGRPOConfig.method
            logger.warning(
                "AERGRPOTrainer got a trl.GRPOConfig: converted with AERGRPOConfig.from_grpo_config, method=%r%s (AER "
                "fields at their defaults); pass an AERGRPOConfig to set them",
                method,
                " because it sets TRL's entropy_coef/use_adaptive_entropy" if trl_entropy else "",
            )
            args = AERGRPOConfig.from_grpo_config(args, method=method)
        if not isinstance(args, AERGRPOConfig):
            raise TypeError(
                "AERGRPOTrainer needs `args` to be an aer_trl.AERGRPOConfig or a trl.GRPOConfig, got "
                f"{type(args).__name__}"
            )
        missing = [c for c in args.trainer_requirements() if not isinstance(self, c)]
        if missing:
            raise TypeError(
                f"{type(args).__name__} (method={args.method!r}) trains with a trainer that includes "
                f"{', '.join(f'{c.__module__}.{c.__name__}' for c in missing)} (an extension's), not "
                f"{type(self).__name__}: the settings would be ignored"
            )
        callbacks = list(callbacks or [])
        if not any(isinstance(cb, ScheduleResumeCallback) for cb in callbacks):
            callbacks.append(ScheduleResumeCallback())  # a checkpoint without a schedule resumes on it
        if args.aer_measurements:  # off (a non-AER method, not asked for): nothing of AER's, as trl.GRPOTrainer
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
            prepare_vllm_on_cpu(model, args)
        with colocated_engine_settings(self):  # vLLM in the trainer's dtype, eager on CPU (aer_trl.vllm_support)
            super().__init__(model, reward_funcs, args, *pos_args, callbacks=callbacks, **kwargs)
        set_chat_template(
            self.processing_class, args.chat_template_path, prompts_are_conversational(self.train_dataset)
        )
        if colocate_on_cpu(args):
            synced_through_reload(self.vllm_generation)  # MoE (and dense) syncs that reach vLLM's CPU kernels
        self._engine_guard = EngineDriftGuard.for_trainer(self.model, args)  # stops a run whose engine drifted
        self._aer_method = get_method(args.method)
        self.aer_dataset_name, self.aer_data_description = dataset_name, data_description
        self._aer_correctness_index = resolve_correctness_index(args.aer_correctness_reward, self.reward_func_names)
        self._aer_entropy_stats: torch.Tensor | None = None  # local [sum of H over tokens, token count]
        # per phase (`metric_phase`): the aer/* values last logged, repeated on logging steps where it did not run
        self._aer_carried: dict[str, dict[str, float]] = {}
        self._aer_phases_run: set[str] = set()  # the phases that ran since the last logging step
        self.aer_resume_changes: dict[str, tuple] = {}  # settings that differ from the checkpoint resumed from
        self._aer_draws: tuple[int, str, int] = (-1, "train", 0)  # (optimizer step, mode, hook calls in it so far)
        slow = cpu_bf16_warning(self.accelerator.device, args.bf16, self.model)
        if slow:
            logger.warning(slow)

    # ------------------------------------------------------------------------------------------------ controller
    @property
    def aer_callback(self) -> AERCallback:
        """The live AERCallback (looked up each time: resuming may replace the instance)."""
        for cb in self.callback_handler.callbacks:
            if isinstance(cb, AERCallback):
                return cb
        if not self.args.aer_measurements:
            raise RuntimeError(
                f"method={self.args.method!r} trains without AER's controller (aer_measurements is off); set "
                "aer_measurements=True to measure entropy as AER does"
            )
        raise RuntimeError("AERGRPOTrainer needs an AERCallback in its callbacks; it was removed")

    @property
    def aer_alpha(self) -> float:
        return self.aer_callback.alpha

    @contextmanager
    def _capturing(self, name: str, capture):
        """`capture` as `self.<name>` while TRL's code runs inside the block: the one way AER's hooks hand values
        back past TRL's methods, which do not return them."""
        setattr(self, name, capture)
        try:
            yield capture
        finally:
            setattr(self, name, None)

    # ------------------------------------------------------------------------------------------------ rollout
    def _cut_off(self, completion_ids_list) -> list[bool]:
        """Which completions end in neither EOS nor padding: TRL's own test of truncation (`mask_truncated_completions`
        masks these); `_calculate_rewards` also asks for the whole length budget used."""
        ends = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        return [not ids or ids[-1] not in ends for ids in completion_ids_list]

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # every reward function gets `completion_truncated`: an answer at the end of a cut completion may be cut too.
        # Cut by the length limit: all `max_completion_length` tokens used (a stop string also ends without EOS)
        cut = [
            c and len(ids) >= self.max_completion_length
            for c, ids in zip(self._cut_off(completion_ids_list), completion_ids_list, strict=True)
        ]
        inputs = [{**example, "completion_truncated": c} for example, c in zip(inputs, cut, strict=True)]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._rollout_capture is not None:
            self._rollout_capture.rewards = rewards_per_func  # (N_global, n_funcs), gathered over processes, NaN=None
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        self._engine_guard.before(self._metrics[mode])
        with self._capturing("_rollout_capture", RolloutCapture()) as capture:
            output = super()._generate_and_score_completions(inputs)
        self._engine_guard.after(self._metrics[mode], self.state.global_step)
        if not self.args.aer_measurements:
            return output
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = capture.rewards[:, self._aer_correctness_index]

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
        if mode == "train":
            self._aer_phases_run.add("rollout")
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

    # ------------------------------------------------------------------------------------------------ loss
    @staticmethod
    def _trained_mask(inputs: dict) -> torch.Tensor:
        """The completion tokens TRL's loss trains on (tool outputs excluded), as in `_compute_loss`."""
        mask = inputs["completion_mask"]
        return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux_loss = self._logps_forward(*args, **kwargs)
        capture = self._loss_capture
        if capture is not None and entropies is not None:  # inside AER's compute_loss: hand them back
            capture.entropies = entropies
            if capture.inputs is not None:
                logps = self._apply_token_method(logps, entropies, capture.inputs)
        return logps, entropies, aux_loss

    def _logps_forward(self, *args, **kwargs):
        """The log-prob forward: TRL's. A subclass may route it elsewhere (the research bench's shared-prompt forward
        and truncated-support bonus do)."""
        return super()._get_per_token_logps_and_entropies(*args, **kwargs)

    def bonus_entropies(self, entropies: torch.Tensor) -> torch.Tensor:
        """The per-token entropies (B, T), with gradient, whose completion means H_i AER's bonus raises: those of
        the full distributions TRL's loss computed (the paper). A subclass may raise others (the research bench's
        entropy over a truncated support does); the controller's H_t is always measured on `entropies`."""
        return entropies

    def _token_generator(self) -> torch.Generator:
        """The CPU generator of one hook call's random draws (Clip-Cov's tokens): seeded from the run's seed, the
        process, the optimizer step, train or eval, and the call's place within that step, so it holds no state: a
        resumed run draws what the uninterrupted one draws, on any number of processes."""
        mode = "train" if self.model.training else "eval"
        step, last_mode, calls = self._aer_draws
        calls = calls + 1 if (step, last_mode) == (self.state.global_step, mode) else 1
        self._aer_draws = (self.state.global_step, mode, calls)
        key = [self.args.seed, self.accelerator.process_index, self.state.global_step, mode == "eval", calls]
        return torch.Generator().manual_seed(int(np.random.SeedSequence(key).generate_state(1)[0]))

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
            generator=self._token_generator(),
        )
        advantages, metrics = self._aer_method.token_hook(batch, self.args)
        mode = "train" if self.model.training else "eval"
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)
        inputs["advantages"] = advantages
        return logps

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        hook = self._aer_method.token_hook is not None
        if not (hook or self.args.aer_measurements):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)  # TRL's loss, untouched
        if hook:
            inputs = dict(inputs)  # a shallow copy: the buffered rollout batch is left as it was
        with self._capturing("_loss_capture", LossCapture(inputs=inputs if hook else None)) as capture:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        entropies = capture.entropies
        if entropies is None:
            raise RuntimeError("TRL's loss did not compute token entropies; AERGRPOTrainer cannot add its bonus")

        mask = self._trained_mask(inputs).to(entropies.dtype)
        mode = "train" if self.model.training else "eval"

        lam = inputs.get("aer_lambda")
        if lam is not None and bool((lam != 0).any()):  # on the host: no device sync
            # H_i, with gradient
            seq_entropy = sequence_entropy(self.bonus_entropies(entropies), mask, self.args.aer_bonus_quantile)
            if self.args.aer_bonus_cap is not None and self.aer_callback.target is not None:
                seq_entropy = capped_entropy(seq_entropy, self.args.aer_bonus_cap * self.aer_callback.target)
            accumulation_factor = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            lam = lam.to(device=seq_entropy.device, dtype=seq_entropy.dtype, non_blocking=True)
            loss = loss - (lam * seq_entropy).mean() / accumulation_factor

        if mode == "train" and self.args.aer_measurements:
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
        if self.args.aer_measurements and self._step % (self.args.steps_per_generation * self.num_iterations) == 0:
            self._aer_finish_iteration()
        return loss

    def _aer_finish_iteration(self) -> float:
        """End of a rollout batch: reduce the entropy over micro-batches and processes, hand it to the callback;
        returns it (NaN for a batch with no trained token)."""
        stats = self._aer_entropy_stats
        if stats is None:
            stats = torch.zeros(2 + 2 * len(BUCKETS), device=self.accelerator.device)
        stats = self.accelerator.reduce(stats.to(self.accelerator.device), reduction="sum").tolist()
        self._aer_entropy_stats = None
        self._aer_phases_run.add("entropy")
        entropy = stats[0] / stats[1] if stats[1] > 0 else float("nan")
        self.aer_callback.submit_entropy(entropy)
        if not math.isnan(entropy):
            self._metrics["train"]["aer/entropy"].append(entropy)
        n = len(BUCKETS)
        for b, name in enumerate(BUCKETS):
            if stats[2 + n + b] > 0:
                self._metrics["train"][f"aer/bucket/{name}/entropy"].append(stats[2 + b] / stats[2 + n + b])
        return entropy

    def _aer_restore_carried(self) -> None:
        """On resume: the values logging steps carry come back from the checkpoint's last training log, so the
        resumed run logs what the uninterrupted one does (checkpoints end a rollout batch: that log holds both
        phases)."""
        last = next((h for h in reversed(self.state.log_history) if "loss" in h), {})
        self._aer_carried, self._aer_phases_run = {}, set()
        for key, value in last.items():
            if key.startswith("aer/") and key not in LIVE_KEYS:
                self._aer_carried.setdefault(metric_phase(key), {})[key] = value

    # ------------------------------------------------------------------------------------------------ model card
    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        """TRL's model card for the method actually trained, plus AER's section (`aer_trl.card`)."""
        write_model_card(self, model_name=model_name, dataset_name=dataset_name, tags=tags, **kwargs)

    # ------------------------------------------------------------------------------------------------ logging
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.args.aer_measurements and not any(key.startswith("eval_") for key in logs):
            # a logging step without a new rollout batch (steps_per_generation > gradient_accumulation_steps) still
            # carries every aer/* metric: the value of the last rollout batch (TRL's fresh averages replace these).
            # A phase that ran replaces all its values: a bucket with no prompts in the latest batch logs none.
            fresh = {k: sum(v) / len(v) for k, v in self._metrics["train"].items() if k.startswith("aer/") and v}
            for phase in self._aer_phases_run:
                self._aer_carried[phase] = {k: v for k, v in fresh.items() if metric_phase(k) == phase}
            self._aer_phases_run.clear()
            for values in self._aer_carried.values():
                logs.update({k: v for k, v in values.items() if k not in logs})
            cb = self.aer_callback
            logs["aer/alpha"] = cb.alpha
            if cb.initial_entropy is not None:
                logs["aer/initial_entropy"] = cb.initial_entropy
            if cb.target is not None:
                logs["aer/target_entropy"] = cb.target
        super().log(logs, start_time)
