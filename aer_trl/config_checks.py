"""`AERGRPOConfig`'s checks of its AER fields: a wrong value is refused with its name and what was expected."""

from __future__ import annotations

import math

from .controller import STEPS


def validate_aer(self) -> None:
    """Raises ValueError naming the field when an AER setting of `self` (an AERGRPOConfig) is out of range."""

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
    if self.aer_step not in STEPS:
        raise ValueError(f"aer_step must be one of {STEPS}, got {self.aer_step!r}")
    for name in ("aer_pi_kp", "aer_pi_ki"):
        if finite(name, getattr(self, name)) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
    if self.aer_bonus_cap is not None and finite("aer_bonus_cap", self.aer_bonus_cap) <= 0:
        raise ValueError(f"aer_bonus_cap must be > 0 or None, got {self.aer_bonus_cap}")
    if self.aer_bonus_top_k is not None and (
        isinstance(self.aer_bonus_top_k, bool)
        or int(self.aer_bonus_top_k) != self.aer_bonus_top_k
        or self.aer_bonus_top_k < 2
    ):
        raise ValueError(
            f"aer_bonus_top_k must be an integer >= 2 (a support of one token has no entropy) or None, got "
            f"{self.aer_bonus_top_k}"
        )
    if not 0 < finite("aer_bonus_quantile", self.aer_bonus_quantile) <= 1:
        raise ValueError(f"aer_bonus_quantile must be in (0, 1], got {self.aer_bonus_quantile}")
    if isinstance(self.aer_anchor_rollouts, bool) or int(self.aer_anchor_rollouts) != self.aer_anchor_rollouts:
        raise ValueError(f"aer_anchor_rollouts must be an integer >= 1, got {self.aer_anchor_rollouts}")
    if self.aer_anchor_rollouts < 1:
        raise ValueError(f"aer_anchor_rollouts must be an integer >= 1, got {self.aer_anchor_rollouts}")
    if isinstance(self.aer_anchor_probe, bool) or int(self.aer_anchor_probe) != self.aer_anchor_probe:
        raise ValueError(f"aer_anchor_probe must be an integer >= 0 (prompts), got {self.aer_anchor_probe}")
    if self.aer_anchor_probe < 0:
        raise ValueError(f"aer_anchor_probe must be an integer >= 0 (prompts), got {self.aer_anchor_probe}")
    if self.aer_anchor_probe and self.aer_anchor_rollouts != 1:
        raise ValueError(
            f"aer_anchor_probe ({self.aer_anchor_probe}) and aer_anchor_rollouts ({self.aer_anchor_rollouts}) are "
            "two anchors for H0: set one"
        )
    if self.aer_anchor_probe and not self.aer_measurements:
        raise ValueError("aer_anchor_probe measures AER's H0: it needs aer_measurements (an AER method)")
    if finite("aer_eps", self.aer_eps) <= 0:
        raise ValueError(f"aer_eps must be > 0, got {self.aer_eps}")
    finite("aer_correctness_threshold", self.aer_correctness_threshold)
    if self.aer_trl_target_ratio is not None:
        if finite("aer_trl_target_ratio", self.aer_trl_target_ratio) <= 0:
            raise ValueError(f"aer_trl_target_ratio must be > 0 or None, got {self.aer_trl_target_ratio}")
        if not (self.use_adaptive_entropy and self.aer_measurements):
            raise ValueError(
                "aer_trl_target_ratio anchors TRL's adaptive entropy target at H0: it needs use_adaptive_entropy "
                f"(got {self.use_adaptive_entropy}; method skywork sets it) and aer_measurements (got "
                f"{self.aer_measurements}) to measure H0"
            )
    if self.aer_fixed_target is not None and finite("aer_fixed_target", self.aer_fixed_target) <= 0:
        raise ValueError(f"aer_fixed_target must be > 0 or None, got {self.aer_fixed_target}")
    if isinstance(self.aer_correctness_reward, str) and self.aer_correctness_reward.lstrip("-").isdigit():
        self.aer_correctness_reward = int(self.aer_correctness_reward)  # the CLI passes indices as strings
    if self.num_generations is not None and self.num_generations < 2:
        raise ValueError(
            f"num_generations must be >= 2 for AER (group accuracy needs a group), got {self.num_generations}"
        )
