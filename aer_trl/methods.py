"""The paper's baselines as small pure functions on per-token tensors (docs/methods.md).

Each takes `(B, T)` tensors with a `(B, T)` 0/1 `mask` of the tokens trained on (padding excluded), and returns
what the trainer plugs into TRL's own loss without copying it:

- Ent-Adv (Cheng et al. 2025): per-token advantages A + min(α·H.detach(), |A|/κ).
- Clip-Cov (Cui et al. 2025): a mask of tokens whose gradient is cut (their log-probabilities are detached).
- KL-Cov (Cui et al. 2025): per-token advantages whose gradient equals that of −A·ratio + κ·|logπ − logπ_old| on
  the top-k tokens by covariance (exact in the gradient; TRL's clipping is switched off by the method's settings).
"""

from __future__ import annotations

import torch

__all__ = ["token_covariance", "ent_adv_advantages", "clip_cov_mask", "kl_cov_advantages"]


def _expand(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return advantages.unsqueeze(1).expand_as(like) if advantages.dim() == 1 else advantages


def token_covariance(advantages: torch.Tensor, logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """cov_t = (A_t − mean A)(logπ_t − mean logπ), means over the masked tokens; 0 on padding."""
    m = mask.bool()
    adv = _expand(advantages, logps).float()
    lp = logps.detach().float()
    count = m.sum().clamp(min=1)
    adv_c = adv - adv[m].sum() / count
    lp_c = lp - lp[m].sum() / count
    return torch.where(m, adv_c * lp_c, torch.zeros_like(lp_c))


def ent_adv_advantages(
    advantages: torch.Tensor, entropies: torch.Tensor, mask: torch.Tensor, alpha: float = 0.4, kappa: float = 2.0
) -> torch.Tensor:
    """A'_t = A_t + min(α·H_t, |A_t|/κ), entropies detached; 0 on padding. Returns `(B, T)`."""
    adv = _expand(advantages, entropies).float()
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
    adv = _expand(advantages, logps)
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
    adv = _expand(advantages, logps).float()
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
