"""How an AER config (`AERGRPOConfig`, `AERRLOOConfig`, `AERAsyncGRPOConfig`) is resolved and checked while it is
built, the one place that does: `resolve_method` applies its method's registry entry (`aer_trl.methods`) before TRL's
`__post_init__`, `check_aer_fields` checks the AER fields of the finished config after it, against its trainer family
(`aer_trl.families`: a setting the family cannot honour is refused, naming the trainers that do) and, for the
asynchronous trainer, its rollout schedule and its local worker. A wrong value is refused with its name and what was
expected. (A group of fewer than 2 completions, which g(q) cannot use either, is refused by TRL's own check.)"""

from __future__ import annotations

import math

from .families import HONOURED_BY, honours, refusal
from .methods import TOKEN_LEVEL_LOSSES, get_method, methods

# TRL's asynchronous GRPO settings that only TRL's vLLM rollout worker acts on: the local worker (local_rollouts)
# samples plain tokens at `temperature`, one group at a time, without tools, and refuses them away from their defaults
LOCAL_WORKER_REFUSES = (
    "top_p", "top_k", "min_p", "repetition_penalty", "max_tool_calling_iterations", "log_completions",
    "queue_maxsize", "max_inflight_tasks",
)  # fmt: skip


def check_aer_fields(config) -> None:
    """Raises ValueError naming the field when a field AER adds to `config` (an AER config, built: the AER settings
    and `vllm_logp_gap_limit`) is out of range. It checks only; it changes nothing."""

    def finite(name: str, value) -> float:
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a finite number, got {value!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        return value

    rho = finite("aer_rho", config.aer_rho)
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"aer_rho must be in [0, 1], got {config.aer_rho}")
    if finite("aer_tau", config.aer_tau) <= 0:
        raise ValueError(f"aer_tau must be > 0, got {config.aer_tau}")
    if finite("aer_eta", config.aer_eta) < 0:
        raise ValueError(f"aer_eta must be >= 0, got {config.aer_eta}")
    if finite("aer_alpha_init", config.aer_alpha_init) < 0:
        raise ValueError(f"aer_alpha_init must be >= 0, got {config.aer_alpha_init}")
    if config.aer_alpha_max is not None and finite("aer_alpha_max", config.aer_alpha_max) < config.aer_alpha_init:
        raise ValueError(
            f"aer_alpha_max must be >= aer_alpha_init ({config.aer_alpha_init}) or None, got {config.aer_alpha_max}"
        )
    if config.aer_bonus_cap is not None and finite("aer_bonus_cap", config.aer_bonus_cap) <= 0:
        raise ValueError(f"aer_bonus_cap must be > 0 or None, got {config.aer_bonus_cap}")
    if not 0 < finite("aer_bonus_quantile", config.aer_bonus_quantile) <= 1:
        raise ValueError(f"aer_bonus_quantile must be in (0, 1], got {config.aer_bonus_quantile}")
    if isinstance(config.aer_anchor_rollouts, bool) or int(config.aer_anchor_rollouts) != config.aer_anchor_rollouts:
        raise ValueError(f"aer_anchor_rollouts must be an integer >= 1, got {config.aer_anchor_rollouts}")
    if config.aer_anchor_rollouts < 1:
        raise ValueError(f"aer_anchor_rollouts must be an integer >= 1, got {config.aer_anchor_rollouts}")
    if finite("aer_eps", config.aer_eps) <= 0:
        raise ValueError(f"aer_eps must be > 0, got {config.aer_eps}")
    finite("aer_correctness_threshold", config.aer_correctness_threshold)
    if config.aer_fixed_target is not None and finite("aer_fixed_target", config.aer_fixed_target) <= 0:
        raise ValueError(f"aer_fixed_target must be > 0 or None, got {config.aer_fixed_target}")
    limit = config.vllm_logp_gap_limit
    if limit is not None and not (isinstance(limit, (int, float)) and not math.isnan(limit) and limit > 0):
        raise ValueError(f"vllm_logp_gap_limit must be a number of nats > 0 (.inf: no check) or unset, got {limit!r}")
    kind = type(config).trainer_kind
    defaults = {name: f.default for name, f in config.__dataclass_fields__.items()}
    for name in HONOURED_BY:
        if not honours(kind, name) and getattr(config, name) != defaults[name]:
            raise ValueError(refusal(kind, name, getattr(config, name)))
    if kind == "async_grpo":
        check_async_fields(config, defaults)


def check_async_fields(config, defaults: dict) -> None:
    """The asynchronous trainer's own fields: `aer_max_lag` (AER's measurements on), `local_rollout_lag` (the lockstep
    schedule's needs; the trainer refuses it for a worker that is not the local one), and what the local worker cannot
    do."""
    if config.aer_max_lag is not None:
        if isinstance(config.aer_max_lag, bool) or int(config.aer_max_lag) < 0:
            raise ValueError(f"aer_max_lag must be an integer >= 0 or None, got {config.aer_max_lag!r}")
        if not config.aer_measurements:
            raise ValueError(
                f"aer_max_lag={config.aer_max_lag}: it keeps old samples out of AER's entropy and bonus, which "
                f"method={config.method!r} trains without (aer_measurements is off): unset it"
            )
    if config.local_rollouts:
        for name in LOCAL_WORKER_REFUSES:
            if getattr(config, name) != defaults[name]:
                raise ValueError(
                    f"{name}={getattr(config, name)!r}: the local rollout worker (local_rollouts=True) samples plain "
                    f"tokens at `temperature`, one group at a time, without tools, and cannot honour it; it is a "
                    f"setting of TRL's vLLM rollout worker (local_rollouts=False)"
                )
        if config.token_budget is None:
            raise ValueError(
                "token_budget=None asks the vLLM server for its max_model_len, and local_rollouts=True has no server: "
                "set token_budget (0: a fixed number of samples per micro-batch)"
            )
    lag = config.local_rollout_lag
    if lag is None:
        return
    if isinstance(lag, bool) or not isinstance(lag, int) or not 1 <= lag <= config.max_staleness:
        raise ValueError(
            f"local_rollout_lag must be an integer from 1 (the data loader reads one micro-batch ahead) to "
            f"max_staleness ({config.max_staleness}; older samples are dropped), got {lag!r}"
        )
    for name, needed in (("token_budget", 0), ("weight_sync_steps", 1)):
        if getattr(config, name) != needed:
            raise ValueError(
                f"local_rollout_lag needs {name}={needed} (the schedule counts one policy version per optimizer "
                f"step of a fixed number of samples), got {name}={getattr(config, name)!r}"
            )


def resolve_method(config) -> dict:
    """Resolve `config` (an AER config of any trainer family, while it is built) through its method's entry: the
    method's settings fill fields the user left at their defaults, an explicit value that contradicts them is refused,
    never overridden. Returns what the method set (field -> value)."""
    method = get_method(config.method)
    kind = type(config).trainer_kind
    if kind not in method.trainers:
        fitting = [n for n, m in methods().items() if kind in m.trainers]
        raise ValueError(
            f"method={config.method!r} does not train with {type(config).__name__}: it acts on the loss of "
            f"{' / '.join(t.upper() for t in method.trainers)}, not {kind.upper()}'s. Accepted methods for "
            f"{type(config).__name__}: {fitting}"
        )
    defaults = {name: f.default for name, f in config.__dataclass_fields__.items()}
    missing = sorted((set(method.sets) | set(method.defaults)) - set(defaults))
    if missing:
        raise ValueError(
            f"method={config.method!r} sets {missing}, which {type(config).__name__} has no field for: it is an "
            "extension's method; build the config with the extension's config class"
        )
    before = {name: getattr(config, name) for name in defaults}
    for name, value in method.sets.items():
        current = getattr(config, name)
        if current == value:
            continue
        if current != defaults[name]:
            fitting = [n for n, m in methods().items() if n != config.method and m.sets.get(name) == current]
            raise ValueError(
                f"method={config.method!r} sets {name}={value!r}, but {name}={current!r} was set explicitly: "
                f"leave {name} unset" + (f" or choose a method that sets it ({fitting})" if fitting else "")
            )
        setattr(config, name, value)
    for name, value in method.defaults.items():
        if getattr(config, name) == defaults[name]:
            setattr(config, name, value)
    if not method.aer:
        if config.aer_alpha_init != 0.0:
            raise ValueError(
                f"aer_alpha_init={config.aer_alpha_init} only applies to the AER methods "
                f"{[n for n, m in methods().items() if m.aer]}; method={config.method!r} trains without the AER "
                "bonus (set aer_alpha_init=0)"
            )
        for name in ("aer_adaptive", "aer_difficulty_aware"):
            if getattr(config, name):  # False is what the method resolves to (a resolved config rebuilds cleanly)
                raise ValueError(
                    f"{name}={getattr(config, name)} only applies to the AER methods; method={config.method!r} trains "
                    f"without the AER bonus (leave {name} unset)"
                )
        config.aer_adaptive, config.aer_difficulty_aware = False, False  # telemetry measures entropy with α = 0
    if config.aer_measurements is None:
        config.aer_measurements = method.aer
    elif method.aer and not config.aer_measurements:
        raise ValueError(
            f"aer_measurements=False: method={config.method!r} needs the entropy measurement it controls α with "
            "(aer_measurements only switches AER's outputs off for the other methods)"
        )
    entropy_coef = getattr(config, "entropy_coef", 0.0)  # TRL's entropy options: GRPOConfig's only
    use_adaptive_entropy = getattr(config, "use_adaptive_entropy", False)
    if not method.trl_entropy and (entropy_coef != 0.0 or use_adaptive_entropy):
        what = (
            "AER has its own entropy bonus"
            if method.aer
            else f"method={config.method!r} is an exploration method of its own (two exploration terms at once)"
        )
        raise ValueError(
            f"{what}: set entropy_coef=0.0 and use_adaptive_entropy=False (got entropy_coef={entropy_coef}, "
            f"use_adaptive_entropy={use_adaptive_entropy}); TRL's entropy options train with "
            "method='grpo' (or 'entropy_coef' / 'skywork')"
        )
    if method.configure is not None:
        method.configure(config)
    # what the method chose; for a non-AER method the AER switches resolving to off is not a choice worth logging
    quiet = () if method.aer else ("aer_adaptive", "aer_difficulty_aware", "aer_measurements")
    chosen = {k: getattr(config, k) for k, v in before.items() if getattr(config, k) != v and k not in quiet}
    if config.epsilon is None:
        config.epsilon = 0.2  # TRL's default; epsilon_high unset means "= epsilon" in TRL
    for name in ("epsilon", "epsilon_high"):
        value = getattr(config, name)
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r} (method={config.method!r})")
    if method.token_hook is not None and (
        config.loss_type not in TOKEN_LEVEL_LOSSES or config.importance_sampling_level != "token"
    ):
        raise ValueError(
            f"method={config.method!r} acts on per-token advantages/log-probabilities: it needs loss_type in "
            f"{list(TOKEN_LEVEL_LOSSES)} and importance_sampling_level='token' (got loss_type="
            f"{config.loss_type!r}, importance_sampling_level={config.importance_sampling_level!r})"
        )
    if kind != "grpo":
        return chosen  # the per-token baselines' fields below are AERGRPOConfig's
    for other in methods().values():
        for name in other.reads:
            if name not in method.reads and getattr(config, name) != defaults[name]:
                readers = [n for n, m in methods().items() if name in m.reads]
                raise ValueError(
                    f"{name}={getattr(config, name)!r} is a setting of method {readers}, and method={config.method!r} "
                    f"does not read it: unset it, or set method to {readers[0]!r}"
                )
    for name in ("ent_adv_kappa", "clip_cov_ub"):
        if not getattr(config, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(config, name)}")
    for name in ("ent_adv_alpha", "kl_cov_coef"):
        if getattr(config, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(config, name)}")
    for name in ("clip_cov_ratio", "kl_cov_ratio"):
        if not 0 < getattr(config, name) <= 1:
            raise ValueError(f"{name} must be in (0, 1], got {getattr(config, name)}")
    return chosen


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
