"""`EvalArguments`: what `recipes/evaluate.py` (and `python -m aer_trl.evaluation`) takes, as YAML keys or flags."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..prompts import PromptArguments


@dataclass
class EvalArguments(PromptArguments):
    """Models × benchmarks, sampling settings, and the prompt format (the same `prompt_*` keys as training)."""

    models: list[str] = field(default_factory=list, metadata={"help": "Checkpoint folders or Hub ids to evaluate."})
    model_revision: str | None = field(
        default=None, metadata={"help": "Hub revision of the models given as Hub ids (part of the fingerprint)."}
    )
    benchmarks: list[str] = field(
        default_factory=lambda: ["aime24", "aime25", "amc23", "math500"],
        metadata={
            "help": "Benchmark names (aime24, aime25, amc23, math500, gsm8k, 'arithmetic' for the arithmetic tiers' "
            "held-out split) or local .jsonl/.parquet files."
        },
    )
    output_dir: str = field(default="runs/eval", metadata={"help": "Where generations, metrics and plots go."})
    num_samples: int = field(default=32, metadata={"help": "n: samples per problem."})
    k_list: list[int] = field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32], metadata={"help": "k values of pass@k (each <= num_samples)."}
    )
    report_k: int | None = field(default=None, metadata={"help": "k of the table's pass@k column (default: max k)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling top-p."})
    top_k: int = field(
        default=0, metadata={"help": "Top-k sampling; 0 samples from the full distribution (as TRL trains)."}
    )
    max_new_tokens: int = field(default=8192, metadata={"help": "Generation budget per sample (the paper: 8192)."})
    seed: int = field(default=0, metadata={"help": "Sampling seed (each chunk's own seed derives from it)."})
    batch_size: int = field(
        default=8,
        metadata={
            "help": "Problems per generation call (a chunk). A chunk's samples are a function of its problems, the "
            "seed and the sampling settings; the chunk size is part of the fingerprint."
        },
    )
    max_problems: int | None = field(default=None, metadata={"help": "Evaluate only the first N problems."})
    backend: str = field(default="auto", metadata={"help": "'auto', 'vllm' or 'transformers'."})
    data_parallel: int = field(
        default=0, metadata={"help": "Worker processes, one per GPU. 0: every visible GPU with vLLM, else 1."}
    )
    rescore: bool = field(default=False, metadata={"help": "Re-judge stored generations instead of keeping verdicts."})
    reuse_other_settings: bool = field(
        default=False,
        metadata={
            "help": "Also score stored samples of the same model and problems made with other sampling settings "
            "(their fingerprints are listed in metrics.json). Off: such records are ignored and regenerated."
        },
    )
    chat_template_path: str | None = field(
        default=None,
        metadata={
            "help": "The chat template the prompts are formatted with, as the run trained with it (the training "
            "config's key of the same name): a Jinja file, or 'plain' for a base model. Unset: the tokenizer's own (a "
            "checkpoint's tokenizer carries the template it was trained with); a tokenizer without one sees its "
            "prompts as plain text."
        },
    )
    chat_template_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "Keyword arguments of the tokenizer's chat template, as the run trained with them (TRL's key of "
            "the same name; e.g. {'enable_thinking': false} for Qwen3). A mapping, or JSON on the command line."
        },
    )

    def __post_init__(self):
        if isinstance(self.chat_template_kwargs, str):
            try:
                self.chat_template_kwargs = json.loads(self.chat_template_kwargs)
            except json.JSONDecodeError as err:
                raise ValueError(f"chat_template_kwargs: not JSON ({err.msg}): {self.chat_template_kwargs!r}") from err
        if self.chat_template_kwargs is not None and not isinstance(self.chat_template_kwargs, dict):
            raise ValueError(f"chat_template_kwargs must be a mapping, got {self.chat_template_kwargs!r}")
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}")
        bad = [k for k in self.k_list if not 1 <= k <= self.num_samples]
        if bad:
            raise ValueError(f"k_list: every k must be in [1, num_samples={self.num_samples}], got {bad}")
        if self.report_k is not None and self.report_k not in self.k_list:
            raise ValueError(f"report_k must be one of k_list {self.k_list}, got {self.report_k}")
        if self.backend not in ("auto", "vllm", "transformers"):
            raise ValueError(f"backend must be 'auto', 'vllm' or 'transformers', got {self.backend!r}")
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError("max_new_tokens and batch_size must be >= 1")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: no top-k), got {self.top_k}")
        if self.max_problems is not None and self.max_problems < 1:
            raise ValueError(f"max_problems must be >= 1 or None, got {self.max_problems}")
