"""`AERGRPOTrainer`: TRL's `GRPOTrainer` with the difficulty-weighted entropy bonus of AER (paper §4, docs/design.md).

The AER wiring it shares with the other TRL rollout trainers is `aer_trl.adapter.AERTrainerMixin` (over the AER
core, `aer_trl.core`); what is GRPO's own is the per-token baselines the paper compares AER with (Ent-Adv, Clip-Cov,
KL-Cov), which act on GRPO's per-token loss: their hook hands TRL's loss per-token advantages, and nothing of
`_compute_loss` is copied.
"""

from __future__ import annotations

import numpy as np
import torch
from trl import GRPOTrainer

from .adapter import AERTrainerMixin
from .config import AERGRPOConfig
from .families import family
from .methods import TokenBatch


class AERGRPOTrainer(AERTrainerMixin, GRPOTrainer):
    """GRPO with Adaptive Entropy Regularization. Same constructor as `trl.GRPOTrainer`; `args` is an `AERGRPOConfig`
    (a plain `trl.GRPOConfig` is converted, the AER fields at their defaults)."""

    config_class = AERGRPOConfig
    _tag_names = ["trl", family("grpo").tag, "aer", "aer_trl"]
    _name = "AER-GRPO"

    def __init__(self, model, reward_funcs=None, args: AERGRPOConfig | None = None, *pos_args, **kwargs):
        self._aer_draws: tuple[int, str, int] = (-1, "train", 0)  # (optimizer step, mode, hook calls in it so far)
        super().__init__(model, reward_funcs, args, *pos_args, **kwargs)

    def _token_generator(self) -> torch.Generator:
        """The CPU generator of one hook call's random draws (Clip-Cov's tokens): seeded from the run's seed, the
        process, the optimizer step, train or eval, and the call's place within that step, so it holds no state: a
        resumed run draws what the uninterrupted one draws, on any number of processes."""
        mode = "train" if self.model.training else "eval"
        step, last_mode, calls = self._aer_draws
        calls = calls + 1 if (step, last_mode) == (self.state.global_step, mode) else 1
        self._aer_draws = (self.state.global_step, mode, calls)
        key = [self.args.seed, self.accelerator.process_index, self.state.global_step, mode == "eval", calls]
        return torch.Generator().manual_seed(int(np.random.SeedSequence(key).generate_state(1)[0]))

    def _apply_token_method(self, logps, entropies, inputs: dict):
        """The method's per-token hook (Ent-Adv, Clip-Cov, KL-Cov, or a registered one): TRL's loss reads
        `inputs["advantages"]` right after this call, so the hook hands it per-token advantages and every other term
        of TRL's loss (KL, clipping, aggregation) is left as it is; nothing of `_compute_loss` is copied."""
        old = inputs.get("old_per_token_logps")
        batch = TokenBatch(
            advantages=inputs["advantages"],
            logps=logps,
            old_logps=logps.detach() if old is None else old,
            entropies=entropies,
            mask=self._trained_mask(inputs).to(logps.dtype),
            generator=self._token_generator(),
        )
        advantages, metrics = self._aer_method.token_hook(batch, self.args)
        mode = "train" if self.model.training else "eval"
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)
        inputs["advantages"] = advantages
        return logps
