"""Validation during training through the run's own vLLM engine (`eval_engine: vllm`, the default when the run
rolls out with vLLM): the paper samples its rollouts and its evaluation with one engine, and transformers' `generate`
under ZeRO-3 gathers every layer for every token (docs/gpu.md). `engine_sampler(trainer, args)` returns a generator
with the evaluation harness's contract, `generator(texts, seed) -> n samples per prompt`, after bringing the engine's
weights to the policy being validated:

- colocate: each process samples its own chunks on its engine (`lockstep = False`); with sleep mode the KV cache is
  woken at the first chunk and the engine put back to sleep by `close()` after the last, as TRL's rollout leaves it.
- server: the main process samples every chunk through TRL's `VLLMClient` (`main_only = True`); the callback gathers
  the counts.

It reads TRL's `vllm_generation` (mode, engine, client, sleep state) and `_last_loaded_step`, pinned by
tests/test_trl_seams.py.
"""

from __future__ import annotations

from .backends import VLLMGenerator, prompt_ids, request_seed, vllm_sampling


def sync_engine_weights(trainer) -> None:
    """The engine's weights to the policy at this step (every process calls it: under ZeRO-3 it gathers the shards).
    TRL syncs only before a rollout, so after an optimizer step the engine still holds the previous policy."""
    generation = trainer.vllm_generation
    sleeping = generation.mode == "colocate" and generation.enable_sleep_mode and generation._llm_weights_sleeping
    if trainer.state.global_step != trainer._last_loaded_step or sleeping:
        generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step


class ColocatedSampler(VLLMGenerator):
    """The harness's vLLM sampling on the run's colocated engine. With sleep mode, its KV cache is woken at the first
    chunk and the engine put back to sleep once, by `close()` after the last: a level-2 sleep discards the weights,
    so sleeping between chunks would leave the next chunk waking its cache over unmapped weights (CUDA's "invalid
    argument" in vLLM's `wake_up`), and waking the weights again would need the ZeRO-3 gather that
    only `sync_engine_weights` does on every process together."""

    def __init__(self, generation, args):
        super().__init__(generation.llm, args)
        self.generation = generation
        self.sleep = generation.enable_sleep_mode
        self.cache_awake = self.closed = False

    def __call__(self, texts: list[str], seed: int) -> list[list[str]]:
        if self.closed:
            raise RuntimeError("this validation's engine sampler was closed (the engine sleeps): make a new one")
        if self.sleep and not self.cache_awake:
            self.llm.wake_up(tags=["kv_cache"])
            self.cache_awake = True
        return super().__call__(texts, seed)

    def close(self) -> None:
        """After the validation's last chunk (every process, chunks or none): the engine back to sleep, as TRL
        leaves it after a rollout, its weights marked for TRL's next sync."""
        if self.sleep and not self.closed:
            self.llm.sleep(level=2)
            self.generation._llm_weights_sleeping = True
        self.closed = True


class ServerSampler:
    """Sampling through TRL's vLLM server client, on the main process only (the server is one engine)."""

    lockstep, main_only = False, True

    def __init__(self, client, tokenizer, args):
        self.client, self.tokenizer, self.args = client, tokenizer, args

    def __call__(self, texts: list[str], seed: int) -> list[list[str]]:
        sampling = vllm_sampling(self.args)
        samples = []
        for i, ids in enumerate(prompt_ids(self.tokenizer, texts)):  # one request per prompt: its own seed
            out = self.client.generate(
                prompts=[ids],
                n=sampling["n"],
                temperature=sampling["temperature"],
                top_p=sampling["top_p"],
                top_k=max(sampling["top_k"], 0),
                max_tokens=sampling["max_tokens"],
                generation_kwargs={"seed": request_seed(seed, i)},
            )
            samples.append(self.tokenizer.batch_decode(out["completion_ids"], skip_special_tokens=True))
        return samples


def engine_sampler(trainer, args):
    """The validation generator on `trainer`'s vLLM engine, its weights synced (call it on every process)."""
    if not getattr(trainer, "use_vllm", False):
        raise ValueError("eval_engine 'vllm' needs a run that rolls out with vLLM (use_vllm: true)")
    generation = trainer.vllm_generation
    if generation.mode == "colocate" and getattr(generation, "tensor_parallel_size", 1) > 1:
        raise ValueError(
            "eval_engine 'vllm' with vllm_tensor_parallel_size > 1 is not supported (the ranks of a tensor-parallel "
            "group would have to sample the same chunks together): set eval_engine: transformers with a small "
            "eval_max_new_tokens, or evaluate the saved checkpoints with recipes/evaluate.py"
        )
    sync_engine_weights(trainer)
    if generation.mode == "server":
        return ServerSampler(getattr(generation, "vllm_client", None), trainer.processing_class, args)  # main only
    return ColocatedSampler(generation, args)
