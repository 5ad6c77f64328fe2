"""The pure math of AER and of the paper's baselines (paper §4, docs/design.md §1, docs/methods.md): one small
function per formula, as verl's `core_algos.py`. No trainer imports: tensors and floats in, tensors and floats out;
each function is tested against hand-computed values (tests/test_core_algos.py).

AER:
- C1 difficulty-aware coefficient: ``group_accuracy``, ``difficulty_coefficients`` (and the buckets it logs by)
- the bonus's sequence entropy H_i: ``sequence_entropy``, ``capped_entropy``
- C2 initial-anchored target entropy and C3 dynamic global coefficient: ``AERController`` / ``update_alpha``

The baselines, on `(B, T)` per-token tensors with a `(B, T)` 0/1 `mask` of the tokens trained on (padding excluded);
each returns what the trainer plugs into TRL's own loss without copying it:
- Ent-Adv (Cheng et al. 2025): per-token advantages A + min(α·H.detach(), |A|/κ).
- Clip-Cov (Cui et al. 2025): a mask of tokens whose policy-gradient term is cut (the method zeroes their advantage,
  as verl masks their policy-gradient loss; TRL's KL term keeps its gradient).
- KL-Cov (Cui et al. 2025): per-token advantages whose gradient equals that of −A·ratio + κ·|logπ − logπ_old| on
  the top-k tokens by covariance (exact in the gradient; TRL's clipping is switched off by the method's settings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

__all__ = [
    "group_accuracy",
    "hard_mask",
    "difficulty_coefficients",
    "sign",
    "update_alpha",
    "sequence_entropy",
    "capped_entropy",
    "AERController",
    "token_covariance",
    "ent_adv_advantages",
    "clip_cov_mask",
    "kl_cov_advantages",
]


def group_accuracy(correct: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Per-completion group accuracy g(q) = mean correctness of the completions of q's group.

    Args:
        correct: shape ``(N,)``, 1.0 correct / 0.0 wrong / NaN unscorable, grouped contiguously
            (``num_generations`` consecutive completions share a prompt, as TRL lays them out).
        num_generations: group size G.

    Returns:
        Shape ``(N,)``: every completion gets its group's accuracy over the scorable completions.
        A group with no scorable completion gets NaN.
    """
    if correct.dim() != 1:
        raise ValueError(f"`correct` must be 1-D, got shape {tuple(correct.shape)}")
    if num_generations < 1 or correct.numel() % num_generations != 0:
        raise ValueError(
            f"`correct` has {correct.numel()} entries, which is not a multiple of num_generations={num_generations}"
        )
    groups = correct.float().view(-1, num_generations)
    g = torch.nanmean(groups, dim=1)  # NaN when the whole group is NaN
    return g.repeat_interleave(num_generations)


def hard_mask(group_acc: torch.Tensor, rho: float) -> torch.Tensor:
    """Which prompts are hard: ρ − g > 0, or g = 0 when ρ = 0. NaN (unscorable group) is never hard."""
    if rho == 0:
        return group_acc == 0
    return (rho - group_acc) > 0


BUCKETS = ("unsolved", "hard", "learning", "solved")  # g = 0 | 0 < g < ρ | ρ ≤ g < 1 | g = 1


def difficulty_buckets(group_acc: torch.Tensor, rho: float) -> torch.Tensor:
    """Bucket index of each completion's prompt by group accuracy g (`BUCKETS`): 0 when g = 0, 1 when 0 < g < ρ,
    2 when ρ ≤ g < 1 (ρ = 0 included: every solved-sometimes prompt), 3 when g = 1; -1 for an unscorable group."""
    out = torch.full_like(group_acc, -1, dtype=torch.long)
    out[group_acc == 0] = 0
    out[(group_acc > 0) & (group_acc < rho)] = 1
    out[(group_acc >= rho) & (group_acc > 0) & (group_acc < 1)] = 2
    out[group_acc == 1] = 3
    return out


def difficulty_coefficients(
    group_acc: torch.Tensor, alpha: float, rho: float, eps: float = 1e-8, difficulty_aware: bool = True
) -> torch.Tensor:
    """C1: λ(q) = α·max(0, ρ − g)/(ρ + ε) + α·1{ρ = 0 and g = 0}; 0 for unscorable groups (g = NaN).

    With ``difficulty_aware=False`` (the paper's "C2&C3 only" ablation) every scorable sample gets λ = α.
    """
    g = group_acc.float()
    scorable = ~torch.isnan(g)
    if not difficulty_aware:
        lam = torch.full_like(g, float(alpha))
    else:
        lam = alpha * torch.clamp(rho - g, min=0.0) / (rho + eps)
        if rho == 0:
            lam = lam + alpha * (g == 0).float()
    return torch.where(scorable, lam, torch.zeros_like(lam))


def sign(x: float) -> int:
    """sgn with sgn(0) = 0."""
    return (x > 0) - (x < 0)


def update_alpha(alpha: float, entropy: float, target: float, eta: float, alpha_max: float | None = None) -> float:
    """C3: α_{t+1} = max(0, α_t + η·sgn(H* − H_t)), optionally clamped above at ``alpha_max``."""
    new = max(0.0, alpha + eta * sign(target - entropy))
    if alpha_max is not None:
        new = min(new, alpha_max)
    return new


def sequence_entropy(entropies: torch.Tensor, mask: torch.Tensor, quantile: float = 1.0) -> torch.Tensor:
    """H_i, the completion's entropy that AER's bonus raises: the mean token entropy over its trained tokens (the
    paper, ``quantile=1``), or over its *forking* tokens only (``quantile < 1``: the tokens whose entropy is in the
    top ``quantile`` share of the batch's trained tokens; ours, method ``aer_fork``, docs/methods.md).

    Args:
        entropies: (B, T) token entropies; they may carry gradient, which flows through the result.
        mask: (B, T) 1 for trained tokens, 0 for padding.
        quantile: share of the highest-entropy trained tokens of the batch that count (0 < quantile ≤ 1). The
            threshold is the (1 − quantile) quantile of the batch's trained-token entropies (detached); a token at
            or above it counts. A completion with no such token gets H_i = 0 (no bonus).

    Returns:
        (B,) per-completion entropy.
    """
    if not 0 < quantile <= 1:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")
    mask = mask.to(entropies.dtype)
    if quantile < 1:
        trained = entropies.detach()[mask.bool()]
        if trained.numel():
            threshold = torch.quantile(trained.float(), 1.0 - quantile).to(entropies.dtype)
            mask = mask * (entropies.detach() >= threshold).to(entropies.dtype)
    return (entropies * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def capped_entropy(seq_entropy: torch.Tensor, cap: float | None) -> torch.Tensor:
    """min(H_i, cap): the entropy the bonus raises, saturating at `cap` (ours, method ``aer_cap``, docs/methods.md).
    A completion already above the cap gets no push (zero gradient); below it, the paper's H_i. None: H_i as is."""
    if cap is None:
        return seq_entropy
    return torch.clamp(seq_entropy, max=float(cap))


@dataclass
class AERController:
    """Holds the global coefficient α, the initial entropy H0 and the target H* (C2 + C3).

    ``observe(entropy)`` is called once per AER iteration (one rollout batch) with the measured policy entropy:
    the first call anchors H0 and H* = τ·H0 (unless ``fixed_target`` is given), then α is updated.
    With ``anchor_rollouts = k > 1`` (ours, not the paper's: `aer_anchor_rollouts`), H0 is the mean of the
    first k measurements and α stays at its initial value until H0 is known (there is no target before it).

    Names: α is ``alpha`` everywhere (``AERGRPOConfig.aer_alpha_init`` / ``aer_alpha_max``, ``AERCallback.alpha``,
    the ``aer/alpha`` log, the card's "final α"); ``applied_alpha`` is the α the next rollout batch trains with, the
    same α here (an extension's controller may withhold it, e.g. behind a gate). ``target`` is H* (what α
    steers towards); ``fixed_target`` is the optional fixed H* that replaces τ·H0 (``aer_fixed_target``).
    """

    tau: float = 0.4
    eta: float = 0.005
    alpha: float = 0.0
    alpha_max: float | None = None
    fixed_target: float | None = None
    adaptive: bool = True
    initial_entropy: float | None = None
    anchor_rollouts: int = 1
    anchor_entropies: list = field(default_factory=list)
    iteration: int = 0
    history: list = field(default_factory=list)

    def __post_init__(self):
        if int(self.anchor_rollouts) != self.anchor_rollouts or self.anchor_rollouts < 1:
            raise ValueError(f"anchor_rollouts must be an integer >= 1, got {self.anchor_rollouts}")

    @property
    def target(self) -> float | None:
        """H*: the absolute target when set, else τ·H0 (None before the first measurement)."""
        if self.fixed_target is not None:
            return self.fixed_target
        if self.initial_entropy is None:
            return None
        return self.tau * self.initial_entropy

    def anchor(self, entropy: float) -> None:
        """Sets H0 from a measurement made before the first rollout batch (e.g. a probe of the initial policy); the
        rollout batches then only steer α. A second anchor, or one after H0 is known, is an error."""
        entropy = float(entropy)
        if not math.isfinite(entropy) or entropy <= 0:
            raise ValueError(f"the anchor entropy must be finite and > 0, got {entropy}")
        if self.initial_entropy is not None or self.anchor_entropies:
            raise RuntimeError(f"H0 is already anchored ({self.initial_entropy}): the probe comes before step 1")
        self.initial_entropy = entropy

    def observe(self, entropy: float) -> float:
        entropy = float(entropy)
        if not math.isfinite(entropy):
            # A rollout batch with no trained token (all completions masked) carries no measurement.
            return self.alpha
        if self.initial_entropy is None:
            self.anchor_entropies.append(entropy)
            if len(self.anchor_entropies) >= self.anchor_rollouts:
                self.initial_entropy = sum(self.anchor_entropies) / len(self.anchor_entropies)
        if self.adaptive and self.target is not None:
            self.update(entropy)
        self.iteration += 1
        self.history.append({"iteration": self.iteration, "entropy": entropy, "alpha": self.alpha})
        return self.alpha

    def update(self, entropy: float) -> None:
        """C3's step on α from the measured entropy, once H* is known (a subclass may step otherwise, e.g. a
        proportional step)."""
        self.alpha = update_alpha(self.alpha, entropy, self.target, self.eta, self.alpha_max)

    @property
    def applied_alpha(self) -> float:
        """The α the next rollout batch trains with (a subclass may withhold it, e.g. behind a gate)."""
        return self.alpha

    def state_dict(self) -> dict:
        return {
            "alpha": self.alpha,
            "initial_entropy": self.initial_entropy,
            "anchor_entropies": list(self.anchor_entropies),
            "iteration": self.iteration,
            "history": list(self.history),
        }

    def load_state_dict(self, state: dict) -> None:
        self.alpha = float(state["alpha"])
        self.initial_entropy = None if state.get("initial_entropy") is None else float(state["initial_entropy"])
        self.anchor_entropies = [float(h) for h in state.get("anchor_entropies", [])]
        self.iteration = int(state.get("iteration", 0))
        self.history = list(state.get("history", []))


# -------------------------------------------------------------------------------- the baselines' per-token functions
def expand_advantages(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Advantages as TRL holds them, (B,) per sequence or (B, T) per token, as (B, T) like `like`."""
    return (advantages.unsqueeze(1) if advantages.dim() == 1 else advantages).expand_as(like)


def token_covariance(advantages: torch.Tensor, logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """cov_t = (A_t − mean A)(logπ_t − mean logπ), means over the masked tokens; 0 on padding."""
    m = mask.bool()
    adv = expand_advantages(advantages, logps).float()
    lp = logps.detach().float()
    count = m.sum().clamp(min=1)
    adv_c = adv - adv[m].sum() / count
    lp_c = lp - lp[m].sum() / count
    return torch.where(m, adv_c * lp_c, torch.zeros_like(lp_c))


def ent_adv_advantages(
    advantages: torch.Tensor, entropies: torch.Tensor, mask: torch.Tensor, alpha: float = 0.4, kappa: float = 2.0
) -> torch.Tensor:
    """A'_t = A_t + min(α·H_t, |A_t|/κ), entropies detached; 0 on padding. Returns `(B, T)`."""
    adv = expand_advantages(advantages, entropies).float()
    bonus = torch.minimum(alpha * entropies.detach().float(), adv.abs() / kappa)
    return (adv + bonus) * mask


def clip_cov_mask(
    advantages: torch.Tensor,
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    mask: torch.Tensor,
    ratio: float = 2e-4,
    cov_low: float = 1.0,
    cov_high: float = 5.0,
    epsilon_low: float = 1.0,
    epsilon_high: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Tokens whose gradient Clip-Cov cuts: among those with cov_low < cov < cov_high that the PPO clip does not
    already cut, max(1, ratio·N) drawn at random (N = masked tokens), reproducibly through `generator`."""
    m = mask.bool()
    cov = token_covariance(advantages, logps, mask)
    adv = expand_advantages(advantages, logps)
    is_ratio = torch.exp(logps.detach() - old_logps)
    clipped = ((is_ratio < 1 - epsilon_low) & (adv < 0)) | ((is_ratio > 1 + epsilon_high) & (adv > 0))
    candidates = (m & (cov > cov_low) & (cov < cov_high) & ~clipped).flatten().nonzero().squeeze(1)
    out = torch.zeros(m.numel(), dtype=torch.bool, device=m.device)
    if candidates.numel():
        n_pick = min(candidates.numel(), max(1, int(ratio * int(m.sum()))))
        perm = torch.randperm(candidates.numel(), generator=generator, device="cpu")[:n_pick].to(m.device)
        out[candidates[perm]] = True
    return out.view_as(m)


def kl_cov_advantages(
    advantages: torch.Tensor,
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    mask: torch.Tensor,
    ratio: float = 2e-3,
    coef: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token advantages A' with ∇(−A'·ratio) = ∇(−A·ratio + κ·|logπ − logπ_old|) on the top-k tokens by cov,
    k = max(1, ratio·N) (deterministic: torch.topk). Returns (A' of shape (B, T), the boolean top-k mask)."""
    m = mask.bool()
    adv = expand_advantages(advantages, logps).float()
    cov = token_covariance(advantages, logps, mask).masked_fill(~m, float("-inf"))
    n_valid = int(m.sum())
    selected = torch.zeros(m.numel(), dtype=torch.bool, device=m.device)
    if n_valid:
        k = min(n_valid, max(1, int(ratio * n_valid)))
        selected[torch.topk(cov.flatten(), k).indices] = True
    selected = selected.view_as(m)
    diff = (logps - old_logps).detach().float()
    # d/dθ κ|d| = κ·sgn(d)·∇logπ, and d/dθ (−A'·e^d) = −A'·e^d·∇logπ  =>  A' = A − κ·sgn(d)/e^d on selected tokens
    adjusted = adv - coef * torch.sign(diff) * torch.exp(-diff)
    return torch.where(selected, adjusted, adv) * mask, selected


def rollout_steps(args) -> int | None:
    """Optimizer steps per rollout batch, `steps_per_generation × num_iterations / gradient_accumulation_steps`, or
    None where a rollout batch ends inside an optimizer step (TRL's own geometry: no boundary to align to). The one
    place this is computed: saves, checkpoints and validation all align to it."""
    if not hasattr(args, "steps_per_generation"):
        return 1  # a trainer without rollout batches (TRL's asynchronous GRPO): α moves every optimizer step
    per_rollout = args.steps_per_generation * args.num_iterations
    if per_rollout % args.gradient_accumulation_steps:
        return None
    return per_rollout // args.gradient_accumulation_steps
