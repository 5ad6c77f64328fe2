"""The bench trains through the library as an extension would: its own argument classes and trainer, handed to
`aer_trl.training`. `BenchScriptArguments` adds the lab sources' options, `BenchConfig` the CPU speed-ups'
switches, `BenchGRPOTrainer` their mixin; importing this module registers the `lab` and `arithmetic` sources (and
the `lab_accuracy` reward). `train_recipe` / `parse_recipe` are the library's with these classes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from aer_trl import training
from aer_trl.config import AERGRPOConfig
from aer_trl.evaluation.args import EvalArguments
from aer_trl.trainer import AERGRPOTrainer
from aer_trl.training import AERScriptArguments

from .lab.sources import ArithmeticArguments
from .shared_prompt import SharedPromptMixin


@dataclass
class BenchScriptArguments(AERScriptArguments, ArithmeticArguments):
    """`AERScriptArguments` plus the `lab` and `arithmetic` sources' options."""


@dataclass
class BenchConfig(AERGRPOConfig):
    """`AERGRPOConfig` plus the bench's CPU speed-ups (`aer_bench.shared_prompt`)."""

    share_prompt_forward: bool = field(
        default=False,
        metadata={
            "help": "Run each distinct prompt's forward once per micro-batch and share its KV cache with the "
            "completions of its group (the same loss up to float rounding; the prompt's cost divided by the group "
            "size: ~3x faster steps on CPU with few-shot prompts). Off: TRL's forward, bit for bit. Falls back to "
            "TRL's forward with gradient checkpointing, DDP, multimodal or MoE inputs."
        },
    )
    share_prompt_generation: bool = field(
        default=False,
        metadata={
            "help": "Generate rollouts with each distinct prompt prefilled once and its KV cache repeated for the "
            "completions of its group (TRL's generate prefills it num_generations times). The same sampling "
            "distribution and, with the same seed, the same tokens up to float rounding. Applies to transformers' "
            "`generate` (not vLLM, continuous batching, multimodal or tool-calling rollouts, where TRL's path runs)."
        },
    )


class BenchGRPOTrainer(SharedPromptMixin, AERGRPOTrainer):
    """`AERGRPOTrainer` with the shared-prompt forward and rollouts (`BenchConfig.share_prompt_*`)."""


@dataclass
class BenchEvalArguments(EvalArguments):
    """`EvalArguments` plus the `arithmetic` benchmark's options."""

    arithmetic_test_per_tier: int = field(
        default=32, metadata={"help": "'arithmetic' benchmark: held-out problems per tier."}
    )
    arithmetic_test_extra: list[int] | None = field(
        default=None,
        metadata={"help": "'arithmetic' benchmark: more held-out problems per tier, as the training recipe's key."},
    )
    arithmetic_eval_per_tier: list[int] | None = field(
        default=None,
        metadata={
            "help": "'arithmetic' benchmark: evaluate the first N held-out problems of each tier (one number per "
            "tier); the split and its few-shot examples are drawn as training draws them. Default: all of them."
        },
    )
    lab_tiers: list[int] | None = field(
        default=None, metadata={"help": "'arithmetic' benchmark: tiers (default all)."}
    )


CLASSES = dict(script_class=BenchScriptArguments, config_class=BenchConfig)
parse_recipe = functools.partial(training.parse_recipe, **CLASSES)
train_recipe = functools.partial(training.train_recipe, **CLASSES, trainer_class=BenchGRPOTrainer)
train = functools.partial(training.train, trainer_class=BenchGRPOTrainer)
