"""The bench trains through the library as an extension would: its own argument classes and trainer, handed to
`aer_trl.app.training`. `BenchScriptArguments` adds the lab sources' options, `BenchConfig` the CPU speed-ups'
switches, `BenchGRPOTrainer` their mixin; importing this module registers the `lab` and `arithmetic` sources (and
the `lab_accuracy` reward). `train_recipe` / `parse_recipe` are the library's with these classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aer_trl.app import training
from aer_trl.app.evaluation.args import EvalArguments
from aer_trl.app.trainers import recipe_trainer
from aer_trl.app.training import AERScriptArguments
from aer_trl.config import AERGRPOConfig
from aer_trl.trainer import AERGRPOTrainer

from .anchor_probe import AnchorProbeMixin, check_anchor_probe
from .controller_steps import SteppedControllerMixin, check_steps
from .lab.sources import ArithmeticArguments
from .shared_prompt import SharedPromptMixin
from .trl_target import TrlTargetMixin, check_trl_target_ratio
from .truncated_support import TruncatedSupportMixin, check_top_k


@dataclass
class BenchScriptArguments(AERScriptArguments, ArithmeticArguments):
    """`AERScriptArguments` plus the `lab` and `arithmetic` sources' options."""


@dataclass
class BenchConfig(AERGRPOConfig):
    """`AERGRPOConfig` plus the bench's research variants (`aer_bench.anchor_probe`, `aer_bench.controller_steps`,
    `aer_bench.trl_target`, `aer_bench.truncated_support`) and CPU speed-ups (`aer_bench.shared_prompt`)."""

    aer_anchor_probe: int = field(
        default=0,
        metadata={
            "help": "C2's anchor H0 from a probe before step 1 (ours, not the paper's): the untrained policy samples "
            "num_generations completions for each of aer_anchor_probe training prompts (drawn with the run's seed) "
            "and H0 is their token-weighted entropy; the probe trains nothing and logs only aer/anchor_probe_entropy. "
            "0: H0 from the rollout batches (aer_anchor_rollouts; the paper: the first one). A probe of more prompts "
            "than a rollout batch has steadies H* without measuring it on a policy that is already collapsing "
            "(docs/real_llm.md)."
        },
    )
    aer_step: str = field(
        default="sign",
        metadata={
            "help": "C3's step. 'sign': α_{t+1} = [α_t + η·sgn(H* − H_t)]_+ (the paper). 'proportional': "
            "α_{t+1} = [α_t + η·(H* − H_t)/H*]_+, at most η up below the target and down in proportion to the "
            "overshoot above it (ours, method aer_prop, docs/methods.md). 'pi': α_t = clip(kp·e_t + ki·Σe, 0, "
            "aer_alpha_max) with e_t = (H* − H_t)/H* and a frozen integral while saturated (ours, method aer_pi; "
            "aer_pi_kp, aer_pi_ki; aer_eta unused)."
        },
    )
    aer_pi_kp: float = field(
        default=0.1,
        metadata={"help": "Proportional gain of aer_step='pi' (α per unit of relative entropy error)."},
    )
    aer_pi_ki: float = field(
        default=0.02,
        metadata={"help": "Integral gain of aer_step='pi' (α per unit of accumulated relative error)."},
    )
    aer_gate: bool = field(
        default=False,
        metadata={
            "help": "No entropy bonus for a rollout batch while the last measured entropy is at or above H* (α "
            "applied = 0; the controller's own α moves on). Skywork-OR1's and TRL's adaptive-entropy safeguard; "
            "ours for AER, method aer_pi sets it (docs/methods.md)."
        },
    )
    aer_trl_target_ratio: float | None = field(
        default=None,
        metadata={
            "help": "TRL's adaptive entropy control (`use_adaptive_entropy`, method skywork) with its target anchored "
            "as AER anchors H*: `entropy_target` becomes aer_trl_target_ratio × H0, H0 the entropy of the first "
            "rollout batch (replacing the absolute entropy_target from then on; the first step decides as that "
            "target would). Needs aer_measurements (AER's measurement of H0). None: TRL's absolute entropy_target."
        },
    )
    aer_bonus_top_k: int | None = field(
        default=None,
        metadata={
            "help": "The bonus on a truncated support: each token's entropy in H_i is taken over its distribution "
            "renormalised to the aer_bonus_top_k largest logits (at most ln k nats), so the bonus cannot push "
            "probability into the vocabulary's tail (ours, AEnt's clamped entropy; method aer_topk sets 20, "
            "docs/methods.md). The trainer then reads the logits (TRL's fused head never makes them): more memory "
            "per micro-batch. The controller's H_t stays the full entropy. None: the full entropy (the paper)."
        },
    )

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

    def __post_init__(self):
        super().__post_init__()
        check_top_k(self.aer_bonus_top_k)
        check_anchor_probe(self)
        check_steps(self)
        check_trl_target_ratio(self)

    def trainer_requirements(self) -> list[type]:
        needs = super().trainer_requirements()
        for asked, mixin in (
            (self.aer_anchor_probe, AnchorProbeMixin),
            (self.aer_bonus_top_k is not None, TruncatedSupportMixin),
            (self.aer_step != "sign" or self.aer_gate, SteppedControllerMixin),
            (self.aer_trl_target_ratio is not None, TrlTargetMixin),
            (self.share_prompt_forward or self.share_prompt_generation, SharedPromptMixin),
        ):
            if asked and mixin not in needs:
                needs.append(mixin)
        return needs


class BenchGRPOTrainer(
    SharedPromptMixin,
    TruncatedSupportMixin,
    AnchorProbeMixin,
    TrlTargetMixin,
    SteppedControllerMixin,
    AERGRPOTrainer,
):
    """`AERGRPOTrainer` with the bench's variants (the anchor probe, the truncated-support bonus, the stepped
    controller, TRL's target anchored at H0) and the shared-prompt forward and rollouts (`BenchConfig.share_prompt_*`).
    The probe comes before the target's anchoring (a probe's H0 anchors TRL's target before step 1)."""


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


def bench_classes(args: list[str]) -> tuple[type | None, type | None]:
    """(config class, trainer class) for a command line: the bench's for GRPO recipes (its variants are GRPO's); for
    a recipe of another trainer (`trainer: rloo`, `async_grpo`) None, None: the library's config and trainer of that
    kind, with the bench's sources."""
    if recipe_trainer(list(args)) == "grpo":
        return BenchConfig, BenchGRPOTrainer
    return None, None


def parse_recipe(args: list[str]):
    """`aer_trl.app.training.parse_recipe` with the bench's classes."""
    return training.parse_recipe(args, BenchScriptArguments, bench_classes(args)[0])


def train_recipe(recipe, overrides=(), callbacks=()):
    """`aer_trl.app.training.train_recipe` with the bench's classes."""
    args = ["--config", str(recipe), *overrides]
    config_class, trainer_class = bench_classes(args)
    return training.train_recipe(recipe, overrides, BenchScriptArguments, config_class, trainer_class, callbacks)


def train(script_args, training_args, model_args=None, callbacks=()):
    """`aer_trl.app.training.train` with the bench's trainer for a `BenchConfig`."""
    trainer_class = BenchGRPOTrainer if isinstance(training_args, BenchConfig) else None
    return training.train(script_args, training_args, model_args, trainer_class, callbacks)
