"""`AERCallback`: owns the AER controller (α, H0, H*) and updates α once per rollout batch (C2 + C3)."""

from __future__ import annotations

import warnings

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from .config import rollout_steps
from .core_algos import AERController


class AERCallback(TrainerCallback, ExportableState):
    """Updates the global coefficient α from the measured policy entropy, once per AER iteration.

    The trainer measures the token-weighted entropy of a whole rollout batch (all micro-batches, all processes) and
    hands it over with :meth:`submit_entropy` when the last micro-step on that batch is done; the callback applies the
    C3 update at the end of that step (``on_step_end`` or ``on_substep_end``). Its state is saved in every checkpoint
    through transformers' stateful callbacks and restored on resume, so the α trajectory continues exactly.
    """

    def __init__(
        self,
        tau: float = 0.4,
        eta: float = 0.005,
        alpha_init: float = 0.0,
        alpha_max: float | None = None,
        fixed_target: float | None = None,
        adaptive: bool = True,
        anchor_rollouts: int = 1,
        controller: AERController | None = None,
    ):
        """The controller's settings, or a `controller` built elsewhere (a subclass of `AERController`: the research
        bench's `SteppedController`), whose settings are then the ones saved."""
        if controller is None:
            controller = AERController(
                tau=tau,
                eta=eta,
                alpha=alpha_init,
                alpha_max=alpha_max,
                fixed_target=fixed_target,
                adaptive=adaptive,
                anchor_rollouts=anchor_rollouts,
            )
        self.controller = controller
        self._init_args = {
            "tau": controller.tau,
            "eta": controller.eta,
            "alpha_init": controller.alpha,
            "alpha_max": controller.alpha_max,
            "fixed_target": controller.fixed_target,
            "adaptive": controller.adaptive,
            "anchor_rollouts": controller.anchor_rollouts,
        }
        self.pending_entropy: float | None = None
        # the run's settings (`run_settings`), set by the trainer and saved with the state, so that a resume
        # can say which settings changed since the checkpoint
        self.settings: dict | None = None

    @classmethod
    def from_args(cls, args, controller_class: type[AERController] = AERController, **settings) -> AERCallback:
        """The callback for a config's `aer_*` settings; an extension's controller class with its own `settings`."""
        return cls(
            controller=controller_class(
                tau=args.aer_tau,
                eta=args.aer_eta,
                alpha=args.aer_alpha_init,
                alpha_max=args.aer_alpha_max,
                fixed_target=args.aer_fixed_target,
                adaptive=args.aer_adaptive,
                anchor_rollouts=args.aer_anchor_rollouts,
                **settings,
            )
        )

    # -- read by the trainer ------------------------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        """The α the trainer applies (the controller's `applied_alpha`)."""
        return self.controller.applied_alpha

    @property
    def initial_entropy(self) -> float | None:
        return self.controller.initial_entropy

    @property
    def target(self) -> float | None:
        """H* (logged as aer/target_entropy)."""
        return self.controller.target

    def submit_entropy(self, entropy: float) -> None:
        """The trainer's measurement of H_t for the rollout batch that just finished."""
        self.pending_entropy = float(entropy)

    # -- transformers events ------------------------------------------------------------------------------------
    def _apply_pending(self) -> None:
        if self.pending_entropy is not None:
            self.controller.observe(self.pending_entropy)
            self.pending_entropy = None

    def on_substep_end(self, args, state, control, **kwargs):
        self._apply_pending()

    def on_step_end(self, args, state, control, **kwargs):
        self._apply_pending()
        # A checkpoint must end an AER iteration to resume exactly: the entropy of a rollout batch is summed over its
        # optimizer steps and α moves once at its end. Saves inside a rollout batch come only from the end of
        # training (save_steps is aligned in AERGRPOConfig): that one is not written (the final model still is, by
        # save_model), so resuming picks the last checkpoint at a rollout boundary and replays the rest exactly.
        steps = rollout_steps(args)
        if control.should_save and getattr(args, "aer_enabled", True) and steps and state.global_step % steps:
            control.should_save = False
            warnings.warn(
                f"step {state.global_step} ends inside a rollout batch: no checkpoint is written here (it could not "
                "resume AER exactly); the final model is saved by save_model, and resuming starts from the last "
                "checkpoint at a rollout boundary",
                stacklevel=2,
            )

    # -- ExportableState ----------------------------------------------------------------------------------------
    def state(self) -> dict:
        attributes = {"controller_state": self.controller.state_dict()}
        if self.settings is not None:
            attributes["settings"] = self.settings
        return {"args": dict(self._init_args), "attributes": attributes}

    @property
    def controller_state(self) -> dict:
        return self.controller.state_dict()

    @controller_state.setter
    def controller_state(self, value: dict) -> None:
        self.controller.load_state_dict(value)
