"""Resuming AER, a mixin over the TRL trainers AER extends (GRPO, RLOO, asynchronous GRPO): the controller's state
comes back from the checkpoint whatever transformers' `restore_callback_states_from_checkpoint` says, this run's
settings stay in force, and every setting that differs from the checkpoint's is named (docs/design.md §2, "Resume")."""

from __future__ import annotations

import logging
from collections import Counter

from transformers.trainer_callback import ExportableState

from .callbacks import AERCallback
from .settings import describe_changes, settings_changes

logger = logging.getLogger(__name__)


# settings held in the optimizer's param groups: a resume restores them from the checkpoint (a new value is not used)
OPTIMIZER_STATE_FIELDS = ("learning_rate", "adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay")


class ResumeMixin:
    def _load_callback_state(self) -> None:
        """On resume: AER's controller state (α, H0, iteration) comes from the checkpoint, whatever
        `restore_callback_states_from_checkpoint` says (it is part of the optimisation state); its settings (τ, η,
        α_max, ...) stay the ones this run was given, also where transformers would rebuild the callback from the
        checkpoint's. Every setting that differs from the checkpoint's is named in a warning, with whether it applies
        (`OPTIMIZER_STATE_FIELDS` do not: transformers restores the optimizer's param groups as saved)."""
        live = next((cb for cb in self.callback_handler.callbacks if isinstance(cb, AERCallback)), None)
        # stateful callbacks that restore themselves (`restore(saved)`: PassAtKCallback), with their saved states
        restorable = [
            (cb, self.state.stateful_callbacks.get(type(cb).__name__))
            for cb in self.callback_handler.callbacks
            if isinstance(cb, ExportableState) and callable(getattr(cb, "restore", None))
        ]
        super()._load_callback_state()
        self.aer_core.carried.restore(self.state.log_history)
        self._restore_callbacks(restorable)
        data = self.state.stateful_callbacks.get(AERCallback.__name__)
        data = data[0] if isinstance(data, list) else data
        # A stateful callback the checkpoint did not have (resuming AER from a plain GRPO checkpoint, a PassAtKCallback
        # added on resume) gets its entry back: transformers' _save_checkpoint indexes the loaded state by name and
        # would fail with KeyError at the first save.
        for cb in self.callback_handler.callbacks:
            if isinstance(cb, ExportableState):
                self.state.stateful_callbacks.setdefault(type(cb).__name__, cb.state())
        if live is None:  # this run trains without AER's controller (a TRL method, measurements off)
            attributes = (data or {}).get("attributes", {})
            saved = attributes.get("settings")
            self.aer_resume_changes = settings_changes(saved, self.args.run_settings()) if saved else {}
            alpha = attributes.get("controller_state", {}).get("alpha")
            self._warn_resume_changes(f"this run has no AER controller: the checkpoint's α={alpha} is not used")
            return
        rebuilt = next(cb for cb in self.callback_handler.callbacks if isinstance(cb, AERCallback))
        if rebuilt is not live:  # transformers rebuilt it from the checkpoint's arguments: keep this run's settings
            self.callback_handler.remove_callback(rebuilt)
            self.callback_handler.add_callback(live)
        if not data:
            logger.warning(
                "resuming from a checkpoint without AER's controller state (trained with aer_measurements off?): α "
                "starts at aer_alpha_init=%s and H0 is measured on the first rollout batch after step %d",
                self.args.aer_alpha_init,
                self.state.global_step,
            )
            return
        live.controller_state = data["attributes"]["controller_state"]
        saved = data["attributes"].get("settings")
        current = live.settings if live.settings is not None else self.args.run_settings()  # with the data's, if given
        self.aer_resume_changes = settings_changes(saved, current) if saved else {}
        self._warn_resume_changes(
            f"α={live.alpha}, H0={live.initial_entropy} and the iteration count carry over from the checkpoint"
        )

    def _run_epoch(self, *args, **kwargs):
        """transformers' epoch loop trains a step before it checks `max_steps`: a run resumed from a checkpoint at (or
        past) `max_steps`, a finished run started again, would train one step more than the run that was never
        stopped (measured: global_step 3 of max_steps 2, with trl.GRPOTrainer too). Such a run trains nothing here:
        the checkpoint's weights, optimizer and controller state are already loaded, as the uninterrupted run ends."""
        if 0 < self.args.max_steps <= self.state.global_step:
            if self.accelerator.is_main_process:
                logger.warning(
                    "resumed at step %d, at or past max_steps=%d: nothing left to train",
                    self.state.global_step,
                    self.args.max_steps,
                )
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    def _warn_resume_changes(self, controller: str) -> None:
        """Names every setting in `aer_resume_changes` in one warning, with whether it applies; `controller` says
        what becomes of AER's controller state."""
        changes = self.aer_resume_changes
        if not changes or not self.accelerator.is_main_process:
            return
        kept = {k: v for k, v in changes.items() if k in OPTIMIZER_STATE_FIELDS}
        applied = {k: v for k, v in changes.items() if k not in kept}

        logger.warning(
            "resuming at step %d with settings that differ from the checkpoint's.%s%s%s",
            self.state.global_step,
            f" Applied from here on: {describe_changes(applied)} ({controller})." if applied else "",
            f" NOT applied: {describe_changes(kept)} (the optimizer state restored from the checkpoint keeps its "
            "learning rate, betas, eps and weight decay, as transformers restores it; to change them, start a new "
            "run from the checkpoint's weights)."
            if kept
            else "",
            " DeepSpeed loads a ZeRO checkpoint only on the number of processes that saved it (short of converting "
            f"it to a universal checkpoint): resume with {changes['world_size'][0]} processes, or start a new run "
            "from the checkpoint's weights (zero_to_fp32.py in the checkpoint folder writes them whole; the "
            "optimizer's moments then start afresh)."
            if "world_size" in changes and getattr(self, "is_deepspeed_enabled", False)
            else "",
        )

    def _restore_callbacks(self, restorable: list) -> None:
        """The run's own self-restoring callbacks stay (transformers would rebuild them from the checkpoint's
        arguments: for `PassAtKCallback`, without the run's prompt format or its vLLM sampler), and each restores
        itself from its saved state. Several of one class restore in order from the newest save's states:
        transformers appends each save's states of such callbacks to one list, oldest first, starting with their
        states when the run began (restored from the first entries, a resumed run's best pass@1 was lost)."""
        for cb in list(self.callback_handler.callbacks):
            if any(type(cb) is type(own) for own, _ in restorable) and all(cb is not own for own, _ in restorable):
                self.callback_handler.remove_callback(cb)  # rebuilt by transformers from the checkpoint
        count = Counter(type(cb) for cb, _ in restorable)
        seen: Counter = Counter()
        for cb, saved in restorable:
            if all(cb is not other for other in self.callback_handler.callbacks):
                self.callback_handler.add_callback(cb)
            entries = saved if isinstance(saved, list) else [saved] if saved else []
            newest = entries[-count[type(cb)] :]  # the last save's states, one per callback of the class
            index = seen[type(cb)]
            seen[type(cb)] += 1
            if index < len(newest):
                cb.restore(newest[index])
