"""aer_trl.vllm_support without vLLM: when the CPU fix applies, the KV-cache size, and defaults that never override
what a user set."""

from types import SimpleNamespace

from aer_trl import vllm_support


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
