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
from .config_docs import ASYNC_GROUPS, documented_config
from .families import family


@documented_config(ASYNC_GROUPS)
@dataclass
class AERAsyncGRPOConfig(AERArguments, AsyncGRPOConfig):
    r"""
    Configuration for [`AERAsyncGRPOTrainer`]: every field of `trl.experimental.async_grpo.AsyncGRPOConfig` and AER's
    (`AERArguments`). Rollouts come from a worker that samples with a policy up to `max_staleness` versions old; AER's
    λ uses the group's correctness and the α in force when the sample is trained, and α moves once per optimizer step
    (docs/design.md, "AER under stale rollouts").
    """

    trainer_kind: ClassVar[str] = "async_grpo"
    trainer_name: ClassVar[str] = family("async_grpo").trainer_name
    default_run_suffix: ClassVar[str] = "AER-AsyncGRPO"

    local_rollouts: bool = field(
        default=False,
        metadata={
            "help": "Sample with a copy of the policy in a background thread of this process (aer_trl.upstream."
            "local_rollout.LocalRolloutWorker, transformers' forward, weights copied at every sync) instead "
            "of TRL's vLLM server: the CPU and test path. It samples at `temperature` without tools: the vLLM "
            "worker's other sampling settings (top_p, top_k, min_p, repetition_penalty, ...) are refused with it, and "
            "so is a rollout_worker passed to the trainer."
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
    local_rollout_lag: int | None = field(
        default=None,
        metadata={
            "help": "The local rollout worker's lockstep schedule: each group is sampled by the policy exactly this "
            "many versions older than the one that trains it (fewer in the first steps), the worker waiting for that "
            "version and each weight sync for the worker. A run is then a function of its settings (no thread "
            "timing), and a checkpoint keeps its sampled, untrained groups, so a resumed run is the uninterrupted "
            "one. An integer from 1 to max_staleness; needs token_budget 0, weight_sync_steps 1 and "
            "per_device_train_batch_size x gradient_accumulation_steps x processes a multiple of num_generations. "
            "None: the worker samples as fast as it can (staleness as the threads' timing makes it)."
        },
    )
