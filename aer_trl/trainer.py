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
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from trl import GRPOTrainer

from .callbacks import AERCallback, trainer_callbacks
from .card import write_model_card
from .config import AERGRPOConfig
from .config_checks import resolve_correctness_index
from .core_algos import BUCKETS, capped_entropy, difficulty_coefficients, group_accuracy, sequence_entropy
from .hardware import cpu_bf16_warning
from .methods import TokenBatch, get_method
from .metrics import CarriedMetrics, entropy_sums, log_entropy, log_rollout
from .prompts import prompts_are_conversational, set_chat_template
from .resume import ResumeMixin
from .vllm_support import EngineDriftGuard, vllm_for_trainer

logger = logging.getLogger(__name__)


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
        args = AERGRPOConfig.for_trainer(args, model)  # a plain trl.GRPOConfig is converted (with a warning)
        missing = [c for c in args.trainer_requirements() if not isinstance(self, c)]
        if missing:
            raise TypeError(
                f"{type(args).__name__} (method={args.method!r}) trains with a trainer that includes "
                f"{', '.join(f'{c.__module__}.{c.__name__}' for c in missing)} (an extension's), not "
                f"{type(self).__name__}: the settings would be ignored"
            )
        callbacks = trainer_callbacks(args, callbacks)
        # the one owner of α (H0, H*): resuming keeps this instance and loads the checkpoint's state into it
        self._aer_callback = next((cb for cb in callbacks if isinstance(cb, AERCallback)), None)
        if not args.aer_measurements:
            self._tag_names = GRPOTrainer._tag_names  # TRL's tags on the model and its card
        if args.method_settings:
            logger.info("method=%r sets %s", args.method, args.method_settings)
        with vllm_for_trainer(self, model, args):  # aer_trl.vllm_support: the engine's dtype, CPU fixes
            super().__init__(model, reward_funcs, args, *pos_args, callbacks=callbacks, **kwargs)
        set_chat_template(
            self.processing_class, args.chat_template_path, prompts_are_conversational(self.train_dataset)
        )
        self._engine_guard = EngineDriftGuard.for_trainer(self.model, args)  # stops a run whose engine drifted
        self._aer_method = get_method(args.method)
        self.aer_dataset_name, self.aer_data_description = dataset_name, data_description
        self._aer_correctness_index = resolve_correctness_index(args.aer_correctness_reward, self.reward_func_names)
        self._aer_entropy_stats: torch.Tensor | None = None  # local `entropy_sums` of the rollout batch so far
        self._aer_carried = CarriedMetrics()  # what logging steps without a new rollout batch carry
        self.aer_resume_changes: dict[str, tuple] = {}  # settings that differ from the checkpoint resumed from
        self._aer_draws: tuple[int, str, int] = (-1, "train", 0)  # (optimizer step, mode, hook calls in it so far)
        slow = cpu_bf16_warning(self.accelerator.device, args.bf16, self.model)
        if slow:
            logger.warning(slow)

    # ------------------------------------------------------------------------------------------------ controller
    @property
    def aer_callback(self) -> AERCallback:
        """The AERCallback that owns α, H0 and H* (the controller's state), for every read of α."""
        if self._aer_callback is None:
            raise RuntimeError(
                f"method={self.args.method!r} trains without AER's controller (aer_measurements is off); set "
                "aer_measurements=True to measure entropy as AER does"
            )
        return self._aer_callback

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
        alpha, rho = self.aer_callback.alpha, self.args.aer_rho
        lam = difficulty_coefficients(
            g, alpha, rho, self.args.aer_eps, difficulty_aware=self.args.aer_difficulty_aware
        )
        if mode == "train":
            self._aer_carried.ran.add("rollout")
        buckets = log_rollout(self._metrics[mode], g, lam, rho)  # aer_trl.metrics: where the entropy budget goes
        local = output["advantages"].size(0)
        process_slice = slice(self.accelerator.process_index * local, (self.accelerator.process_index + 1) * local)
        # λ stays on the host (one float per completion): compute_loss can then skip λ = 0 micro-batches without
        # waiting for the device; TRL's shuffle and split index host tensors like device ones.
        output["aer_lambda"] = lam[process_slice].cpu()
        output["aer_bucket"] = buckets[process_slice].cpu()
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

        if mode == "train" and self.args.aer_measurements:  # summed over the rollout batch (aer_trl.metrics)
            stats = entropy_sums(entropies, mask, inputs.get("aer_bucket"))
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
        self._aer_carried.ran.add("entropy")
        entropy = log_entropy(self._metrics["train"], stats)
        if all(cb is not self.aer_callback for cb in self.callback_handler.callbacks):
            raise RuntimeError("AERGRPOTrainer's AERCallback was removed from its callbacks: α could not move")
        self.aer_callback.submit_entropy(entropy)
        return entropy

    # ------------------------------------------------------------------------------------------------ model card
    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        """TRL's model card for the method actually trained, plus AER's section (`aer_trl.card`)."""
        write_model_card(self, model_name=model_name, dataset_name=dataset_name, tags=tags, **kwargs)

    # ------------------------------------------------------------------------------------------------ logging
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.args.aer_measurements and not any(key.startswith("eval_") for key in logs):
            self._aer_carried.fill(logs, self._metrics["train"])  # the last rollout batch's aer/* values
            cb = self.aer_callback
            logs["aer/alpha"] = cb.alpha
            if cb.initial_entropy is not None:
                logs["aer/initial_entropy"] = cb.initial_entropy
            if cb.target is not None:
                logs["aer/target_entropy"] = cb.target
        super().log(logs, start_time)
