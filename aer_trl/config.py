"""`AERConfig`: TRL's `GRPOConfig` plus the `aer_*` fields of SPEC §2."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl import GRPOConfig


@dataclass
class AERConfig(GRPOConfig):
    r"""
    Configuration for [`AERGRPOTrainer`]: every field of `trl.GRPOConfig` plus Adaptive Entropy Regularization.

    The loss is `L = L_GRPO − mean_i(λ_i · H_i)` with `H_i` the sequence-level entropy of completion `i` and
    `λ_i = α · max(0, ρ − g(q_i)) / (ρ + ε)` (C1). α is updated once per rollout batch by
    `α ← max(0, α + η · sgn(H* − H_t))` (C3) towards the target `H* = τ · H0` (C2).
    """

    aer_rho: float = field(
        default=0.2,
        metadata={
            "help": "Pivot accuracy ρ in [0, 1] (C1). Prompts whose group accuracy is below ρ are 'hard' and get an "
            "entropy bonus proportional to ρ − g; with ρ = 0 only prompts with no correct completion get the bonus."
        },
    )
    aer_tau: float = field(
        default=0.4,
        metadata={
            "help": "Reduction ratio τ > 0 (C2): the target entropy is H* = τ · H0, H0 the first measured entropy."
        },
    )
    aer_eta: float = field(
        default=0.005,
        metadata={"help": "Step size η ≥ 0 of the global coefficient update α ← max(0, α + η·sgn(H* − H)) (C3)."},
    )
    aer_alpha_init: float = field(
        default=0.0,
        metadata={
            "help": "Initial global coefficient α_0 ≥ 0. With the default 0 the bonus switches on only after "
            "the entropy falls below H*."
        },
    )
    aer_alpha_max: float | None = field(
        default=None,
        metadata={"help": "Optional upper clamp on α (finite, ≥ aer_alpha_init). None: no upper clamp (the paper)."},
    )
    aer_eps: float = field(
        default=1e-8,
        metadata={"help": "Small constant ε > 0 in λ = α·max(0, ρ − g)/(ρ + ε)."},
    )
    aer_correctness_reward: str | None = field(
        default=None,
        metadata={
            "help": "Name (function __name__ / model name) or index of the reward function that defines correctness "
            "for the group accuracy g(q). None: the first reward function."
        },
    )
    aer_correctness_threshold: float = field(
        default=0.5,
        metadata={"help": "A completion counts as correct when its correctness reward is ≥ this finite threshold."},
    )
    aer_difficulty_aware: bool = field(
        default=True,
        metadata={"help": "C1 on/off. False: λ = α for every scorable sample (the paper's 'C2&C3 only' ablation)."},
    )
    aer_adaptive: bool = field(
        default=True,
        metadata={"help": "C2+C3 on/off. False: α stays at aer_alpha_init ('C1 only' and 'fixed coefficient' rows)."},
    )
    aer_target_entropy: float | None = field(
        default=None,
        metadata={"help": "Absolute target entropy H* > 0 in nats; overrides τ · H0 when set."},
    )

    def __post_init__(self):
        self._validate_aer()
        super().__post_init__()

    def _validate_aer(self) -> None:
        def finite(name: str, value) -> float:
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be a finite number, got {value!r}") from None
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
            return value

        rho = finite("aer_rho", self.aer_rho)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"aer_rho must be in [0, 1], got {self.aer_rho}")
        if finite("aer_tau", self.aer_tau) <= 0:
            raise ValueError(f"aer_tau must be > 0, got {self.aer_tau}")
        if finite("aer_eta", self.aer_eta) < 0:
            raise ValueError(f"aer_eta must be >= 0, got {self.aer_eta}")
        if finite("aer_alpha_init", self.aer_alpha_init) < 0:
            raise ValueError(f"aer_alpha_init must be >= 0, got {self.aer_alpha_init}")
        if self.aer_alpha_max is not None and finite("aer_alpha_max", self.aer_alpha_max) < self.aer_alpha_init:
            raise ValueError(
                f"aer_alpha_max must be >= aer_alpha_init ({self.aer_alpha_init}) or None, got {self.aer_alpha_max}"
            )
        if finite("aer_eps", self.aer_eps) <= 0:
            raise ValueError(f"aer_eps must be > 0, got {self.aer_eps}")
        finite("aer_correctness_threshold", self.aer_correctness_threshold)
        if self.aer_target_entropy is not None and finite("aer_target_entropy", self.aer_target_entropy) <= 0:
            raise ValueError(f"aer_target_entropy must be > 0 or None, got {self.aer_target_entropy}")
        if isinstance(self.aer_correctness_reward, str) and self.aer_correctness_reward.lstrip("-").isdigit():
            self.aer_correctness_reward = int(self.aer_correctness_reward)  # the CLI passes indices as strings
        if self.num_generations is not None and self.num_generations < 2:
            raise ValueError(
                f"num_generations must be >= 2 for AER (group accuracy needs a group), got {self.num_generations}"
            )
        if self.entropy_coef != 0.0 or self.use_adaptive_entropy:
            raise ValueError(
                "AER has its own entropy bonus: set entropy_coef=0.0 and use_adaptive_entropy=False "
                f"(got entropy_coef={self.entropy_coef}, use_adaptive_entropy={self.use_adaptive_entropy})"
            )
