"""`AERAsyncGRPOConfig`: TRL's experimental `AsyncGRPOConfig` plus AER's fields (`aer_trl.config.AERArguments`), for
`AERAsyncGRPOTrainer`."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import ClassVar

with warnings.catch_warnings():  # TRL warns on every import from trl.experimental
    warnings.simplefilter("ignore")
    from trl.experimental.async_grpo import AsyncGRPOConfig

from .config import AERArguments
from .config_docs import ASYNC_GROUPS, documented


@documented(ASYNC_GROUPS)
@dataclass
class AERAsyncGRPOConfig(AERArguments, AsyncGRPOConfig):
    r"""
    Configuration for [`AERAsyncGRPOTrainer`]: every field of `trl.experimental.async_grpo.AsyncGRPOConfig` and AER's
    (`AERArguments`). Rollouts come from a worker that samples with a policy up to `max_staleness` versions old; AER's
    λ uses the group's correctness and the α in force when the sample is trained, and α moves once per optimizer step
    (docs/design.md, "AER under stale rollouts").
    """

    trainer_kind: ClassVar[str] = "async_grpo"
    trainer_name: ClassVar[str] = "AERAsyncGRPOTrainer"
    default_run_suffix: ClassVar[str] = "AER-AsyncGRPO"

    local_rollouts: bool = field(
        default=False,
        metadata={
            "help": "Sample with a copy of the policy in a background thread of this process "
            "(aer_trl.local_rollout.LocalRolloutWorker, transformers' forward, weights copied at every sync) instead "
            "of TRL's vLLM server: the CPU and test path. Ignored where a rollout_worker is passed to the trainer."
        },
    )
    aer_max_lag: int | None = field(
        default=None,
        metadata={
            "help": "Samples generated more than this many policy versions before they are trained enter neither "
            "the controller's entropy H_t nor the bonus (their policy-gradient term is TRL's, as always). None: every "
            "sample TRL trains on (up to max_staleness) enters both. aer/lag/<k>/* logs entropy, λ and counts by lag."
        },
    )
