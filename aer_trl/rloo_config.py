"""`AERRLOOConfig`: TRL's `RLOOConfig` plus AER's fields (`aer_trl.config.AERArguments`), for `AERRLOOTrainer`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trl import RLOOConfig

from .config import AERArguments
from .config_docs import documented_config
from .families import family


@documented_config()
@dataclass
class AERRLOOConfig(AERArguments, RLOOConfig):
    r"""
    Configuration for [`AERRLOOTrainer`]: every field of `trl.RLOOConfig` and AER's (`AERArguments`). RLOO's loss is
    per sequence (a clipped ratio of sequence log-probabilities times the leave-one-out advantage): the AER methods,
    Clip-Higher and plain RLOO (`method: rloo`) train on it; the per-token baselines and TRL's GRPO-only entropy
    options do not exist there and are refused by name.
    """

    trainer_kind: ClassVar[str] = "rloo"
    trainer_name: ClassVar[str] = family("rloo").trainer_name
    default_run_suffix: ClassVar[str] = "AER-RLOO"
