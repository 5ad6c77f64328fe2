"""Training methods as a registry: each method (GRPO, the paper's baselines, AER and its ablations) is one `Method`,
defined once here. `AERGRPOConfig` validates and resolves a config through it, the trainer applies its per-token hook,
model cards and tables take its title, `recipes/make_recipes.py` its recipe keys (docs/design.md §6, "Add a method").

A method from outside the package is one call:

    from aer_trl.methods import Method, register_method
    register_method(Method(name="my_method", help="...", title="GRPO with my method", token_hook=my_hook))

and then `AERGRPOConfig(method="my_method")` / `method: my_method` in a recipe. A package can also declare it as an
entry point in the group `aer_trl.methods`, so that `accelerate launch recipes/train.py --method my_method` finds it
without importing anything first (docs/design.md §6, "Add a method").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .core_algos import clip_cov_mask, ent_adv_advantages, expand_advantages, kl_cov_advantages
from .families import FAMILIES, family
from .plugins import Registry

__all__ = ["Method", "TokenBatch", "METHODS", "register_method", "get_method", "methods", "method_title"]

TOKEN_LEVEL_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo")
BOTH = tuple(FAMILIES)  # the trainer families of the AER methods (`Method.trainers`): every one


@dataclass
class TokenBatch:
    """What a per-token hook sees of the micro-batch TRL's loss is reading: `advantages` (B,) or (B, T) as TRL holds
    them, `logps`/`old_logps`/`entropies` (B, T), `mask` (B, T) 0/1 of the trained tokens, and a seeded CPU
    `generator` for methods that draw at random."""

    advantages: torch.Tensor
    logps: torch.Tensor
    old_logps: torch.Tensor
    entropies: torch.Tensor
    mask: torch.Tensor
    generator: torch.Generator


# (batch, config) -> (per-token advantages (B, T) TRL's loss then reads, {metric name: value} to log)
TokenHook = Callable[[TokenBatch, Any], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class Method:
    """One training method.

    - `name`: the value of `method` in a config or recipe; `help`: one line for `--help` and the model card;
      `title`: how cards and tables name it.
    - `aer`: trains AER's difficulty-weighted entropy bonus (controller, λ, α updates).
    - `sets`: config values the method implies. A field left at its default takes the value; a field the user set to
      another value is refused with an error naming both (never silently overridden).
    - `defaults`: values used only where the user left the field at its default (a user's value is kept).
    - `configure(config)`: anything else the method checks or derives; raise ValueError naming the field.
    - `token_hook`: per-token advantages handed to TRL's loss (needs a token-level loss; see `TokenBatch`).
    - `trl_entropy`: whether TRL's own entropy options (`entropy_coef`, `use_adaptive_entropy`) may be combined.
    - `trainer`: a class the trainer must be an instance of (an extension's method whose trainer adds what it
      needs, e.g. a mixin); the AER trainer refuses the method otherwise. None: any AER trainer of `trainers`.
    - `reads`: the config fields of its own the method reads (a baseline's settings); a config that sets one of
      them away from its default for a method that does not read it is refused, naming the methods that do.
    - `trainers`: the TRL trainer families whose loss the method trains on ("grpo": `AERGRPOConfig`, "rloo":
      `AERRLOOConfig`, "async_grpo": `AERAsyncGRPOConfig`); a config of another family refuses the method by name.
      Default: GRPO only (a token hook needs GRPO's per-token loss).
    - `recipe`, `lab_recipe`: keys `recipes/make_recipes.py` appends to the paper-scale / laptop-lab recipe;
      `recipe_note`: a comment line for the generated recipe.
    """

    name: str
    help: str
    title: str
    aer: bool = False
    sets: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    configure: Callable[[Any], None] | None = None
    token_hook: TokenHook | None = None
    trl_entropy: bool = True
    trainer: type | None = None
    trainers: tuple[str, ...] = ("grpo",)
    reads: tuple[str, ...] = ()
    recipe: Mapping[str, Any] = field(default_factory=dict)
    lab_recipe: Mapping[str, Any] | None = None  # None: the same keys as `recipe`
    recipe_note: str | None = None

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"Method.name must be an identifier (a recipe value), got {self.name!r}")
        if self.aer and self.token_hook is not None:
            raise ValueError(f"method {self.name!r}: an AER method adds a sequence-level bonus, not a token hook")

        if self.token_hook is not None and set(self.trainers) != {"grpo"}:
            raise ValueError(f"method {self.name!r}: a token hook acts on GRPO's per-token loss: trainers=('grpo',)")

    def title_for(self, trainer_kind: str) -> str:
        """The title under a trainer family: "AER-GRPO" is "AER-RLOO" on RLOO's loss."""
        return self.title if trainer_kind == "grpo" else self.title.replace("GRPO", family(trainer_kind).title)


METHODS: Registry[Method] = Registry(
    "method", field="method", group="aer_trl.methods", check=lambda m: isinstance(m, Method)
)


def register_method(method: Method, *, name: str | None = None, replace: bool = False) -> Method:
    """Adds `method` to the registry under its name (`replace=True` to redefine a name); `aer_trl.plugins`."""
    return METHODS.register(method, name=name, replace=replace)


def get_method(name: str) -> Method:
    """The registered method `name` (an installed package's `aer_trl.methods` entry point is loaded on demand)."""
    return METHODS.get(name)


def methods() -> Mapping[str, Method]:
    """The registered methods by name, in registration order (a read-only view)."""
    return METHODS.view()


def method_title(name: str, trainer_kind: str = "grpo") -> str:
    """A method's title for tables and cards; a name that is not a method (a run's own label) is returned as is."""
    return METHODS.get(name).title_for(trainer_kind) if name in METHODS else name


# ---------------------------------------------------------------------------------------------- built-in methods
def _needs_alpha(config) -> None:
    if config.aer_alpha_init <= 0:
        raise ValueError(
            f"method={config.method!r} needs aer_alpha_init > 0 (the fixed α), got {config.aer_alpha_init}"
        )


def _entropy_coef(config) -> None:
    if config.entropy_coef <= 0 or config.use_adaptive_entropy:
        raise ValueError(
            "method='entropy_coef' needs entropy_coef > 0 and use_adaptive_entropy=False "
            f"(got entropy_coef={config.entropy_coef}, use_adaptive_entropy={config.use_adaptive_entropy})"
        )


def _clip_higher(config) -> None:
    if config.epsilon_high <= config.epsilon:
        raise ValueError(
            f"method='clip_higher' needs epsilon_high > epsilon (got epsilon={config.epsilon}, "
            f"epsilon_high={config.epsilon_high})"
        )


def _clip_cov(config) -> None:
    """The paper's table: c_l = c_h = 1.0; one bound given is used for both sides."""
    eps, high = config.epsilon, config.epsilon_high
    config.epsilon = eps if eps is not None else (high if high is not None else 1.0)
    config.epsilon_high = high if high is not None else config.epsilon


def _kl_cov(config) -> None:
    if config.epsilon is not None or config.epsilon_high is not None:
        raise ValueError(
            "method='kl_cov' trains KL-Cov's unclipped policy loss −A·ratio: leave epsilon and epsilon_high unset "
            f"(got epsilon={config.epsilon}, epsilon_high={config.epsilon_high})"
        )
    config.epsilon, config.epsilon_high = 1.0, 1e9  # no clipping in effect


def _base(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return expand_advantages(advantages, like).to(like.dtype)


def _mean_over(values: torch.Tensor, batch: TokenBatch) -> float:
    return ((values * batch.mask).sum() / batch.mask.sum().clamp(min=1.0)).item()


def _ent_adv_hook(batch: TokenBatch, config):
    new = ent_adv_advantages(batch.advantages, batch.entropies, batch.mask, config.ent_adv_alpha, config.ent_adv_kappa)
    return new, {"ent_adv/bonus_mean": _mean_over(new - _base(batch.advantages, batch.logps), batch)}


def _clip_cov_hook(batch: TokenBatch, config):
    cut = clip_cov_mask(
        batch.advantages,
        batch.logps,
        batch.old_logps,
        batch.mask,
        config.clip_cov_ratio,
        config.clip_cov_lb,
        config.clip_cov_ub,
        config.epsilon,
        config.epsilon_high,
        batch.generator,
    )
    # a zero advantage removes exactly the policy-gradient term of a cut token (verl masks pg_losses the same way);
    # the KL term and everything else in TRL's loss keeps its gradient
    new = torch.where(cut, torch.zeros_like(batch.logps), _base(batch.advantages, batch.logps))
    return new, {"clip_cov/zeroed_fraction": _mean_over(cut.to(batch.mask.dtype), batch)}


def _kl_cov_hook(batch: TokenBatch, config):
    new, selected = kl_cov_advantages(
        batch.advantages, batch.logps, batch.old_logps, batch.mask, config.kl_cov_ratio, config.kl_cov_coef
    )
    return new, {"kl_cov/penalized_fraction": _mean_over(selected.to(batch.mask.dtype), batch)}


for _method in (
    Method("grpo", "plain TRL GRPO (no entropy term)", "GRPO"),
    Method("rloo", "plain TRL RLOO (no entropy term)", "RLOO", trainers=("rloo",)),
    Method(
        "async_grpo",
        "plain TRL asynchronous GRPO (trl.experimental.async_grpo; no entropy term)",
        "GRPO",
        trainers=("async_grpo",),
    ),
    Method(
        "clip_higher",
        "Clip-Higher (DAPO) through TRL's `epsilon_high` (0.28 unless set)",
        "GRPO with Clip-Higher (DAPO)",
        defaults={"epsilon": 0.2, "epsilon_high": 0.28},
        configure=_clip_higher,
        trainers=BOTH,
        recipe={"epsilon_high": 0.28},
    ),
    Method(
        "entropy_coef",
        "fixed entropy coefficient through TRL's `entropy_coef`",
        "GRPO with a fixed entropy coefficient",
        configure=_entropy_coef,
        # the paper tunes the fixed coefficient and does not print it: starting points, not the paper's values
        recipe={"entropy_coef": 0.001},
        lab_recipe={"entropy_coef": 0.02},
        recipe_note="A starting point to tune: the paper reports a tuned value without printing it.",
    ),
    Method(
        "skywork",
        "Skywork adaptive entropy control through TRL's `use_adaptive_entropy`/`entropy_target`",
        "GRPO with Skywork adaptive entropy control",
        sets={"use_adaptive_entropy": True},
        recipe={"entropy_target": 0.2, "entropy_coef_delta": 0.005},
        lab_recipe={"entropy_target": 0.18, "entropy_coef_delta": 0.02},
    ),
    Method(
        "ent_adv",
        "Ent-Adv: per-token advantage + min(ent_adv_alpha·H, |A|/ent_adv_kappa)",
        "GRPO with Ent-Adv",
        token_hook=_ent_adv_hook,
        trl_entropy=False,
        reads=("ent_adv_alpha", "ent_adv_kappa"),
        recipe={"ent_adv_alpha": 0.4, "ent_adv_kappa": 2.0},
    ),
    Method(
        "clip_cov",
        "Clip-Cov: cut the gradient of a random clip_cov_ratio share of high-covariance tokens",
        "GRPO with Clip-Cov",
        configure=_clip_cov,
        token_hook=_clip_cov_hook,
        trl_entropy=False,
        reads=("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"),
        recipe={"clip_cov_ratio": 2.0e-4, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0, "epsilon": 1.0, "epsilon_high": 1.0},
    ),
    Method(
        "kl_cov",
        "KL-Cov: unclipped loss + kl_cov_coef·|logπ − logπ_old| on the top kl_cov_ratio tokens by covariance",
        "GRPO with KL-Cov",
        configure=_kl_cov,
        token_hook=_kl_cov_hook,
        trl_entropy=False,
        reads=("kl_cov_ratio", "kl_cov_coef"),
        recipe={"kl_cov_ratio": 2.0e-3, "kl_cov_coef": 1.0},
        recipe_note="KL-Cov's penalty acts on tokens whose policy moved since sampling "
        "(steps_per_generation > gradient_accumulation_steps or num_iterations > 1); with one optimizer step per "
        "rollout it is plain unclipped GRPO.",
    ),
    Method(
        "aer",
        "Adaptive Entropy Regularization, C1+C2+C3 (the paper)",
        "AER-GRPO",
        aer=True,
        trainers=BOTH,
        # defaults, not sets: the full method is where a user switches a component off by hand (the presets below
        # are those switch-offs, and refuse a contradicting switch)
        defaults={"aer_adaptive": True, "aer_difficulty_aware": True},
        trl_entropy=False,
    ),
    Method(
        "aer_fork",
        "AER with the bonus on forking tokens only: H_i over the completion's top-entropy tokens "
        "(aer_bonus_quantile, default 0.2); ours, not the paper's (docs/methods.md)",
        "AER-GRPO (ours: bonus on forking tokens)",
        aer=True,
        trainers=BOTH,
        defaults={"aer_adaptive": True, "aer_difficulty_aware": True, "aer_bonus_quantile": 0.2},
        trl_entropy=False,
    ),
    Method(
        "aer_cap",
        "AER with the bonus saturating at the target: λ_i·min(H_i, H*), no push on a completion already above H* "
        "(aer_bonus_cap=1.0); ours, not the paper's (docs/methods.md)",
        "AER-GRPO (ours: bonus capped at H*)",
        aer=True,
        trainers=BOTH,
        defaults={"aer_adaptive": True, "aer_difficulty_aware": True, "aer_bonus_cap": 1.0},
        trl_entropy=False,
    ),
    Method(
        "aer_c1",
        "AER ablation 'C1 only': difficulty-aware λ with a fixed α = aer_alpha_init",
        "AER-GRPO (ablation: C1 only)",
        aer=True,
        trainers=BOTH,
        sets={"aer_adaptive": False, "aer_difficulty_aware": True},
        configure=_needs_alpha,
        trl_entropy=False,
        recipe={"aer_alpha_init": 0.005},
        lab_recipe={"aer_alpha_init": 0.1},
    ),
    Method(
        "aer_c2c3",
        "AER ablation 'C2&C3 only': adaptive α, λ = α for every sample",
        "AER-GRPO (ablation: C2 and C3 only)",
        aer=True,
        trainers=BOTH,
        sets={"aer_adaptive": True, "aer_difficulty_aware": False},
        trl_entropy=False,
    ),
    Method(
        "aer_fixed",
        "fixed entropy coefficient through AER: λ = aer_alpha_init for every sample",
        "GRPO with a fixed entropy coefficient (through AER)",
        aer=True,
        trainers=BOTH,
        sets={"aer_adaptive": False, "aer_difficulty_aware": False},
        configure=_needs_alpha,
        trl_entropy=False,
        recipe={"aer_alpha_init": 0.001},
        lab_recipe={"aer_alpha_init": 0.02},
        recipe_note="Fixed coefficient through AER (lambda = aer_alpha_init on every sample).",
    ),
):
    register_method(_method)
