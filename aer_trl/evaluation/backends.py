"""Where samples come from: `transformers` (CPU or GPU) or vLLM (GPU). A generator takes one chunk of prompts and a
seed and returns n samples per prompt: `generator(texts, seed) -> list[list[str]]`, a function of its arguments."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import torch

from .sampling import sample_chunk

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


def load_tokenizer(model: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model)
    except OSError as e:
        raise FileNotFoundError(
            f"models: could not load {model!r} as a local folder or a Hub model reachable from here: {e}"
        ) from e


class TransformersGenerator:
    """Sampling with `transformers`: one `generate` call per chunk, prompts prefilled once (`sample_chunk`)."""

    def __init__(self, model, tokenizer, args):
        self.model, self.tokenizer, self.args = model, tokenizer, args
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @classmethod
    def from_pretrained(cls, model_name: str, args) -> TransformersGenerator:
        from transformers import AutoModelForCausalLM

        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = AutoModelForCausalLM.from_pretrained(model_name, dtype=sampling_dtype(device)).to(device).eval()
        return cls(model, load_tokenizer(model_name), args)

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
        )


class VLLMGenerator:  # pragma: no cover - needs a CUDA GPU
    @classmethod
    def from_pretrained(cls, model_name: str, args) -> VLLMGenerator:
        return cls(model_name, args)

    def __init__(self, model_name: str, args):
        from vllm import LLM

        self.args = args
        self.llm = LLM(model=model_name, revision=args.model_revision, seed=args.seed, enable_prefix_caching=True)

    def __call__(self, texts: list[str], seed: int) -> list[list[str]]:
        from vllm import SamplingParams

        params = [
            SamplingParams(
                n=self.args.num_samples,
                temperature=self.args.temperature,
                top_p=self.args.top_p,
                top_k=self.args.top_k or -1,
                max_tokens=self.args.max_new_tokens,
                seed=int(hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()[:8], 16),
            )
            for i in range(len(texts))
        ]
        outputs = self.llm.generate(texts, params, use_tqdm=False)
        return [[o.text for o in out.outputs] for out in outputs]


def default_factory(backend: str):
    return (VLLMGenerator if backend == "vllm" else TransformersGenerator).from_pretrained
