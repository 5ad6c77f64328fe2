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

    def __post_init__(self):
        super().__post_init__()
        if self.aer_max_lag is not None and (isinstance(self.aer_max_lag, bool) or int(self.aer_max_lag) < 0):
            raise ValueError(f"aer_max_lag must be an integer >= 0 or None, got {self.aer_max_lag!r}")
        lag = self.local_rollout_lag
        if lag is None:
            return
        if isinstance(lag, bool) or not isinstance(lag, int) or not 1 <= lag <= self.max_staleness:
            raise ValueError(
                f"local_rollout_lag must be an integer from 1 (the data loader reads one micro-batch ahead) to "
                f"max_staleness ({self.max_staleness}; older samples are dropped), got {lag!r}"
            )
        for name, needed in (("token_budget", 0), ("weight_sync_steps", 1)):
            if getattr(self, name) != needed:
                raise ValueError(
                    f"local_rollout_lag needs {name}={needed} (the schedule counts one policy version per optimizer "
                    f"step of a fixed number of samples), got {name}={getattr(self, name)!r}"
                )
