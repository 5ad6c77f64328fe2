"""C3's other step rules and a gate (ours, not the paper's), a research variant the bench trains through the library's
seams: `SteppedController`, the library's `AERController` with `step="proportional"` (method `aer_prop`) or
`step="pi"` (method `aer_pi`, with the gate), built from `BenchConfig.aer_step`, `aer_pi_kp`, `aer_pi_ki` and
`aer_gate` and handed to the run's `AERCallback` by `BenchGRPOTrainer` (`SteppedControllerMixin`). The step rules
are pure functions, floats in and floats out."""

from __future__ import annotations

import math
from dataclasses import dataclass

from aer_trl.callbacks import AERCallback
from aer_trl.core_algos import AERController
from aer_trl.methods import Method, register_method

STEPS = ("sign", "proportional", "pi")


def proportional_step(
    alpha: float, entropy: float, target: float, eta: float, alpha_max: float | None = None
) -> float:
    """α_{t+1} = max(0, α_t + η·(H* − H_t)/H*), optionally clamped above at ``alpha_max`` (method ``aer_prop``,
    docs/methods.md). Below the target α rises by at most η per iteration, less as H_t nears H*; above it α falls in
    proportion to the overshoot (H_t = 3·H* takes 2η off), so an entropy that starts to run away is braked within a
    few iterations instead of η at a time."""
    if not target > 0:
        raise ValueError(f"a proportional step needs a target entropy H* > 0, got {target}")
    new = max(0.0, alpha + eta * (target - entropy) / target)
    return new if alpha_max is None else min(new, alpha_max)


def pi_step(
    integral: float, entropy: float, target: float, kp: float, ki: float, alpha_max: float | None = None
) -> tuple[float, float]:
    """A PI controller on the relative entropy error (method ``aer_pi``; EntroPIC's form, docs/methods.md):
    e_t = (H* − H_t)/H*, I_t = I_{t−1} + e_t, α_t = clip(kp·e_t + ki·I_t, 0, alpha_max).

    The integral removes the steady offset a proportional or sign step leaves; anti-windup by conditional
    integration: while the output is saturated (below 0, or above ``alpha_max``) and the error pushes it further
    out, the integral is frozen, so α leaves a bound as soon as the error turns instead of unwinding a backlog.

    Returns (α_t, I_t)."""
    if not target > 0:
        raise ValueError(f"a PI step needs a target entropy H* > 0, got {target}")
    error = (target - entropy) / target
    high = math.inf if alpha_max is None else float(alpha_max)
    candidate = integral + error
    raw = kp * error + ki * candidate
    if (raw > high and error > 0) or (raw < 0 and error < 0):
        candidate = integral
    return min(max(kp * error + ki * candidate, 0.0), high), candidate


@dataclass
class SteppedController(AERController):
    """`AERController` with another C3 step (``step``: ``sign`` the paper's, ``proportional``, ``pi`` with gains
    ``kp``, ``ki``) and an optional ``gate``: no bonus while the last measured entropy is at or above H*
    (``applied_alpha`` = 0; Skywork-OR1's and TRL's adaptive-entropy safeguard). The PI integral and the gate's
    state are checkpointed with the rest of the controller's."""

    step: str = "sign"
    kp: float = 0.1
    ki: float = 0.02
    gate: bool = False
    integral: float = 0.0
    gated: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.step not in STEPS:
            raise ValueError(f"step must be one of {STEPS}, got {self.step!r}")

    def update(self, entropy: float) -> None:
        if self.step == "pi":
            self.alpha, self.integral = pi_step(self.integral, entropy, self.target, self.kp, self.ki, self.alpha_max)
        elif self.step == "proportional":
            self.alpha = proportional_step(self.alpha, entropy, self.target, self.eta, self.alpha_max)
        else:
            super().update(entropy)

    def observe(self, entropy: float) -> float:
        iteration = self.iteration
        alpha = super().observe(entropy)
        if self.gate and self.iteration > iteration:  # a measurement was taken
            if self.target is not None:
                self.gated = float(entropy) >= self.target
            self.history[-1]["applied_alpha"] = self.applied_alpha
        return alpha

    @property
    def applied_alpha(self) -> float:
        return 0.0 if self.gated else self.alpha

    def state_dict(self) -> dict:
        return {**super().state_dict(), "integral": self.integral, "gated": self.gated}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.integral = float(state.get("integral", 0.0))
        self.gated = bool(state.get("gated", False))


def check_steps(config) -> None:
    """`aer_step` one of `STEPS`; the PI gains >= 0."""
    if config.aer_step not in STEPS:
        raise ValueError(f"aer_step must be one of {STEPS}, got {config.aer_step!r}")
    for name in ("aer_pi_kp", "aer_pi_ki"):
        value = getattr(config, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


class SteppedControllerMixin:
    """A trainer whose `AERCallback` holds the `SteppedController` its config asks for (unless a callback is given)."""

    def __init__(self, model, reward_funcs=None, args=None, *pos_args, callbacks=None, **kwargs):
        callbacks = list(callbacks or [])
        if getattr(args, "aer_measurements", False) and not any(isinstance(cb, AERCallback) for cb in callbacks):
            steps = {"step": args.aer_step, "kp": args.aer_pi_kp, "ki": args.aer_pi_ki, "gate": args.aer_gate}
            callbacks.append(AERCallback.from_args(args, SteppedController, **steps))
        super().__init__(model, reward_funcs, args, *pos_args, callbacks=callbacks, **kwargs)


_AER = {"aer_adaptive": True, "aer_difficulty_aware": True}
AER_PROP = register_method(
    Method(
        "aer_prop",
        "AER with a proportional C3 step: α_{t+1} = [α_t + η·(H* − H_t)/H*]_+, braking an overshoot in proportion "
        "to it (aer_step='proportional'); ours, not the paper's, the research bench's (docs/methods.md)",
        "AER-GRPO (ours: proportional step)",
        aer=True,
        sets={"aer_step": "proportional"},
        defaults=_AER,
        trl_entropy=False,
        trainer=SteppedControllerMixin,
    ),
    replace=True,
)
AER_PI = register_method(
    Method(
        "aer_pi",
        "AER with a PI controller on the relative entropy error, α = clip(kp·e + ki·Σe, 0, α_max) with anti-windup "
        "(aer_step='pi'), and the bonus gated off while the entropy is at or above H* (aer_gate); ours, not the "
        "paper's, the research bench's (docs/methods.md)",
        "AER-GRPO (ours: PI controller, gated)",
        aer=True,
        sets={"aer_step": "pi"},
        defaults={**_AER, "aer_gate": True},
        trl_entropy=False,
        trainer=SteppedControllerMixin,
    ),
    replace=True,
)
