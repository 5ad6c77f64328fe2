"""The "Parameters:" section of the AER configs' docstrings, in TRL's layout (`GRPOConfig`'s: groups headed by
"> Parameters that ...", each field with its type and default), written from the fields' own `help` texts so that the
docstring and `--help` never say two things. A field left out of every group is an error at import."""

from __future__ import annotations

import textwrap
from dataclasses import MISSING, fields

# AERArguments' fields, grouped as TRL groups GRPOConfig's
AER_GROUPS = {
    "Parameters that choose the method and what AER reports": ["method", "aer_measurements"],
    "Parameters of the difficulty weighting (C1)": [
        "aer_rho", "aer_eps", "aer_correctness_reward", "aer_correctness_threshold", "aer_difficulty_aware",
    ],
    "Parameters of the entropy controller (C2, C3)": [
        "aer_tau", "aer_eta", "aer_alpha_init", "aer_alpha_max", "aer_adaptive", "aer_anchor_rollouts",
        "aer_fixed_target",
    ],
    "Parameters of the bonus": ["aer_bonus_cap", "aer_bonus_quantile"],
    "Parameters of TRL's that AER declares again (unset by default)": ["epsilon", "gradient_checkpointing"],
    "Parameters of generation and vLLM": ["chat_template_path", "vllm_enable_expert_parallel", "vllm_logp_gap_limit"],
}  # fmt: skip
BASELINE_GROUPS = {
    "Parameters of the per-token baselines (Ent-Adv, Clip-Cov, KL-Cov)": [
        "ent_adv_alpha", "ent_adv_kappa", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
        "kl_cov_coef",
    ],
}  # fmt: skip
ASYNC_GROUPS = {
    "Parameters of AER under asynchronous rollouts": ["local_rollouts", "local_rollout_lag", "aer_max_lag"]
}


def parameters_doc(cls: type, groups: dict[str, list[str]]) -> str:
    """TRL's "Parameters:" section for `groups` of `cls`'s fields (each with its help text). Every field `cls` itself
    declares must be in a group (a missing one is a ValueError naming it); its bases' fields are their docstrings'."""
    by_name = {f.name: f for f in fields(cls)}
    grouped = [name for names in groups.values() for name in names]
    missing = sorted((set(vars(cls).get("__annotations__", {})) & set(by_name)) - set(grouped))
    if missing:
        raise ValueError(f"{cls.__name__}: fields without a group in its docstring: {missing}")
    lines = ["", "    Parameters:"]
    for title, names in groups.items():
        lines += [f"        > {title}", ""]
        for name in names:
            f = by_name[name]
            default = f.default if f.default is not MISSING else f.default_factory()
            lines.append(f"        {name} (`{f.type}`, *optional*, defaults to `{default!r}`):")
            help_text = f.metadata.get("help", "")
            indent = " " * 12
            lines += textwrap.wrap(
                help_text, 119, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
            )
            lines.append("")
    return "\n".join(lines)


def documented(groups: dict[str, list[str]]):
    """A class decorator (above `@dataclass`): `cls`'s docstring gains its "Parameters:" section (`parameters_doc`)."""

    def document(cls: type) -> type:
        cls.__doc__ = (cls.__doc__ or "") + parameters_doc(cls, groups)
        return cls

    return document


def documented_config(groups: dict[str, list[str]] | None = None):
    """A class decorator (above `@dataclass`) for an AER config: its docstring's "Parameters:" section holds AER's
    fields (`AER_GROUPS`), the config's own (`groups`), then every group of the TRL config it extends, as TRL's
    docstring gives them, so `help(AERRLOOConfig)` describes every field it takes, in TRL's layout."""

    def document(cls: type) -> type:
        own = parameters_doc(cls, {**AER_GROUPS, **(groups or {})})
        trl_doc = cls.trl_config().__doc__ or ""
        _, found, trl_groups = trl_doc.partition("Parameters:\n")
        trl_title = f"        > Parameters of TRL's `{cls.trl_config().__name__}` (every one applies)\n\n"
        cls.__doc__ = (cls.__doc__ or "") + own + ("\n" + trl_title + trl_groups if found else "")
        return cls

    return document
