"""The configs of AER's trainers: `AERArguments`, the fields and checks every AER config has whichever TRL trainer it
configures, and GRPO's: `AERGRPOConfig` = `GRPOConfig` + `AERArguments` + the per-token baselines' fields. RLOO's
is `rloo_config.AERRLOOConfig`, asynchronous GRPO's `async_grpo_config.AERAsyncGRPOConfig` (docs/design.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from typing import ClassVar

from trl import GRPOConfig
from trl.trainer.utils import get_config_model_id

from .compat import has_activation_checkpointing
from .config_checks import check_aer_fields, resolve_method
from .config_docs import AER_GROUPS, BASELINE_GROUPS, documented, documented_config
from .core_algos import rollout_steps
from .families import family
from .methods import get_method, methods
from .settings import shaping_settings

logger = logging.getLogger(__name__)


@documented(AER_GROUPS)
@dataclass
class AERArguments:
    r"""
    The fields of Adaptive Entropy Regularization that every AER config adds to its TRL config, whichever trainer it
    configures (`AERGRPOConfig`, `AERRLOOConfig`), with their checks and the resume and save rules that go with them.

    The loss is `L = L_TRL − mean_i(λ_i · H_i)` with `H_i` the sequence-level entropy of completion `i` and
    `λ_i = α · max(0, ρ − g(q_i)) / (ρ + ε)` (C1). α is updated once per rollout batch by
    `α ← max(0, α + η · sgn(H* − H_t))` (C3) towards the target `H* = τ · H0` (C2).

    A config class is `@dataclass class C(AERArguments, <TRL config>)`, in that order (TRL's fields keep their
    positions; `__post_init__` runs AER's steps around TRL's), and names its trainer family in `trainer_kind`, which
    the method registry (`Method.trainers`) is checked against.
    """

    trainer_kind: ClassVar[str] = ""  # "grpo", "rloo": the TRL trainer family (aer_trl.methods.Method.trainers)
    trainer_name: ClassVar[str] = ""  # the AER trainer this config goes with, for messages

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
            "help": "AER's controller and what it reports, all or nothing: the controller's callback (it measures "
            "H_t, anchors H0 and H*, moves α), its per-difficulty telemetry (aer/* metrics), <output_dir>/"
            "metrics.jsonl, the AER section of the model card and its tags, and checkpoints only where a rollout "
            "batch ends (its iteration cannot be resumed from the middle). Unset: on for the AER methods (they need "
            "it), off for the others, which then train, save and log exactly as TRL's trainer; set true to compare "
            "a baseline with AER on the same measurements."
        },
    )
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
            "entropy is in the top aer_bonus_quantile share (0 < q ≤ 1) of this process's micro-batch of trained "
            "tokens (the forking tokens). 1.0: every token (the paper). Method aer_fork defaults it to 0.2 (ours, "
            "docs/methods.md). The controller's measured entropy H_t stays the mean over every token. Not TRL's "
            "top_entropy_quantile, which masks the policy loss (not a bonus) with a threshold over every process's "
            "tokens and whose help calls that share ρ: AER's ρ is aer_rho, the difficulty threshold."
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
            "trainer's compute dtype, 1e-3 in float32 and 0.1 under bf16/fp16 (the healthy and broken gaps measured: "
            "docs/design.md §7). .inf: no check. Needs TRL's "
            "vllm_importance_sampling_correction (on by default), which measures the gap."
        },
    )
    aer_fixed_target: float | None = field(
        default=None, metadata={"help": "Absolute target entropy H* > 0 in nats; overrides τ · H0 when set."}
    )

    def __post_init__(self):
        # before TRL's own __post_init__, which derives from them: the method's settings (a user's contradicting value
        # is refused, never overridden), the name transformers wants for checkpointing, vLLM's generation kwargs
        self._method_settings = resolve_method(self)
        self._checkpointing_name()
        self._engine_generation_kwargs()
        super().__post_init__()
        if isinstance(self.aer_correctness_reward, str) and self.aer_correctness_reward.lstrip("-").isdigit():
            self.aer_correctness_reward = int(self.aer_correctness_reward)  # the CLI passes an index as a string
        check_aer_fields(self)  # AER's checks, on the finished config
        self._warn_saves_inside_rollouts()

    def _engine_generation_kwargs(self) -> None:
        """`use_cache` is an argument of transformers' `generate` (the CPU recipes set it: gradient checkpointing
        turns the model's cache off); TRL hands `generation_kwargs` to vLLM's `SamplingParams` when `use_vllm`, which
        refuses it ("Unexpected keyword argument 'use_cache'"). vLLM always keeps a KV cache, so the
        key is dropped there, with a note, and a recipe runs on either engine unchanged."""
        kwargs = getattr(self, "generation_kwargs", None)  # TRL's asynchronous GRPO samples elsewhere: none
        if getattr(self, "use_vllm", False) and kwargs and "use_cache" in kwargs:
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

    def _warn_saves_inside_rollouts(self) -> None:
        """Says, once at start, where the run's checkpoints fall when they cannot all end an AER iteration (entropy
        summed over a whole rollout batch, then one α update): `AERCallback` moves a save asked for inside a rollout
        batch to the batch's end, and writes none at a last step inside one (docs/design.md §2)."""
        if not self.aer_measurements:
            return  # without AER's controller, TRL's checkpointing as the user set it
        steps = rollout_steps(self)
        if steps is None or steps <= 1:
            return  # one optimizer step per rollout batch, or a batch that ends mid step (TRL's own geometry)
        if self.max_steps > 0 and self.max_steps % steps:
            logger.warning(
                "max_steps=%d ends inside a rollout batch (%d optimizer steps each): the last batch's α update never "
                "happens and no checkpoint is written at the end (it could not be resumed exactly; the final model is "
                "still saved); use a multiple of %d",
                self.max_steps,
                steps,
                steps,
            )
        strategy = getattr(self.save_strategy, "value", self.save_strategy)
        every = self.save_steps if strategy == "steps" and isinstance(self.save_steps, int) else 0
        if every >= 1 and every % steps:
            logger.warning(
                "save_steps=%d falls inside a rollout batch (%d optimizer steps each: steps_per_generation=%d x "
                "num_iterations=%d / gradient_accumulation_steps=%d); checkpoints must end an AER iteration to resume "
                "exactly, so each save moves to the end of its rollout batch (a multiple of %d)",
                self.save_steps,
                steps,
                self.steps_per_generation,
                self.num_iterations,
                self.gradient_accumulation_steps,
                steps,
            )

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
    def trl_config(cls) -> type:
        """The TRL config this AER config extends (`GRPOConfig`, `RLOOConfig`)."""
        return next(
            b for b in cls.__mro__[1:] if not issubclass(b, AERArguments) and hasattr(b, "__dataclass_fields__")
        )

    @classmethod
    def for_trainer(cls, args, model):
        """The config an AER trainer trains with: `args` itself; for None a default one named after the model (as TRL's
        trainers name theirs); a plain TRL config of the trainer's family converted, the AER fields at their defaults
        (a drop-in for TRL's trainer), with a warning that says so; anything else a TypeError naming what is
        accepted."""
        base = cls.trl_config()
        if args is None:
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            return cls(f"{model_name.split('/')[-1]}-{cls.default_run_suffix}")
        if isinstance(args, base) and not isinstance(args, cls):
            method, why = cls.method_for_trl_config(args)
            logger.warning(
                "%s got a trl.%s: converted with %s.from_trl_config, method=%r%s (AER fields at their defaults); "
                "pass an %s to set them",
                cls.trainer_name,
                base.__name__,
                cls.__name__,
                method,
                why,
                cls.__name__,
            )
            return cls.from_trl_config(args, method=method)
        if not isinstance(args, cls):
            hint = ""
            if isinstance(args, AERArguments):
                hint = f" ({type(args).__name__} configures {type(args).trainer_name}: train with that trainer)"
            raise TypeError(
                f"{cls.trainer_name} needs `args` to be an aer_trl.{cls.__name__} or a trl.{base.__name__}, got "
                f"{type(args).__name__}{hint}"
            )
        return args

    default_run_suffix: ClassVar[str] = "AER"

    @classmethod
    def method_for_trl_config(cls, trl_args) -> tuple[str, str]:
        """The method a plain TRL config converts to (AER's default method), and why, for the warning."""
        return cls.method, ""

    @classmethod
    def from_trl_config(cls, trl_config, **aer_fields):
        """This AER config with every field a TRL config (`GRPOConfig` for `AERGRPOConfig`, `RLOOConfig` for
        `AERRLOOConfig`) was built with, plus `aer_fields` (e.g. aer_tau=0.4)."""
        values = {f.name: getattr(trl_config, f.name) for f in fields(trl_config) if f.init}
        if values.get("steps_per_generation") is not None:
            values.pop("generation_batch_size", None)  # derived from steps_per_generation by TRL's config
        return cls(**{**values, **aer_fields})


@documented_config(BASELINE_GROUPS)
@dataclass
class AERGRPOConfig(AERArguments, GRPOConfig):
    r"""
    Configuration for [`AERGRPOTrainer`]: every field of `trl.GRPOConfig`, AER's (`AERArguments`), and the settings
    of the per-token baselines the paper compares AER with (Ent-Adv, Clip-Cov, KL-Cov), which act on GRPO's
    per-token loss.
    """

    trainer_kind: ClassVar[str] = "grpo"
    trainer_name: ClassVar[str] = family("grpo").trainer_name

    ent_adv_alpha: float = field(default=0.4, metadata={"help": "Ent-Adv: scale α of the entropy advantage term."})
    ent_adv_kappa: float = field(default=2.0, metadata={"help": "Ent-Adv: the term is capped at |A|/κ."})
    clip_cov_ratio: float = field(
        default=2e-4, metadata={"help": "Clip-Cov: share r of tokens whose gradient is cut."}
    )
    clip_cov_lb: float = field(default=1.0, metadata={"help": "Clip-Cov: lower covariance bound of candidates."})
    clip_cov_ub: float = field(default=5.0, metadata={"help": "Clip-Cov: upper covariance bound of candidates."})
    kl_cov_ratio: float = field(default=2e-3, metadata={"help": "KL-Cov: share r of top-covariance tokens penalised."})
    kl_cov_coef: float = field(default=1.0, metadata={"help": "KL-Cov: coefficient κ of |logπ − logπ_old|."})

    @classmethod
    def method_for_trl_config(cls, trl_args) -> tuple[str, str]:
        """A `GRPOConfig` that asks for TRL's own entropy bonus trains it (method 'grpo': AER's would be a second
        one); any other trains AER's default method."""
        if trl_args.entropy_coef != 0.0 or trl_args.use_adaptive_entropy:
            return "grpo", " because it sets TRL's entropy_coef/use_adaptive_entropy"
        return cls.method, ""

    @classmethod
    def from_grpo_config(cls, grpo_config: GRPOConfig, **aer_fields) -> AERGRPOConfig:
        """An AERGRPOConfig with every field a `GRPOConfig` was built with, plus `aer_fields` (`from_trl_config`)."""
        return cls.from_trl_config(grpo_config, **aer_fields)


def __getattr__(name: str):
    """`AERConfig`: the name of earlier releases for `AERGRPOConfig` (TRL pairs `GRPOConfig` with `GRPOTrainer`),
    still given, with a FutureWarning."""
    if name == "AERConfig":
        import warnings

        warnings.warn(
            "AERConfig is the old name of AERGRPOConfig: use AERGRPOConfig (AERConfig goes in a later release)",
            FutureWarning,
            stacklevel=2,
        )
        return AERGRPOConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
