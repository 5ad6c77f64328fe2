"""TRL's colocated vLLM engine as AER's GRPO and RLOO trainers need it: `AERVLLMGeneration`, a subclass of TRL's
`trl.generation.vllm_generation.VLLMGeneration`, which TRL's trainer constructor builds in place of its own
(`constructor_with_engine`: the constructor run with its module-level name `VLLMGeneration` bound to the subclass,
`upstream.rebind.with_names`; TRL's module is left as it is).

- The engine is built by TRL's own `_init_vllm`, with the name `LLM` bound to a builder that adds the trainer's
  compute dtype, expert parallelism and, on the CPU, eager mode and a load format whose weights a sync can reach to
  TRL's keywords (`vllm_engine.colocated_engine_kwargs`, whose docstring says why each).
- On the CPU, every `sync_weights` runs TRL's own sync inside vLLM's reload path (`vllm_engine.reloaded_on_cpu`), so
  a synced weight reaches the CPU kernels (dense and mixture-of-experts).

The upstream changes that would retire it (docs/upstream.md #9, #10): `VLLMGeneration` taking the engine's keywords
from the config (`vllm_dtype`, `vllm_enable_expert_parallel`, `vllm_enforce_eager`, or a `vllm_engine_kwargs` dict)
and syncing a colocated engine with `model_runner.reload_weights(weights_iterator=..., is_checkpoint_format=True)`;
and a `vllm_generation_class` attribute on GRPO's and RLOO's trainers, in place of the rebound name.
"""

from __future__ import annotations

import functools

from trl.generation.vllm_generation import VLLMGeneration

from .rebind import with_names
from .vllm_engine import colocate_on_cpu, colocated_engine_kwargs, prepare_vllm_on_cpu, reloaded_on_cpu


class AERVLLMGeneration(VLLMGeneration):
    """TRL's `VLLMGeneration` with the trainer's config (`aer_args`): the colocated engine built in the trainer's
    dtype (expert-parallel and eager where the config says so), and on the CPU each weight sync through vLLM's reload
    path. Server mode is TRL's, unchanged."""

    def __init__(self, *args, aer_args, **kwargs):
        self.aer_args = aer_args
        super().__init__(*args, **kwargs)

    def _init_vllm(self):
        if self.mode != "colocate":
            return super()._init_vllm()
        if colocate_on_cpu(self.aer_args):
            prepare_vllm_on_cpu(self.model, self.aer_args)  # the version check, the KV cache, a cache folder
        return with_names(VLLMGeneration._init_vllm, LLM=self._build_engine)(self)  # TRL's code, our builder

    def _build_engine(self, *args, **kwargs):
        """vLLM's `LLM`, given TRL's keywords plus the trainer's (`colocated_engine_kwargs`)."""
        from vllm import LLM

        return LLM(*args, **colocated_engine_kwargs(kwargs, self.model, self.aer_args))

    def sync_weights(self):
        if self.mode == "colocate" and colocate_on_cpu(self.aer_args):
            with reloaded_on_cpu(self.llm):  # the reload path reprocesses each layer for vLLM's CPU kernels
                return super().sync_weights()
        return super().sync_weights()


def constructor_with_engine(trl_init, args):
    """`trl_init` (GRPO's or RLOO's `__init__`) building `AERVLLMGeneration` with `args` where TRL builds its own
    `VLLMGeneration` (the name is pinned by tests/test_trl_seams.py)."""
    return with_names(trl_init, VLLMGeneration=functools.partial(AERVLLMGeneration, aer_args=args))
