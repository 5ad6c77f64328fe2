"""The trainer families AER trains on, named once: each TRL trainer AER extends (`grpo`: `GRPOTrainer`, `rloo`:
`RLOOTrainer`, `async_grpo`: the experimental `AsyncGRPOTrainer`), its AER config and trainer, its title in tables
and cards, TRL's tag, how a recipe of it is launched, when α moves and where its rollouts come from. Everything else
(the methods' `trainers`, the configs' `trainer_kind`, the command line's `trainer:` key, the recipes' headers, the
model card, docs/usage.md's trainer × feature table) reads this registry.

`HONOURED_BY` says which families honour the AER settings that not every family can: a config of another family
refuses such a setting when it is built, naming the field and the trainers that honour it (nothing accepted and
ignored). This module is pure Python: the command line reads it without importing TRL.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainerFamily:
    """One TRL trainer AER extends. `config` / `trainer`: "module:Name" under `aer_trl` (imported when used)."""

    kind: str
    title: str  # "GRPO": method titles and tables ("AER-GRPO" is "AER-RLOO" on RLOO's loss)
    trl_trainer: str  # the TRL class, for messages and docs
    config: str
    trainer: str
    tag: str  # TRL's tag on the model and its card
    launch: str  # the command a recipe of this family is launched with (the generated recipes' headers)
    processes: str  # how its processes share the model
    alpha_cadence: str  # when AER's controller moves α
    rollouts: str  # where the samples come from

    @property
    def config_name(self) -> str:
        return self.config.split(":")[1]

    @property
    def trainer_name(self) -> str:
        return self.trainer.split(":")[1]


FAMILIES: dict[str, TrainerFamily] = {
    f.kind: f
    for f in (
        TrainerFamily(
            kind="grpo",
            title="GRPO",
            trl_trainer="trl.GRPOTrainer",
            config="config:AERGRPOConfig",
            trainer="trainer:AERGRPOTrainer",
            tag="grpo",
            launch="accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/train.py",
            processes="DeepSpeed ZeRO-3 (or DDP, FSDP)",
            alpha_cadence="once per rollout batch (steps_per_generation x num_iterations micro-steps)",
            rollouts="transformers' generate, or vLLM (colocate or server mode) with use_vllm",
        ),
        TrainerFamily(
            kind="rloo",
            title="RLOO",
            trl_trainer="trl.RLOOTrainer",
            config="rloo_config:AERRLOOConfig",
            trainer="rloo_trainer:AERRLOOTrainer",
            tag="rloo",
            launch="accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/train.py",
            processes="DeepSpeed ZeRO-3 (or DDP, FSDP)",
            alpha_cadence="once per rollout batch (steps_per_generation x num_iterations micro-steps)",
            rollouts="transformers' generate, or vLLM (colocate or server mode) with use_vllm",
        ),
        TrainerFamily(
            kind="async_grpo",
            title="async GRPO",
            trl_trainer="trl.experimental.async_grpo.AsyncGRPOTrainer",
            config="async_grpo_config:AERAsyncGRPOConfig",
            trainer="async_grpo_trainer:AERAsyncGRPOTrainer",
            tag="async-grpo",
            launch="accelerate launch recipes/train.py",
            processes="DDP or FSDP2 (TRL's asynchronous GRPO does not run under DeepSpeed)",
            alpha_cadence="once per optimizer step (the policy version published at each weight sync)",
            rollouts="a vLLM server (`trl vllm-serve`, started first on GPUs of its own) samples with a policy up to "
            "max_staleness versions old; or, with local_rollouts: true, a copy of the policy in this process (the CPU "
            "path)",
        ),
    )
}

# AER settings only some families can honour: field -> (the families that do, why the others cannot)
HONOURED_BY: dict[str, tuple[tuple[str, ...], str]] = {
    "vllm_logp_gap_limit": (
        ("grpo", "rloo"),
        "it reads TRL's sampling/sampling_logp_difference, which only the synchronous trainers measure",
    ),
    "vllm_enable_expert_parallel": (
        ("grpo", "rloo"),
        "it configures the colocated vLLM engine; the asynchronous trainer samples from a vLLM server you start "
        "(pass --enable-expert-parallel to `trl vllm-serve`)",
    ),
}


def family(kind: str) -> TrainerFamily:
    """The family `kind` ("grpo", "rloo", "async_grpo"); a KeyError naming the accepted kinds otherwise."""
    try:
        return FAMILIES[kind]
    except KeyError:
        raise KeyError(f"{kind!r} is not an AER trainer family; accepted: {sorted(FAMILIES)}") from None


def honours(kind: str, name: str) -> bool:
    """Whether the family `kind` honours the AER setting `name` (every setting not in `HONOURED_BY` is everyone's)."""
    return name not in HONOURED_BY or kind in HONOURED_BY[name][0]


def refusal(kind: str, name: str, value) -> str:
    """The error for `name=value` set on a config of `kind`, which cannot honour it."""
    kinds, why = HONOURED_BY[name]
    others = " / ".join(family(k).trainer_name for k in kinds)
    return f"{name}={value!r}: {family(kind).trainer_name} cannot honour it ({why}); it is a setting of {others}"
