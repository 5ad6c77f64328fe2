"""aer_trl.engine without vLLM: validation on a colocated engine in sleep mode, against a stub engine that behaves
like vLLM's sleep allocator (a level-2 sleep discards weights and cache; waking the cache over sleeping weights
fails, as `wake_up` did on an H100 with CUDA's "invalid argument")."""

import sys
import types
from types import SimpleNamespace

import pytest

from aer_trl.engine import ColocatedSampler


class SleepyEngine:
    def __init__(self):
        self.weights = self.cache = True
        self.log = []

    def sleep(self, level):
        assert level == 2
        self.weights = self.cache = False
        self.log.append("sleep")

    def wake_up(self, tags):
        if "kv_cache" in tags and not self.weights:
            raise RuntimeError("CUDA error: invalid argument (restoring buffers into sleeping weights)")
        self.weights |= "weights" in tags
        self.cache |= "kv_cache" in tags
        self.log.append("wake " + ",".join(tags))

    def generate(self, texts, params, use_tqdm=False):
        assert self.weights and self.cache, "generate on a sleeping engine"
        self.log.append(f"generate {len(texts)}")
        return [SimpleNamespace(outputs=[SimpleNamespace(text="\\boxed{4}")] * p.n) for p in params]


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = lambda **kw: SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", module)


def eval_args(**kw):
    return SimpleNamespace(num_samples=2, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8, **kw)


def after_rollout_and_sync(engine):
    """TRL's state when validation starts: the rollout slept the engine, `sync_engine_weights` woke its weights."""
    engine.sleep(2)
    engine.wake_up(["weights"])
    return SimpleNamespace(llm=engine, enable_sleep_mode=True, _llm_weights_sleeping=False)


def test_sleep_mode_wakes_the_cache_once_and_sleeps_after_the_last_chunk(fake_vllm):
    engine = SleepyEngine()
    generation = after_rollout_and_sync(engine)
    sampler = ColocatedSampler(generation, eval_args())
    for _ in range(3):  # three chunks: the second one crashed when each call slept the engine
        assert sampler(["1+3?", "2+2?"], seed=0) == [["\\boxed{4}"] * 2] * 2
    assert not generation._llm_weights_sleeping
    sampler.close()
    sampler.close()  # idempotent
    assert engine.log[2:] == ["wake kv_cache", "generate 2", "generate 2", "generate 2", "sleep"]
    assert generation._llm_weights_sleeping  # TRL's next rollout syncs the weights again
    with pytest.raises(RuntimeError, match="closed"):
        sampler(["1+3?"], seed=0)


def test_a_process_without_chunks_still_puts_its_engine_back_to_sleep(fake_vllm):
    engine = SleepyEngine()
    generation = after_rollout_and_sync(engine)
    ColocatedSampler(generation, eval_args()).close()
    assert engine.log[-1] == "sleep" and not engine.weights and generation._llm_weights_sleeping


def test_without_sleep_mode_the_engine_is_never_slept(fake_vllm):
    engine = SleepyEngine()
    generation = SimpleNamespace(llm=engine, enable_sleep_mode=False, _llm_weights_sleeping=False)
    sampler = ColocatedSampler(generation, eval_args())
    sampler(["1+3?"], seed=0)
    sampler.close()
    assert engine.log == ["generate 1"]
