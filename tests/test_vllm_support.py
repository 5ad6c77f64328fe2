"""aer_trl.upstream.vllm_engine without vLLM: when the CPU fix applies, the KV-cache size, and defaults that never
override what a user set."""

import os
from types import SimpleNamespace

import pytest
import torch

from aer_trl.upstream import vllm_engine as vllm_support


def test_kv_cache_gib_hand_computed():
    # SmolLM2-135M: 30 layers, 3 KV heads of 64: K and V, bf16 → 2·30·3·64·2 = 23,040 bytes a token;
    # 100,000 tokens × 2 (headroom) = 4.29 GiB → 5
    config = SimpleNamespace(num_hidden_layers=30, num_key_value_heads=3, num_attention_heads=9, hidden_size=576)
    assert vllm_support.kv_cache_gib(config, tokens=100_000) == 5
    assert vllm_support.kv_cache_gib(config, tokens=10) == 1  # never below 1 GiB


def test_cpu_defaults_fill_only_what_is_unset(tmp_path, monkeypatch):
    config = SimpleNamespace(num_hidden_layers=2, num_attention_heads=2, hidden_size=64)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/mine")
    chosen = vllm_support.cpu_defaults(config, tokens=1000, run_dir=tmp_path)
    assert chosen == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    import os

    assert os.environ["VLLM_CACHE_ROOT"] == "/mine"


def test_the_fix_applies_only_to_colocated_vllm_on_cpu():
    on = SimpleNamespace(use_vllm=True, vllm_mode="colocate", use_cpu=True)
    assert vllm_support.colocate_on_cpu(on)
    assert not vllm_support.colocate_on_cpu(SimpleNamespace(use_vllm=True, vllm_mode="server", use_cpu=True))
    assert not vllm_support.colocate_on_cpu(SimpleNamespace(use_vllm=False, vllm_mode="colocate", use_cpu=True))


def test_kv_cache_gib_in_float32_is_twice_bf16():
    # SmolLM2-135M in float32: 46,080 bytes a token; 100,000 tokens × 2 = 8.58 GiB → 9
    config = SimpleNamespace(num_hidden_layers=30, num_key_value_heads=3, num_attention_heads=9, hidden_size=576)
    assert vllm_support.kv_cache_gib(config, tokens=100_000, dtype_bytes=4) == 9


def test_compute_dtype_is_the_mixed_precision_else_the_parameters():
    import torch

    fp32, half = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).to(torch.bfloat16)
    plain = SimpleNamespace(bf16=False, fp16=False)
    assert vllm_support.compute_dtype(fp32, plain) == "float32"
    assert vllm_support.compute_dtype(half, plain) == "bfloat16"  # loaded in bf16, no mixed precision
    assert vllm_support.compute_dtype(fp32, SimpleNamespace(bf16=True, fp16=False)) == "bfloat16"
    assert vllm_support.compute_dtype(fp32, SimpleNamespace(bf16=False, fp16=True)) == "float16"
    assert vllm_support.compute_dtype(torch.nn.Module(), plain) is None  # nothing to read it from


def test_the_colocated_engine_gets_the_trainers_dtype_eager_mode_on_the_cpu_and_expert_parallelism(monkeypatch):
    """TRL builds its engine without a dtype (tests/test_trl_seams.py pins that): the trainer's compute dtype is added,
    a dtype or a quantization already given is kept; on the CPU the engine is eager (vLLM-cpu's torch.compile at every
    engine start costs minutes), an `enforce_eager` already given is kept, and on CUDA or in server mode nothing is
    added; the CPU engine loads through this package's loader (weights a sync can reach: `make test-vllm` runs it),
    unless the user chose a load format; `vllm_enable_expert_parallel` adds vLLM's flag."""
    import torch

    kwargs = vllm_support.colocated_engine_kwargs
    monkeypatch.setattr(vllm_support, "updatable_cpu_loader", lambda: "aer_updatable_cpu")  # registers with vLLM
    fp32 = torch.nn.Linear(2, 2)
    cpu = SimpleNamespace(bf16=False, fp16=False, use_vllm=True, vllm_mode="colocate", use_cpu=True)
    on_cpu = {"enforce_eager": True, "load_format": "aer_updatable_cpu"}
    assert kwargs({"model": "m"}, fp32, cpu) == {"model": "m", "dtype": "float32", **on_cpu}
    given = {"model": "m", "dtype": "float16", "enforce_eager": False, "load_format": "safetensors"}
    assert kwargs(given, fp32, cpu) == given
    quantized = {"quantization": "bitsandbytes"}
    assert kwargs(quantized, fp32, cpu) == {**quantized, **on_cpu}
    server = SimpleNamespace(**{**vars(cpu), "vllm_mode": "server"})
    assert kwargs({}, fp32, server) == {"dtype": "float32"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cuda = SimpleNamespace(**{**vars(cpu), "use_cpu": False, "bf16": True})
    assert kwargs({}, fp32, cuda) == {"dtype": "bfloat16"}
    expert_parallel = SimpleNamespace(**vars(cuda), vllm_enable_expert_parallel=True)
    assert kwargs({}, fp32, expert_parallel) == {"dtype": "bfloat16", "enable_expert_parallel": True}
    assert kwargs({}, torch.nn.Module(), SimpleNamespace(bf16=False, fp16=False)) == {}  # no dtype to read


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_aer_trainers_build_trls_colocated_engine_through_trls_own_code(kind, tmp_path, monkeypatch, tokenizer):
    """GRPO and RLOO build `AERVLLMGeneration` where TRL builds its `VLLMGeneration`: TRL's `_init_vllm` runs (its
    keywords reach the engine) with the trainer's added; TRL's module keeps its own names (a stand-in `vllm` here)."""
    import sys
    import types

    from trl.generation import vllm_generation

    from aer_trl.upstream.trl_vllm import AERVLLMGeneration
    from tests import helpers

    built = []
    fake_vllm = types.ModuleType("vllm")
    fake_vllm.LLM = lambda **kw: built.append(kw) or SimpleNamespace(sleep=None)
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda: True)  # the test's stand-in: no vLLM here
    monkeypatch.setattr(vllm_support, "installed_version", lambda: "0.31.0")
    monkeypatch.setattr(vllm_support, "updatable_cpu_loader", lambda: "aer_updatable_cpu")  # registers with vLLM
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, os.environ.get(name, "0" if "RANK" in name else "1"))  # TRL sets them; restored
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29517")
    before = dict(vars(vllm_generation))
    config_class = {"grpo": helpers.AERGRPOConfig, "rloo": helpers.AERRLOOConfig}[kind]
    beta = {"rloo": {"beta": 0.0}}.get(kind, {})  # RLOO's KL term loads a reference model by the model's path
    args = helpers.make_config(tmp_path, config_class, use_vllm=True, vllm_mode="colocate", **beta)
    trainer = helpers.make_trainer(tokenizer, args)
    assert type(trainer.vllm_generation) is AERVLLMGeneration
    assert built[0]["distributed_executor_backend"] == "external_launcher"  # TRL's keywords
    assert (built[0]["dtype"], built[0]["enforce_eager"], built[0]["load_format"]) == (
        "float32",
        True,
        "aer_updatable_cpu",
    )  # the trainer's
    assert vars(vllm_generation) == before and "LLM" not in vars(vllm_generation)


def test_a_cpu_sync_runs_trls_sync_inside_vllms_reload_path_with_each_moe_kernel_rebuilt(monkeypatch):
    """On the CPU, `AERVLLMGeneration.sync_weights` drops each unquantized MoE layer's kernel (so vLLM's reload
    rebuilds it as on the first load), opens vLLM's reload path, runs TRL's sync, and closes the path; on CUDA it is
    TRL's sync alone. vLLM is a stand-in here (`make test-vllm` runs the real one)."""
    import sys
    import types

    from trl.generation import vllm_generation

    from aer_trl.upstream.trl_vllm import AERVLLMGeneration

    events = []

    class UnquantizedFusedMoEMethod:
        moe_kernel = "kernel"

    moe = types.ModuleType("moe")
    moe.UnquantizedFusedMoEMethod = UnquantizedFusedMoEMethod
    reload = types.ModuleType("reload")
    reload.initialize_layerwise_reload = lambda model: events.append("open")
    reload.finalize_layerwise_reload = lambda model, config: events.append("close")
    monkeypatch.setattr(vllm_support, "cpu_kernels_read_weights", lambda model: events.append("embeddings"))
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method", moe)
    monkeypatch.setitem(sys.modules, "vllm.model_executor.model_loader.reload", reload)
    experts = torch.nn.Module()
    experts.quant_method = UnquantizedFusedMoEMethod()
    served = torch.nn.Sequential(experts, torch.nn.Linear(2, 2))
    runner = SimpleNamespace(get_model=lambda: served, model_config=None)
    llm = SimpleNamespace(llm_engine=SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
        model_runner=runner))))  # fmt: skip
    monkeypatch.setattr(vllm_generation.VLLMGeneration, "sync_weights", lambda self: events.append("trl sync"))
    generation = AERVLLMGeneration.__new__(AERVLLMGeneration)  # the engine itself is not built here
    generation.mode, generation.llm = "colocate", llm
    generation.aer_args = SimpleNamespace(use_vllm=True, vllm_mode="colocate", use_cpu=True)
    generation.sync_weights()
    assert events == ["open", "trl sync", "close", "embeddings"] and experts.quant_method.moe_kernel is None
    events.clear()
    generation.aer_args.use_cpu = False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    generation.sync_weights()
    assert events == ["trl sync"]


def test_the_harness_engine_samples_in_the_dtype_its_store_records(tmp_path, monkeypatch, tokenizer):
    """The evaluation store records `sampling_dtype(device)` (float32 on CPU) with every sample: the harness's vLLM
    engine is built in that dtype, not in the bfloat16 vLLM picks by itself for a float32 model."""
    import sys
    import types

    from aer_trl.app.evaluation.backends import VLLMGenerator, sampling_dtype
    from aer_trl.app.evaluation.plan import run_fingerprint
    from tests import helpers

    helpers.make_model(tokenizer).save_pretrained(tmp_path / "model")
    built = []
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=lambda **kw: built.append(kw) or "engine"))
    monkeypatch.setattr(vllm_support, "installed_version", lambda: "0.31.0")
    args = SimpleNamespace(batch_size=2, num_samples=2, max_new_tokens=4, output_dir=str(tmp_path), seed=0,
                           model_revision=None, top_p=1.0, top_k=0, temperature=1.0)  # fmt: skip
    assert VLLMGenerator._engine(str(tmp_path / "model"), args) == "engine"
    assert built[0]["dtype"] == sampling_dtype("cpu") == run_fingerprint(args, "m", "vllm")["dtype"] == "float32"


def test_the_drift_guard_limit_follows_the_compute_dtype_unless_set():
    import torch

    guard = vllm_support.EngineDriftGuard.for_trainer
    model = torch.nn.Linear(2, 2)
    args = dict(use_vllm=True, bf16=False, fp16=False, vllm_logp_gap_limit=None)
    assert guard(model, SimpleNamespace(**args)).limit == 1e-3  # float32 parameters, no mixed precision
    assert guard(model, SimpleNamespace(**{**args, "bf16": True})).limit == 0.1
    assert guard(model, SimpleNamespace(**{**args, "vllm_logp_gap_limit": 0.3})).limit == 0.3
    assert guard(model, SimpleNamespace(**{**args, "vllm_logp_gap_limit": float("inf")})).limit is None
    assert guard(model, SimpleNamespace(**{**args, "use_vllm": False})).limit is None  # no engine to guard


def test_the_drift_guard_judges_only_the_gap_this_rollout_batch_measured():
    import pytest

    key = vllm_support.EngineDriftGuard.KEY
    guard = vllm_support.EngineDriftGuard(1e-3)
    metrics = {key: [0.5]}  # an earlier batch's value (already judged): not this batch's
    guard.before(metrics)
    guard.after(metrics, step=3)  # TRL measured nothing this time (importance-sampling correction off): no verdict
    guard.before(metrics)
    metrics[key].append(9e-4)
    guard.after(metrics, step=4)  # below the limit
    guard.before(metrics)
    metrics[key].append(2e-3)
    with pytest.raises(
        vllm_support.EngineDriftError, match=r"0\.002 nats .* step 5\), above vllm_logp_gap_limit=0\.001"
    ):
        guard.after(metrics, step=5)
    vllm_support.EngineDriftGuard(None).after(metrics, step=5)  # no limit: never stops


def test_the_drift_guard_setting_is_checked_where_the_config_is_built(tmp_path):
    import pytest

    from aer_trl import AERGRPOConfig

    for bad in (0, -1.0, float("nan"), "x"):
        with pytest.raises(ValueError, match="vllm_logp_gap_limit must be a number of nats > 0"):
            AERGRPOConfig(str(tmp_path), use_cpu=True, bf16=False, vllm_logp_gap_limit=bad)
    assert AERGRPOConfig(str(tmp_path), use_cpu=True, bf16=False, vllm_logp_gap_limit=float("inf"))


def test_expert_parallel_reaches_the_server():
    """`vllm_enable_expert_parallel` in server mode: `trl vllm-serve` forwards arguments it does not know to `vllm
    serve`, vLLM's own flag included (colocated: the test above)."""
    from trl.scripts import vllm_serve

    parser = vllm_serve.make_parser()
    script_args, extra = parser.parse_args_and_config(
        args=["--model", "Qwen/Qwen3-30B-A3B-Base", "--data_parallel_size", "4", "--enable-expert-parallel"],
        return_remaining_strings=True,
    )
    command = vllm_serve.build_command(script_args, extra)
    assert "--enable-expert-parallel" in command and command[command.index("--data-parallel-size") + 1] == "4"


def test_the_embeddings_compute_with_their_kept_weight_after_vllms_processing():
    """`cpu_kernels_read_weights`: a layer with a kernel choice (`cpu_linear`) and a 2-D weight computes with F.linear
    on that weight (what a sync writes); a 3-D expert weight, a meta weight and a layer without `cpu_linear` are left
    to vLLM."""
    packed = object()

    def layer(weight, kernel=True):
        module = torch.nn.Module()
        module.weight = torch.nn.Parameter(weight, requires_grad=False)
        if kernel:
            module.cpu_linear = packed
        return module

    head, experts = layer(torch.ones(4, 2)), layer(torch.ones(2, 4, 2))
    meta, plain = layer(torch.empty(4, 2, device="meta")), layer(torch.ones(4, 2), kernel=False)
    vllm_support.cpu_kernels_read_weights(torch.nn.Sequential(head, experts, meta, plain))
    assert head.cpu_linear is torch.nn.functional.linear
    assert experts.cpu_linear is packed and meta.cpu_linear is packed and not hasattr(plain, "cpu_linear")


def test_server_mode_is_trls_own_engine_and_sync(monkeypatch):
    """In server mode `AERVLLMGeneration` adds nothing: TRL's `_init_vllm` (the client) and TRL's `sync_weights` run
    as they are, on the CPU too (the server's `--dtype` decides its precision, docs/gpu.md)."""
    from trl.generation import vllm_generation

    from aer_trl.upstream.trl_vllm import AERVLLMGeneration

    calls = []
    monkeypatch.setattr(vllm_generation.VLLMGeneration, "_init_vllm", lambda self: calls.append("trl init"))
    monkeypatch.setattr(vllm_generation.VLLMGeneration, "sync_weights", lambda self: calls.append("trl sync"))
    generation = AERVLLMGeneration.__new__(AERVLLMGeneration)
    generation.mode = "server"
    generation.aer_args = SimpleNamespace(use_vllm=True, vllm_mode="server", use_cpu=True)
    generation._init_vllm()
    generation.sync_weights()
    assert calls == ["trl init", "trl sync"]
