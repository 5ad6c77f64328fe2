"""`AERRLOOTrainer`: TRL's `RLOOTrainer` with AER's difficulty-weighted entropy bonus, on RLOO's own loss, untouched.

RLOO has the same private seams as GRPO (`_calculate_rewards`, `_generate_and_score_completions`,
`_get_per_token_logps_and_entropies`, `compute_loss`), so the adapter is the shared `AERTrainerMixin` with RLOO's
config: λ from each group's correctness (C1), the bonus `mean_i(λ_i · H_i)` from the entropies RLOO's fused head
computes inside its loss, and α moved once per rollout batch (C2 + C3). RLOO returns its loss unscaled (transformers
divides it by the accumulation steps), and so does the bonus. Its loss is per sequence: the per-token baselines do
not exist here and `AERRLOOConfig` refuses them by name.
"""

from __future__ import annotations

from trl import RLOOTrainer

from .adapter import AERTrainerMixin
from .families import family
from .rloo_config import AERRLOOConfig


class AERRLOOTrainer(AERTrainerMixin, RLOOTrainer):
    """RLOO with Adaptive Entropy Regularization. Same constructor as `trl.RLOOTrainer`; `args` is an `AERRLOOConfig`
    (a plain `trl.RLOOConfig` is converted, the AER fields at their defaults)."""

    config_class = AERRLOOConfig
    _tag_names = ["trl", family("rloo").tag, "aer", "aer_trl"]
    _name = "AER-RLOO"
