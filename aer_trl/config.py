"""`AERGRPOConfig` (alias `AERConfig`): TRL's `GRPOConfig` plus the `aer_*` fields (docs/design.md)."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field

from trl import GRPOConfig
from trl.trainer.utils import get_config_model_id

from .compat import has_activation_checkpointing
from .config_checks import resolve_method, validate_aer
from .methods import get_method, methods

logger = logging.getLogger(__name__)

# Fields that do not shape the trained model: where and how often it logs, saves, evaluates and pushes; left out of
# `AERGRPOConfig.run_settings`, so a resume with another output_dir or logging_steps is not reported as a change.
_BOOKKEEPING = re.compile(
    r"(logging|log|save|hub|trackio|eval|do|include|dataloader|vllm_server|vllm_group)_.*|.*_full_eval|"
    r"output_dir|overwrite_output_dir|run_name|project|report_to|push_to_hub|resume_from_checkpoint|"
    r"restore_callback_states_from_checkpoint|disable_tqdm|skip_memory_metrics|local_rank|debug|label_names|"
    r"length_column_name|prediction_loss_only|metric_for_best_model|greater_is_better|load_best_model_at_end|"
    r"batch_eval_metrics|per_device_eval_batch_size|num_generations_eval|num_completions_to_print|"
    r"torch_empty_cache_steps|ddp_timeout|lab_cache_dir|vllm_logp_gap_limit"
)


def shaping_settings(values: dict) -> dict:
    """The entries of a dict of arguments that shape the trained model (all but `_BOOKKEEPING`), as JSON values."""
    return json.loads(json.dumps({k: v for k, v in values.items() if not _BOOKKEEPING.fullmatch(k)}, default=str))


def rollout_steps(args) -> int | None:
    """Optimizer steps per rollout batch, `steps_per_generation × num_iterations / gradient_accumulation_steps`, or
    None where a rollout batch ends inside an optimizer step (TRL's own geometry: no boundary to align to). The one
    place this is computed: saves, checkpoints and validation all align to it."""
    per_rollout = args.steps_per_generation * args.num_iterations
    if per_rollout % args.gradient_accumulation_steps:
        return None
    return per_rollout // args.gradient_accumulation_steps


def settings_changes(saved: dict, current: dict) -> dict[str, tuple]:
    """field -> (saved value, current value) for every field both sets know and that differs."""
    return {k: (saved[k], current[k]) for k in sorted(saved.keys() & current.keys()) if saved[k] != current[k]}


def describe_changes(changes: dict[str, tuple]) -> str:
    """`{"tau": (0.4, 0.5)}` → "tau 0.4 -> 0.5", for warnings that name changed settings."""
    return "; ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())


@dataclass
class AERGRPOConfig(GRPOConfig):
    r"""
    Configuration for [`AERGRPOTrainer`]: every field of `trl.GRPOConfig` plus Adaptive Entropy Regularization.

    The loss is `L = L_GRPO − mean_i(λ_i · H_i)` with `H_i` the sequence-level entropy of completion `i` and
    `λ_i = α · max(0, ρ − g(q_i)) / (ρ + ε)` (C1). α is updated once per rollout batch by
    `α ← max(0, α + η · sgn(H* − H_t))` (C3) towards the target `H* = τ · H0` (C2).
    """

    # TRL's `epsilon` (0.2) re-declared with "unset" as its default, so a method can tell a user's explicit value
    # (kept, or refused with an error) from no value (the method's own default): see `_apply_method`.
    epsilon: float | None = field(
        default=None,
        metadata={
            "help": "Lower clipping bound ε of the importance ratio, as TRL's. Unset (None, AER's default, so that a "
            "method tells a user's value from none): 0.2, TRL's default, for every method but Clip-Cov's 1.0 (the "
            "paper's c_l); KL-Cov trains unclipped and refuses a value. The built config always holds a number."
        },
    )
    # TRL's `gradient_checkpointing` (default True) re-declared as "unset" so that, where transformers has renamed it
    # `activation_checkpointing`, the value moves to the new name without transformers' FutureWarning (recipes keep
    # the name every supported transformers knows); see `_checkpointing_name`.
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Activation (gradient) checkpointing, as TRL's: saves memory at the cost of a second forward. "
            "Unset (None, AER's default, so that the value can move to transformers' newer name): True, TRL's "
            "default. Where transformers calls it `activation_checkpointing`, either name may be given and the "
            "built config holds the value there."
        },
    )
    method: str = field(
        default="aer",
        metadata={
            "help": "Which method trains (`aer_trl.methods`; more can be registered): "
            + "; ".join(f"'{name}': {m.help}" for name, m in methods().items())
            + "."
        },
    )
    aer_measurements: bool | None = field(
        default=None,
        metadata={
            "help": "AER's outputs: the entropy controller's measurements and per-difficulty telemetry (aer/* "
            "metrics), <output_dir>/metrics.jsonl and the AER section of the model card. Unset: on for the AER "
            "methods (they need it), off for the others, which then train and log exactly as trl.GRPOTrainer; set "
            "true to compare a baseline with AER on the same measurements."
        },
    )
    ent_adv_alpha: float = field(default=0.4, metadata={"help": "Ent-Adv: scale α of the entropy advantage term."})
    ent_adv_kappa: float = field(default=2.0, metadata={"help": "Ent-Adv: the term is capped at |A|/κ."})
    clip_cov_ratio: float = field(
        default=2e-4, metadata={"help": "Clip-Cov: share r of tokens whose gradient is cut."}
    )
    clip_cov_lb: float = field(default=1.0, metadata={"help": "Clip-Cov: lower covariance bound of candidates."})
    clip_cov_ub: float = field(default=5.0, metadata={"help": "Clip-Cov: upper covariance bound of candidates."})
    kl_cov_ratio: float = field(default=2e-3, metadata={"help": "KL-Cov: share r of top-covariance tokens penalised."})
    kl_cov_coef: float = field(default=1.0, metadata={"help": "KL-Cov: coefficient κ of |logπ − logπ_old|."})
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
    aer_difficulty_aware: bool | None = field(
        default=None,
        metadata={
            "help": "C1 on/off. False: λ = α for every scorable sample (the paper's 'C2&C3 only' ablation). Unset: "
            "what the method sets (on for 'aer'); a value that contradicts the method is refused."
        },
    )
    aer_adaptive: bool | None = field(
        default=None,
        metadata={
            "help": "C2+C3 on/off. False: α stays at aer_alpha_init ('C1 only' and 'fixed coefficient' rows). Unset: "
            "what the method sets (on for 'aer'); a value that contradicts the method is refused."
        },
    )
    aer_anchor_rollouts: int = field(
        default=1,
        metadata={
            "help": "C2's anchor H0 is the mean entropy of the first aer_anchor_rollouts rollout batches (α stays at "
            "aer_alpha_init until it is known). 1: the first rollout batch only (the paper). Ours: a larger value "
            "steadies H* when a rollout batch has few prompts (docs/real_llm.md)."
        },
    )
    aer_bonus_cap: float | None = field(
        default=None,
        metadata={
            "help": "The bonus saturates at aer_bonus_cap × H*: the objective's entropy term is λ_i·min(H_i, "
            "aer_bonus_cap·H*), so a completion whose entropy is above the cap gets no push (ours, method aer_cap "
            "sets 1.0, docs/methods.md). None: λ_i·H_i (the paper)."
        },
    )
    aer_bonus_quantile: float = field(
        default=1.0,
        metadata={
            "help": "Which tokens carry AER's bonus: H_i is the mean entropy over the completion's tokens whose "
            "entropy is in the top aer_bonus_quantile share of the batch's trained tokens (the forking tokens). "
            "1.0: every token (the paper). Method aer_fork defaults it to 0.2 (ours, docs/methods.md). The "
            "controller's measured entropy H_t stays the mean over every token."
        },
    )
    chat_template_path: str | None = field(
        default=None,
        metadata={
            "help": "The chat template that formats conversational prompts (as TRL's SFTConfig field of this name): "
            "a Jinja file, or 'plain' (a base model: Question:/Answer: turns after one BOS). It replaces the "
            "tokenizer's own and is saved with it in every checkpoint. Needed for a tokenizer without a template "
            "(a base model such as Llama-3.1-8B): without one the trainer refuses to start."
        },
    )
    vllm_enable_expert_parallel: bool = field(
        default=False,
        metadata={
            "help": "vLLM colocate mode: shard a mixture of experts' experts over the engine's tensor-parallel ranks "
            "(vLLM's enable_expert_parallel) instead of slicing every expert. Server mode: pass vLLM's own "
            "--enable-expert-parallel to `trl vllm-serve` (or `vllm serve`), which forwards it (docs/gpu.md)."
        },
    )
    vllm_logp_gap_limit: float | None = field(
        default=None,
        metadata={
            "help": "With vLLM rollouts: the run stops with an error when TRL's "
            "sampling/sampling_logp_difference/mean "
            "(mean |log-prob of vLLM − of the trainer| over a rollout batch's tokens) is above this many nats, i.e. "
            "when the engine no longer samples the policy being trained (a broken weight sync). Unset: by the "
            "trainer's compute dtype, 1e-3 in float32 and 0.1 under bf16/fp16 (measured healthy: ~1e-5 and up to "
            "0.022; a broken MoE sync 0.02-0.36, docs/design.md §7). .inf: no check. Needs TRL's "
            "vllm_importance_sampling_correction (on by default), which measures the gap."
        },
    )
    aer_fixed_target: float | None = field(
        default=None,
        metadata={"help": "Absolute target entropy H* > 0 in nats; overrides τ · H0 when set."},
    )

    def __post_init__(self):
        # before TRL's own __post_init__, which derives from them: the method's settings (a user's contradicting value
        # is refused, never overridden), the name transformers wants for checkpointing, vLLM's generation kwargs
        self._method_settings = resolve_method(self)
        self._checkpointing_name()
        self._engine_generation_kwargs()
        super().__post_init__()
        validate_aer(self)  # AER's checks, on the finished config
        self._align_saves_to_rollouts()

    def _engine_generation_kwargs(self) -> None:
        """`use_cache` is an argument of transformers' `generate` (the CPU recipes set it: gradient checkpointing
        turns the model's cache off); TRL hands `generation_kwargs` to vLLM's `SamplingParams` when `use_vllm`, which
        refuses it ("Unexpected keyword argument 'use_cache'"). vLLM always keeps a KV cache, so the
        key is dropped there, with a note, and a recipe runs on either engine unchanged."""
        if self.use_vllm and self.generation_kwargs and "use_cache" in self.generation_kwargs:
            self.generation_kwargs = {k: v for k, v in self.generation_kwargs.items() if k != "use_cache"}
            logger.warning(
                "generation_kwargs: use_cache dropped because use_vllm=True: it is an argument of transformers' "
                "generate(), which vLLM's SamplingParams refuses (vLLM always keeps a KV cache)"
            )

    def _checkpointing_name(self) -> None:
        """One value for activation checkpointing under the name the installed transformers wants (TRL's default
        True when neither name is given)."""
        if has_activation_checkpointing():
            if getattr(self, "activation_checkpointing", None) is None:
                self.activation_checkpointing = (
                    True if self.gradient_checkpointing is None else self.gradient_checkpointing
                )
            if self.gradient_checkpointing_kwargs is not None and self.activation_checkpointing_kwargs is None:
                self.activation_checkpointing_kwargs = self.gradient_checkpointing_kwargs
            self.gradient_checkpointing = self.gradient_checkpointing_kwargs = None  # mirrored back by transformers
        elif self.gradient_checkpointing is None:
            self.gradient_checkpointing = True

    def _align_saves_to_rollouts(self) -> None:
        """Checkpoints only at rollout-batch boundaries: AER's iteration (entropy summed over a whole rollout batch,
        then one α update) cannot be resumed from its middle, so `save_steps` is rounded up to a multiple of the
        optimizer steps per rollout batch, with a warning that says so (docs/design.md §2)."""
        if not self.aer_measurements:
            return  # without AER's controller, TRL's checkpointing as the user set it
        steps = rollout_steps(self)
        if steps is None:
            return  # a rollout batch ends mid optimizer step: TRL's own geometry, nothing to align to
        if steps > 1 and self.max_steps > 0 and self.max_steps % steps:
            logger.warning(
                "max_steps=%d ends inside a rollout batch (%d optimizer steps each): the last batch's α update never "
                "happens and no checkpoint is written at the end (it could not be resumed exactly; the final model is "
                "still saved); use a multiple of %d",
                self.max_steps,
                steps,
                steps,
            )
        strategy = getattr(self.save_strategy, "value", self.save_strategy)
        if steps <= 1 or strategy != "steps" or not isinstance(self.save_steps, int) or self.save_steps < 1:
            return
        if self.save_steps % steps:
            rounded = -(-self.save_steps // steps) * steps
            logger.warning(
                "save_steps=%d falls inside a rollout batch (%d optimizer steps each: steps_per_generation=%d x "
                "num_iterations=%d / gradient_accumulation_steps=%d); checkpoints must end an AER iteration to resume "
                "exactly, so save_steps is rounded up to %d",
                self.save_steps,
                steps,
                self.steps_per_generation,
                self.num_iterations,
                self.gradient_accumulation_steps,
                rounded,
            )
            self.save_steps = rounded

    def run_settings(self) -> dict:
        """The settings that shape the trained model (every field but logging, saving, evaluation and Hub
        bookkeeping), JSON values. Saved with AER's controller state in each checkpoint, so that a resume with other
        settings says which ones changed."""
        # world_size: the processes, hence the global batch and the data each one sees
        return shaping_settings({**self.to_dict(), "world_size": self.world_size})

    def trainer_requirements(self) -> list[type]:
        """The classes a trainer of this config must be an instance of: the method's (`Method.trainer`), and in an
        extension's config those its own fields need. `AERGRPOTrainer` refuses, by name, a config whose requirement
        it does not meet, rather than train without what the settings ask for."""
        needs = get_method(self.method).trainer
        return [] if needs is None else [needs]

    @property
    def method_settings(self) -> dict:
        """What the method set in this config (field -> value); the trainer logs it once at start."""
        return dict(self._method_settings)

    @classmethod
    def for_trainer(cls, args, model) -> AERGRPOConfig:
        """The config an `AERGRPOTrainer` trains with: `args` itself; for None a default one named after the model
        (as `trl.GRPOTrainer`); a plain `trl.GRPOConfig` converted, the AER fields at their defaults (a drop-in for
        `trl.GRPOTrainer`; a config that asks for TRL's own entropy bonus trains it, method 'grpo', since AER's would
        be a second one), with a warning that says so; anything else a TypeError."""
        if args is None:
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            return cls(f"{model_name.split('/')[-1]}-AER")
        if isinstance(args, GRPOConfig) and not isinstance(args, AERGRPOConfig):
            trl_entropy = args.entropy_coef != 0.0 or args.use_adaptive_entropy
            method = "grpo" if trl_entropy else cls.method
            logger.warning(
                "AERGRPOTrainer got a trl.GRPOConfig: converted with AERGRPOConfig.from_grpo_config, method=%r%s (AER "
                "fields at their defaults); pass an AERGRPOConfig to set them",
                method,
                " because it sets TRL's entropy_coef/use_adaptive_entropy" if trl_entropy else "",
            )
            return cls.from_grpo_config(args, method=method)
        if not isinstance(args, AERGRPOConfig):
            raise TypeError(
                "AERGRPOTrainer needs `args` to be an aer_trl.AERGRPOConfig or a trl.GRPOConfig, got "
                f"{type(args).__name__}"
            )
        return args

    @classmethod
    def from_grpo_config(cls, grpo_config: GRPOConfig, **aer_fields) -> AERGRPOConfig:
        """An AERGRPOConfig with every field a `GRPOConfig` was built with, plus `aer_fields` (e.g. aer_tau=0.4)."""
        from dataclasses import fields

        values = {f.name: getattr(grpo_config, f.name) for f in fields(grpo_config) if f.init}
        if values.get("steps_per_generation") is not None:
            values.pop("generation_batch_size", None)  # derived from steps_per_generation by GRPOConfig
        return cls(**{**values, **aer_fields})


# The name of earlier releases of this README and its notebooks; TRL pairs `GRPOConfig` with `GRPOTrainer`.
AERConfig = AERGRPOConfig
