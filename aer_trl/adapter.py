"""The adapter of TRL's synchronous rollout trainers (`GRPOTrainer`, `RLOOTrainer`): `AERTrainerMixin` wires their
shared private seams to the AER core (`aer_trl.core.AERCore`); it imports no trainer class of TRL's. An AER trainer is
`class AERXTrainer(AERTrainerMixin, XTrainer)` with its config class (docs/design.md, "The AER core and its
adapters"):

- rewards: `_calculate_rewards` returns the rewards gathered over all processes; the adapter keeps them and hands
  them to the core, which turns the correctness reward into g(q) and λ; λ for this process's completions joins the
  batch dict as `aer_lambda`, which TRL shuffles and splits along with `advantages`.
- loss: `compute_loss` calls TRL's loss and keeps the per-token entropies TRL's fused LM head computes inside it
  (`_get_per_token_logps_and_entropies`, with gradient), then subtracts the core's `mean_i(λ_i · H_i)`, scaled as
  TRL scales its loss (`loss_is_scaled_for_ga`: GRPO divides by the accumulation steps itself, RLOO leaves it to
  transformers).
- controller: after the last micro-step on a rollout batch (`training_step`), the core reduces the entropy over
  processes and hands it to `AERCallback`, which moves α once per rollout batch.
"""

from __future__ import annotations

import inspect
import logging
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .callbacks import AERCallback, trainer_callbacks
from .card import CARD_FIELDS, write_model_card
from .chat_template import prompts_are_conversational, set_chat_template
from .core import AERCore
from .hardware import cpu_bf16_warning
from .methods import get_method
from .resume import ResumeMixin
from .upstream.vllm_engine import EngineDriftGuard

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


def _trl_base(cls: type) -> type | None:
    """The TRL trainer in `cls`'s bases (the first class of TRL's that names its tags), None for a mixin alone."""
    return next((c for c in cls.__mro__ if c.__module__.startswith("trl.") and "_tag_names" in vars(c)), None)


class AERTrainerBase(ResumeMixin):
    """What every AER trainer has whatever its seams (`AERTrainerMixin` for GRPO and RLOO, `AERAsyncGRPOTrainer`):
    one constructor, the controller's callback, the model card and the aer/* values in each training log; the trainer
    holds an `aer_core`.

    The constructor is the one path of all three trainers: the config (a plain TRL config converted), the method's
    trainer requirements, the callbacks and the AER core, TRL's constructor (`_build_trl`, with what the trainer needs
    around it), the chat template, the vLLM drift guard, the method, the reward names (TRL's), the CPU bf16 warning,
    then the trainer's own wiring (`_aer_wire`)."""

    config_class: type  # AERGRPOConfig, AERRLOOConfig, AERAsyncGRPOConfig

    def __init_subclass__(cls, **kwargs):
        """Each AER trainer's constructor shows the TRL trainer's signature (`inspect`, `help()`): the same
        arguments, passed through to TRL's constructor (a class without a constructor of its own gets one that calls
        the shared one)."""
        super().__init_subclass__(**kwargs)
        trl = _trl_base(cls)
        if trl is None:  # a mixin without a TRL trainer yet (AERTrainerMixin)
            return
        if "__init__" not in vars(cls):

            def __init__(self, *args, **kwargs):
                super(cls, self).__init__(*args, **kwargs)

            __init__.__qualname__ = f"{cls.__qualname__}.__init__"
            __init__.__doc__ = AERTrainerBase.__init__.__doc__
            cls.__init__ = __init__
        elif not cls.__module__.startswith("aer_trl."):
            return  # an extension's own constructor keeps its own signature
        cls.__init__.__signature__ = inspect.signature(trl.__init__)

    def __init__(
        self,
        model,
        reward_funcs=None,
        args=None,
        *pos_args,
        callbacks=None,
        **kwargs,
    ):
        """TRL's trainer's arguments. What the model card says (the data, the base model's Hub id) is not among
        them: `create_model_card` takes it, as TRL's does."""
        card_fields = sorted(set(kwargs) & set(CARD_FIELDS))
        if card_fields:
            raise TypeError(
                f"{type(self).__name__} got {card_fields}: fields of the model card, not of the trainer; pass them to "
                f"trainer.create_model_card({', '.join(f'{k}=...' for k in card_fields)}) (remembered for later cards "
                "and pushes)"
            )
        self.aer_card: dict = {}  # what `create_model_card` was told (`card.CARD_FIELDS`), for every later card
        args = self.config_class.for_trainer(args, model)  # a plain TRL config is converted (with a warning)
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
        self.aer_core = AERCore(args, self._aer_callback)
        if not args.aer_measurements:
            self._tag_names = self.trl_trainer()._tag_names  # TRL's tags on the model and its card
        if args.method_settings:
            logger.info("method=%r sets %s", args.method, args.method_settings)
        self._build_trl(model, reward_funcs, args, *pos_args, callbacks=callbacks, **kwargs)
        set_chat_template(
            self.processing_class, args.chat_template_path, prompts_are_conversational(self.train_dataset)
        )
        self._engine_guard = EngineDriftGuard.for_trainer(self.model, args)  # stops a run whose engine drifted
        self._aer_method = get_method(args.method)
        self.aer_core.bind_rewards(self.aer_reward_names())
        self.aer_resume_changes: dict[str, tuple] = {}  # settings that differ from the checkpoint resumed from
        slow = cpu_bf16_warning(self.accelerator.device, args.bf16, self.model)
        if slow:
            logger.warning(slow)
        self._aer_wire(args)

    def _build_trl(self, model, reward_funcs, args, *pos_args, **kwargs) -> None:
        """TRL's constructor of the trainer this adapter extends."""
        super().__init__(model, reward_funcs, args, *pos_args, **kwargs)

    def aer_reward_names(self) -> list[str]:
        """The reward functions' names as TRL names them (`reward_func_names`: a partial by the function it wraps, a
        callable instance by its class, a reward model by its model id, an environment's `get_reward` by the
        environment's class), which `aer_correctness_reward` is one of."""
        return list(self.reward_func_names)

    def _aer_wire(self, args) -> None:
        """What a trainer wires after the shared steps (the asynchronous trainer's queue, collator, attention)."""

    @classmethod
    def trl_trainer(cls) -> type:
        """The TRL trainer this adapter extends (`GRPOTrainer`, `RLOOTrainer`, `AsyncGRPOTrainer`)."""
        return _trl_base(cls)

    @property
    def aer_callback(self) -> AERCallback:
        """The AERCallback that owns α, H0 and H* (the controller's state), for every read of α."""
        return self.aer_core.controller

    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        """TRL's model card for the method actually trained, plus AER's section (`aer_trl.card`). Beside TRL's
        arguments: `data_description` (what the model was trained on, with the prompt format) and `base_model` (the
        Hub id the card names where the model was loaded from elsewhere, e.g. a converted GGUF file's original).
        `dataset_name`, `data_description` and `base_model` are remembered for later cards (a push writes one)."""
        given = {"dataset_name": dataset_name, **{k: kwargs.pop(k) for k in CARD_FIELDS if k in kwargs}}
        self.aer_card.update({k: v for k, v in given.items() if v is not None})
        write_model_card(self, model_name=model_name, tags=tags, **kwargs)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.aer_core.on and not any(key.startswith("eval_") for key in logs):
            self.aer_core.fill_logs(logs, self._metrics["train"])
        super().log(logs, start_time)


class AERTrainerMixin(AERTrainerBase):
    """AER on a TRL synchronous rollout trainer (GRPO, RLOO). Same constructor as the TRL trainer it is mixed into;
    `args` is the adapter's config class (`config_class`; a plain TRL config of that trainer is converted, the AER
    fields at their defaults)."""

    # alive only while TRL's scoring / loss runs inside AER's override (`_capturing`), None otherwise
    _rollout_capture: RolloutCapture | None = None
    _loss_capture: LossCapture | None = None

    def _build_trl(self, model, reward_funcs, args, *pos_args, **kwargs) -> None:
        """TRL's constructor, building `upstream.trl_vllm.AERVLLMGeneration` where it builds its vLLM engine (the
        engine in the trainer's dtype; on the CPU, syncs that reach vLLM's kernels). TRL's module is left as it is."""
        from .upstream.trl_vllm import constructor_with_engine

        trl_init = constructor_with_engine(self.trl_trainer().__init__, args)
        trl_init(self, model, reward_funcs, args, *pos_args, **kwargs)

    # ------------------------------------------------------------------------------------------------ controller
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
        if not self.aer_core.on:
            return output
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        lam, buckets = self.aer_core.coefficients(
            capture.rewards, num_generations, self._metrics[mode], mode == "train"
        )
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
        """The log-prob forward: TRL's. A subclass may route it elsewhere (e.g. a forward that shares each prompt's
        prefill across its group)."""
        return super()._get_per_token_logps_and_entropies(*args, **kwargs)

    def _apply_token_method(self, logps, entropies, inputs: dict):
        """A method's per-token hook: GRPO's adapter applies it (`AERGRPOTrainer`); the other adapters' configs refuse
        such methods by name, so this is never reached there."""
        raise NotImplementedError(f"{type(self).__name__} trains no per-token method ({self.args.method!r})")

    def bonus_entropies(self, entropies: torch.Tensor) -> torch.Tensor:
        """The per-token entropies (B, T), with gradient, whose completion means H_i AER's bonus raises: those of
        the full distributions TRL's loss computed (the paper). A subclass may raise others (e.g. the entropy over a
        truncated support); the controller's H_t is always measured on `entropies`."""
        return entropies

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        hook = self._aer_method.token_hook is not None
        if not (hook or self.aer_core.on):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)  # TRL's loss, untouched
        if hook:
            inputs = dict(inputs)  # a shallow copy: the buffered rollout batch is left as it was
        with self._capturing("_loss_capture", LossCapture(inputs=inputs if hook else None)) as capture:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        entropies = capture.entropies
        if entropies is None:
            raise RuntimeError(
                f"TRL's loss did not compute token entropies; {type(self).__name__} cannot add its bonus"
            )

        mask = self._trained_mask(inputs).to(entropies.dtype)
        train = self.model.training
        bonus = self.aer_core.bonus(self.bonus_entropies(entropies), mask, inputs.get("aer_lambda"))
        if bonus is not None:
            # on TRL's loss's scale: GRPO's loss is already divided by the accumulation steps, RLOO's is not
            scaled = train and self.loss_is_scaled_for_ga
            loss = loss - bonus / (self.current_gradient_accumulation_steps if scaled else 1.0)
        if train and self.aer_core.on:  # summed over the rollout batch (aer_trl.core)
            self.aer_core.measure(entropies, mask, inputs.get("aer_bucket"))
        return loss

    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.aer_core.on and self._step % (self.args.steps_per_generation * self.num_iterations) == 0:
            self._aer_finish_iteration()
        return loss

    def _aer_finish_iteration(self) -> float:
        """End of a rollout batch: reduce the entropy over micro-batches and processes, hand it to the callback;
        returns it (NaN for a batch with no trained token)."""
        return self.aer_core.finish_iteration(
            lambda t: self.accelerator.reduce(t, reduction="sum"),
            self.accelerator.device,
            self._metrics["train"],
            self.callback_handler.callbacks,
        )
