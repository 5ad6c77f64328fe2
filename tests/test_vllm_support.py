"""aer_trl.upstream.vllm_engine without vLLM: when the CPU fix applies, the KV-cache size, and defaults that never
override what a user set."""

from types import SimpleNamespace

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


def test_the_colocated_engine_is_built_in_the_trainers_dtype(monkeypatch):
    """TRL builds its engine as `vllm_generation.LLM(...)` without a dtype (tests/test_trl_seams.py pins that); inside
    `colocated_engine_settings` it gets the trainer's, read when the engine is built; a dtype or a quantization already
    given is kept; afterwards the name is TRL's again."""
    import torch
    from trl.generation import vllm_generation

    built = []
    fake = lambda **kwargs: built.append(kwargs) or "engine"  # noqa: E731
    monkeypatch.setattr(vllm_generation, "LLM", fake, raising=False)
    trainer = SimpleNamespace(model=None, args=SimpleNamespace(bf16=False, fp16=False))
    with vllm_support.colocated_engine_settings(trainer):
        trainer.model = torch.nn.Linear(2, 2)  # TRL loads the model before it builds the engine
        assert vllm_generation.LLM(model="m") == "engine"
        vllm_generation.LLM(model="m", dtype="float16")
        vllm_generation.LLM(model="m", quantization="bitsandbytes")
    assert built == [
        {"model": "m", "dtype": "float32"},
        {"model": "m", "dtype": "float16"},
        {"model": "m", "quantization": "bitsandbytes"},
    ]
    assert vllm_generation.LLM is fake


def test_the_colocated_engine_is_eager_on_the_cpu_and_compiled_on_cuda(monkeypatch):
    """On the CPU the colocated engine is built with `enforce_eager=True` (vLLM-cpu's torch.compile at every engine
    start costs minutes); an `enforce_eager` already given is kept; on CUDA, and in server mode, nothing is added."""
    import torch
    from trl.generation import vllm_generation

    built = []
    monkeypatch.setattr(vllm_generation, "LLM", lambda **kwargs: built.append(kwargs), raising=False)
    model = torch.nn.Linear(2, 2)
    cpu = SimpleNamespace(bf16=False, fp16=False, use_vllm=True, vllm_mode="colocate", use_cpu=True)
    with vllm_support.colocated_engine_settings(SimpleNamespace(model=model, args=cpu)):
        vllm_generation.LLM(model="m")
        vllm_generation.LLM(model="m", enforce_eager=False)
    server = SimpleNamespace(**{**vars(cpu), "vllm_mode": "server"})
    with vllm_support.colocated_engine_settings(SimpleNamespace(model=model, args=server)):
        vllm_generation.LLM(model="m")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cuda = SimpleNamespace(**{**vars(cpu), "use_cpu": False, "bf16": True})
    with vllm_support.colocated_engine_settings(SimpleNamespace(model=model, args=cuda)):
        vllm_generation.LLM(model="m")
    assert built == [
        {"model": "m", "dtype": "float32", "enforce_eager": True},
        {"model": "m", "dtype": "float32", "enforce_eager": False},
        {"model": "m", "dtype": "float32"},
        {"model": "m", "dtype": "bfloat16"},
    ]


def test_the_cpu_weight_fix_is_in_place_only_while_the_engine_is_built(monkeypatch):
    """vLLM's CPU gemm dispatch is replaced while TRL builds the colocated engine on the CPU and is vLLM's own again
    after (no process-wide patch left behind); on CUDA it is never touched."""
    import sys
    import types

    import torch
    from trl.generation import vllm_generation

    def original(layer, remove_weight):
        layer.packed = True

    utils = types.SimpleNamespace(dispatch_cpu_unquantized_gemm=original)
    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.layers"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setattr(sys.modules["vllm.model_executor.layers"], "utils", utils, raising=False)
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.utils", utils)
    layers = []

    def build(**kwargs):  # what vLLM's loader does to each linear layer while the engine is built
        layer = types.SimpleNamespace(weight=torch.zeros(2, 2))
        utils.dispatch_cpu_unquantized_gemm(layer, True)
        layers.append(layer)

    monkeypatch.setattr(vllm_generation, "LLM", build, raising=False)
    model = torch.nn.Linear(2, 2)
    cpu = SimpleNamespace(bf16=False, fp16=False, use_vllm=True, vllm_mode="colocate", use_cpu=True)
    with vllm_support.colocated_engine_settings(SimpleNamespace(model=model, args=cpu)):
        vllm_generation.LLM(model="m")
        assert utils.dispatch_cpu_unquantized_gemm is original  # only around the build itself
    assert layers[0].cpu_linear is torch.nn.functional.linear and not hasattr(layers[0], "packed")
    assert utils.dispatch_cpu_unquantized_gemm is original
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cuda = SimpleNamespace(**{**vars(cpu), "use_cpu": False})
    with vllm_support.colocated_engine_settings(SimpleNamespace(model=model, args=cuda)):
        vllm_generation.LLM(model="m")
    assert layers[1].packed and not hasattr(layers[1], "cpu_linear")


def test_without_vllm_the_engine_dtype_changes_nothing(monkeypatch):
    from trl.generation import vllm_generation

    monkeypatch.delattr(vllm_generation, "LLM", raising=False)
    with vllm_support.colocated_engine_settings(SimpleNamespace(model=None, args=None)):
        assert not hasattr(vllm_generation, "LLM")


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


def test_expert_parallel_reaches_the_colocated_engine_and_the_server(monkeypatch):
    """`vllm_enable_expert_parallel` in colocate mode: TRL builds the engine without the argument; the trainer's
    setting adds it. Server mode: `trl vllm-serve` forwards arguments it does not know to `vllm serve`, vLLM's own
    flag included."""
    import torch
    from trl.generation import vllm_generation
    from trl.scripts import vllm_serve

    built = []
    monkeypatch.setattr(vllm_generation, "LLM", lambda **kwargs: built.append(kwargs), raising=False)
    for on in (True, False):
        args = SimpleNamespace(bf16=True, fp16=False, vllm_enable_expert_parallel=on)
        with vllm_support.colocated_engine_settings(SimpleNamespace(model=torch.nn.Linear(2, 2), args=args)):
            vllm_generation.LLM(model="m")
    assert [b.get("enable_expert_parallel") for b in built] == [True, None]
    parser = vllm_serve.make_parser()
    script_args, extra = parser.parse_args_and_config(
        args=["--model", "Qwen/Qwen3-30B-A3B-Base", "--data_parallel_size", "4", "--enable-expert-parallel"],
        return_remaining_strings=True,
    )
    command = vllm_serve.build_command(script_args, extra)
    assert "--enable-expert-parallel" in command and command[command.index("--data-parallel-size") + 1] == "4"
