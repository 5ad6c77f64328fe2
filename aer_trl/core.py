"""The AER core: everything a trainer needs to run AER, for any TRL trainer that samples groups of completions and
trains on their per-token entropies (it imports no trainer class of TRL's). A trainer's adapter (`adapter.py` for
TRL's synchronous rollout trainers, GRPO and RLOO) holds one `AERCore` and calls it at four moments:

1. a rollout batch is scored: `coefficients(rewards_per_func, num_generations, ...)` turns the correctness reward into
   the group accuracy g(q) and λ_i for every completion (C1), and logs where the entropy budget goes;
2. a loss forward computed the per-token entropies (with gradient): `bonus(entropies, mask, λ)` is the term `mean_i(λ_i
   · H_i)` the loss subtracts, and `measure(...)` adds the micro-batch's entropy to the rollout batch's sum;
3. the last micro-step on a rollout batch is done: `finish_iteration(reduce, ...)` reduces the sums over processes and
   hands H_t to the `AERCallback`, which moves α at the end of that optimizer step (C2 + C3);
4. a log: `fill_logs` adds the aer/* values (the controller's α, H0, H*, and the carried telemetry)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .callbacks import AERCallback
from .config_checks import resolve_correctness_index
from .core_algos import BUCKETS, capped_entropy, difficulty_coefficients, group_accuracy, sequence_entropy
from .metrics import CarriedMetrics, entropy_sums, log_entropy, log_rollout


class AERCore:
    """AER's state inside one trainer: the controller's callback (α, H0, H*), the correctness reward's index, the
    entropy summed over the current rollout batch, and the aer/* values logging steps carry.

    `args`: an AER config (`AERArguments`); `callback`: the run's `AERCallback` (None where AER's measurements are
    off: a baseline method). Built before the trainer's own constructor runs (nothing TRL calls meanwhile finds it
    missing); `bind_rewards` names the trainer's reward functions once they exist."""

    def __init__(self, args, callback: AERCallback | None):
        self.args = args
        self.callback = callback
        self.correctness_index: int | None = None  # `bind_rewards`
        self.correctness_name: str | None = None
        self.entropy_stats: torch.Tensor | None = None  # local `entropy_sums` of the rollout batch so far
        self.carried = CarriedMetrics()  # what logging steps without a new rollout batch carry

    @property
    def on(self) -> bool:
        """AER's measurements (and, for the AER methods, its bonus) are on."""
        return bool(self.args.aer_measurements)

    @property
    def controller(self) -> AERCallback:
        """The AERCallback that owns α, H0 and H*, for every read of α."""
        if self.callback is None:
            raise RuntimeError(
                f"method={self.args.method!r} trains without AER's controller (aer_measurements is off); set "
                "aer_measurements=True to measure entropy as AER does"
            )
        return self.callback

    def bind_rewards(self, reward_func_names: list[str]) -> None:
        """The trainer's rewards by TRL's names, which `aer_correctness_reward` names one of (a wrong name is
        refused). None at all is refused where AER is on: g(q) needs a correctness reward."""
        if not reward_func_names:
            if not self.on:
                return
            raise ValueError(
                "aer_correctness_reward: no reward functions were given (the rollout worker scores by itself): name "
                "the reward the worker records that defines correctness (metrics['rewards/<name>'])"
            )
        self.correctness_index = resolve_correctness_index(self.args.aer_correctness_reward, reward_func_names)
        self.correctness_name = reward_func_names[self.correctness_index]

    # ------------------------------------------------------------------------------------------------ 1. rollout
    def correct(self, rewards: torch.Tensor) -> torch.Tensor:
        """1/0 per completion from its correctness reward (≥ aer_correctness_threshold), NaN where it is unscored: the
        correctness rule of every AER trainer."""
        correct = (rewards >= self.args.aer_correctness_threshold).float()
        correct[torch.isnan(rewards)] = float("nan")  # unscorable completions are left out of g(q)
        return correct

    def correctness(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """`correct` of the correctness reward's column of a rollout batch's rewards (N, n_funcs)."""
        return self.correct(rewards_per_func[:, self.correctness_index])

    def coefficients(
        self, rewards_per_func: torch.Tensor, num_generations: int, metrics: dict, train: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """λ_i and each completion's difficulty bucket, for the rewards of every completion of a rollout batch
        (gathered over processes, whole groups of `num_generations` in order), with α as it is now. The rollout
        telemetry goes to `metrics` (TRL's dict of lists for the mode)."""
        g = group_accuracy(self.correctness(rewards_per_func), num_generations)
        lam = self.lambdas(g)
        if train:
            self.carried.ran.add("rollout")
        buckets = log_rollout(metrics, g, lam, self.args.aer_rho)  # where the entropy budget goes
        return lam, buckets

    def lambdas(self, g: torch.Tensor) -> torch.Tensor:
        """λ for group accuracies `g` (one per completion) with α as it is now (C1)."""
        args = self.args
        alpha = self.controller.alpha
        return difficulty_coefficients(
            g, alpha, args.aer_rho, args.aer_eps, difficulty_aware=args.aer_difficulty_aware
        )

    # ------------------------------------------------------------------------------------------------ 2. loss
    def bonus(self, entropies: torch.Tensor, mask: torch.Tensor, lam: torch.Tensor | None) -> torch.Tensor | None:
        """`mean_i(λ_i · H_i)` over the micro-batch's completions, with gradient through `entropies` (B, T), H_i
        the mean over the completion's trained tokens (`mask`), with the quantile and cap options; None where every
        λ is 0 (`lam` on the host: no device sync to tell)."""
        if lam is None or not bool((lam != 0).any()):
            return None
        seq_entropy = sequence_entropy(entropies, mask, self.args.aer_bonus_quantile)
        if self.args.aer_bonus_cap is not None and self.controller.target is not None:
            seq_entropy = capped_entropy(seq_entropy, self.args.aer_bonus_cap * self.controller.target)
        lam = lam.to(device=seq_entropy.device, dtype=seq_entropy.dtype, non_blocking=True)
        return (lam * seq_entropy).mean()

    def measure(self, entropies: torch.Tensor, mask: torch.Tensor, buckets: torch.Tensor | None) -> None:
        """Adds a trained micro-batch's entropy (no gradient) to the rollout batch's sums."""
        stats = entropy_sums(entropies, mask, buckets)
        self.entropy_stats = stats if self.entropy_stats is None else self.entropy_stats + stats

    # ------------------------------------------------------------------------------------------------ 3. controller
    def finish_iteration(
        self, reduce: Callable[[torch.Tensor], torch.Tensor], device, metrics: dict, callbacks: list
    ) -> float:
        """End of a rollout batch: the sums reduced over processes (`reduce`, a sum), the entropy telemetry logged,
        H_t handed to the controller's callback (which must be among the trainer's `callbacks`); returns H_t (NaN for
        a batch with no trained token)."""
        stats = self.entropy_stats
        if stats is None:
            stats = torch.zeros(2 + 2 * len(BUCKETS), device=device)
        stats = reduce(stats.to(device)).tolist()
        self.entropy_stats = None
        self.carried.ran.add("entropy")
        entropy = log_entropy(metrics, stats)
        if all(cb is not self.controller for cb in callbacks):
            raise RuntimeError("the trainer's AERCallback was removed from its callbacks: α could not move")
        self.controller.submit_entropy(entropy)
        return entropy

    # ------------------------------------------------------------------------------------------------ 4. logs
    def fill_logs(self, logs: dict, train_metrics: dict) -> None:
        """A training log's aer/* values: the last rollout batch's telemetry where this step had none, and the
        controller's α, H0 and H* as they are now."""
        self.carried.fill(logs, train_metrics)
        cb = self.controller
        logs["aer/alpha"] = cb.alpha
        if cb.initial_entropy is not None:
            logs["aer/initial_entropy"] = cb.initial_entropy
        if cb.target is not None:
            logs["aer/target_entropy"] = cb.target
