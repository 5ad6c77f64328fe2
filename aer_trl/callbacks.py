"""The callbacks every AER trainer (`AERGRPOTrainer`, `AERRLOOTrainer`, `AERAsyncGRPOTrainer`) trains with
(`trainer_callbacks` completes a user's list):

- `AERCallback`: owns the AER controller (α, H0, H*) and updates α once per AER iteration (C2 + C3): a rollout batch
  of the synchronous trainers, an optimizer step of the asynchronous one;
- `MetricsFileCallback`: `<output_dir>/metrics.jsonl`, whatever `report_to` says (`aer_trl.metrics.read_metrics`);
- `ScheduleResumeCallback`: a checkpoint without optimizer state resumes on its learning-rate schedule.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState, PrinterCallback, ProgressCallback

from .atomic import atomic_write
from .core_algos import AERController, rollout_steps

logger = logging.getLogger(__name__)


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
        """The controller's settings, or a `controller` built elsewhere (a subclass of `AERController` with another
        step on α), whose settings are then the ones saved."""
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
        self.save_due = False  # a save asked for inside a rollout batch, written at its end (on_step_end)
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
        # optimizer steps and α moves once at its end. So a save asked for inside a rollout batch (save_steps that is
        # not a multiple of the batch's optimizer steps) moves to the end of that batch; one asked for by the end of
        # training inside a batch is not written (the final model still is, by save_model), and resuming picks the
        # last checkpoint at a rollout boundary and replays the rest exactly. (docs/design.md §2)
        steps = rollout_steps(args)
        if not (getattr(args, "aer_measurements", True) and steps and steps > 1):
            return
        inside = state.global_step % steps
        if control.should_save and inside:
            control.should_save = False
            if state.max_steps > 0 and state.global_step >= state.max_steps:
                warnings.warn(
                    f"step {state.global_step} ends inside a rollout batch: no checkpoint is written here (it could "
                    "not resume AER exactly); the final model is saved by save_model, and resuming starts from the "
                    "last checkpoint at a rollout boundary",
                    stacklevel=2,
                )
            else:
                self.save_due = True
        elif self.save_due and not inside:
            control.should_save, self.save_due = True, False

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


class ScheduleResumeCallback(TrainerCallback):
    """A checkpoint without optimizer and scheduler state (saved with `save_only_model`, or copied without optimizer.pt
    and scheduler.pt): transformers then starts the optimizer and the learning-rate schedule over from step 0,
    silently (docs/design.md §2). At the start of such a resumed run the schedule is stepped on to the checkpoint's
    step, and a warning names what cannot come back (the optimizer's moments, the random state). A restored schedule
    (or DeepSpeed's, which its own checkpoint holds) has moved past step 0 and is left alone."""

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        if state.global_step == 0 or getattr(lr_scheduler, "last_epoch", None) != 0:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch: "lr_scheduler.step() before optimizer.step()", on purpose here
            for _ in range(state.global_step):
                lr_scheduler.step()
        if state.is_world_process_zero:
            logger.warning(
                "resuming at step %d from a checkpoint that holds no optimizer or scheduler state (saved with "
                "save_only_model?): the learning rate continues the schedule (%.3g), but the optimizer's moments and "
                "the random state start afresh, so the run differs from the one never stopped. Save checkpoints with "
                "save_only_model=False to resume exactly.",
                state.global_step,
                lr_scheduler.get_last_lr()[0],
            )


def _up_to_checkpoint(line: str, state) -> bool:
    """Whether a metrics.jsonl line belongs to the steps up to the checkpoint (a torn last line does not, nor the
    end-of-training summary of an earlier `train()` call: the resumed run writes the one summary at its end)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return False
    return record.get("step", 0) <= state.global_step and "train_runtime" not in record


class MetricsFileCallback(TrainerCallback):
    """Appends every logged dict (with `step`) to `<output_dir>/metrics.jsonl` on the main process."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.path is None:
            self.path = Path(args.output_dir) / "metrics.jsonl"
        if state.is_world_process_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not state.global_step:  # a fresh run starts a fresh log
                self.path.write_text("")
            elif self.path.is_file():
                # a resumed one appends, after dropping what the killed run logged past the checkpoint it resumes
                # from (those steps are trained and logged again: kept, they would be counted twice)
                lines = self.path.read_text().splitlines(keepends=True)
                atomic_write(self.path, "".join(line for line in lines if _up_to_checkpoint(line, state)))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if self.path is None:  # logging before train(), e.g. trainer.evaluate() first: start the file here
            self.path = Path(args.output_dir) / "metrics.jsonl"
            self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {"step": state.global_step}
        for key, value in logs.items():
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            record[key] = value
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def trainer_callbacks(args, callbacks=None) -> list:
    """A user's callbacks completed with what an AER trainer of `args` needs, each added only where the user's
    list has none of its kind: `ScheduleResumeCallback` always; with AER's measurements on (`aer_measurements`) an
    `AERCallback` for the config (`AERCallback.from_args`) and a `MetricsFileCallback`. Every `AERCallback` gets the
    run's settings (`run_settings`), saved with its state, so that a resume names the settings that changed."""
    callbacks = list(callbacks or [])
    if not any(isinstance(cb, ScheduleResumeCallback) for cb in callbacks):
        callbacks.append(ScheduleResumeCallback())  # a checkpoint without a schedule resumes on it
    if not args.aer_measurements:  # off (a non-AER method, not asked for): nothing of AER's, as trl.GRPOTrainer
        return callbacks
    if not any(isinstance(cb, AERCallback) for cb in callbacks):
        callbacks.append(AERCallback.from_args(args))
    for cb in callbacks:
        if isinstance(cb, AERCallback):
            cb.settings = args.run_settings()
    if not any(isinstance(cb, MetricsFileCallback) for cb in callbacks):
        callbacks.append(MetricsFileCallback())  # <output_dir>/metrics.jsonl, whatever report_to says
    return callbacks


# what one log step's line shows (everything else is in metrics.jsonl): key in the logs -> its short name
LINE_KEYS = (("loss", "loss"), ("reward", "reward"), ("aer/entropy", "entropy"), ("aer/alpha", "alpha"),
             ("completions/mean_length", "length"), ("learning_rate", "lr"))  # fmt: skip


def log_line(state, logs: dict) -> str:
    """One short line for a training log (`step 3/10 | loss 0.0123 | reward 0.5 | ...`), the run's summary at the end
    (`done: 10 steps in 123 s, loss 0.01`), or an evaluation's pass@k values."""
    if "train_runtime" in logs:
        loss = logs.get("train_loss")
        return f"done: {state.global_step} steps in {logs['train_runtime']:.0f} s" + (
            f", mean loss {loss:.4g}" if isinstance(loss, float) else ""
        )
    shown = [(short, logs[key]) for key, short in LINE_KEYS if isinstance(logs.get(key), (int, float))]
    if not shown:
        shown = [(k, v) for k, v in logs.items() if isinstance(v, (int, float)) and "pass@" in k][:6]
    head = f"step {state.global_step}/{state.max_steps}" if state.max_steps else f"step {state.global_step}"
    return " | ".join([head, *(f"{name} {value:.4g}" for name, value in shown)])


class CompactProgressCallback(ProgressCallback):
    """transformers' progress bar, with one short line per log step (`log_line`) instead of the whole metrics dict
    (1,250 characters a step with AER's telemetry); every value stays in metrics.jsonl and the trackers."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            self.training_bar.write(log_line(state, logs))


class CompactPrinterCallback(PrinterCallback):
    """transformers' printer (`disable_tqdm`), with one short line per log step (`log_line`)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_local_process_zero and logs:
            print(log_line(state, logs), flush=True)


def _has_own_bar(callbacks) -> bool:
    """Whether a bar of the user's own (a `ProgressCallback` subclass) is among `callbacks`."""
    return any(isinstance(cb, ProgressCallback) and type(cb) is not ProgressCallback for cb in callbacks)


def use_compact_log_lines(trainer) -> None:
    """transformers' default bar (or printer) among a trainer's callbacks becomes its compact one, where no bar of
    the user's own (a `ProgressCallback` subclass) is there."""
    callbacks = trainer.callback_handler.callbacks
    if _has_own_bar(callbacks):
        return
    for default, compact in ((ProgressCallback, CompactProgressCallback), (PrinterCallback, CompactPrinterCallback)):
        for cb in [cb for cb in callbacks if type(cb) is default]:
            trainer.remove_callback(cb)
            trainer.add_callback(compact(**({"max_str_len": cb.max_str_len} if default is ProgressCallback else {})))


def replace_progress_bar(trainer) -> None:
    """A `transformers.ProgressCallback` subclass among a trainer's callbacks (a bar of one's own: the demo's names its
    phase and shows a few numbers instead of printing every log dict) replaces transformers' default bar."""
    callbacks = trainer.callback_handler.callbacks
    if _has_own_bar(callbacks):
        for cb in [cb for cb in callbacks if type(cb) is ProgressCallback]:
            trainer.remove_callback(cb)
