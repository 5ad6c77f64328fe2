"""`EvalArguments`: what `recipes/evaluate.py` (and `aer-evaluate`) takes, as YAML keys or flags."""

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
    num_samples_per_benchmark: dict | str | None = field(
        default=None,
        metadata={
            "help": "n for some benchmarks, by name ({aime24: 32, math500: 8}: the paper's appendix; JSON on the "
            "command line); the others take num_samples. Each benchmark is scored up to its own n."
        },
    )
    k_list: list[int] = field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32], metadata={"help": "k values of pass@k (each <= num_samples)."}
    )
    report_k: int | None = field(default=None, metadata={"help": "k of the table's pass@k column (default: max k)."})
    table: str = field(
        default="pass",
        metadata={
            "help": "table.md's layout: 'pass' (the paper's Table 1: pass@1 and pass@report_k per benchmark, and "
            "their averages) or 'appendix' (its appendix table: mean@n and pass@n per benchmark, n that benchmark's "
            "samples)."
        },
    )
    model_labels: list[str] | None = field(
        default=None,
        metadata={"help": "The table's row names, one per model in order (e.g. Base, GRPO, Clip-Higher, AER)."},
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling top-p."})
    top_k: int = field(
        default=0, metadata={"help": "Top-k sampling; 0 samples from the full distribution (as TRL trains)."}
    )
    max_new_tokens: int = field(default=8192, metadata={"help": "Generation budget per sample (the paper: 8192)."})
    stop: list[str] | None = field(
        default=None,
        metadata={
            "help": "Strings that end a sample (not kept in it), as the run's generation_kwargs.stop: a base model "
            "writes on past its answer into a next 'Question:' (docs/usage.md, 'Base models'). Both backends."
        },
    )
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
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}")
        per_bench = self.num_samples_per_benchmark
        if isinstance(per_bench, str):
            try:
                per_bench = self.num_samples_per_benchmark = json.loads(per_bench)
            except json.JSONDecodeError as err:
                raise ValueError(f"num_samples_per_benchmark: not JSON ({err.msg}): {per_bench!r}") from err
        if per_bench is not None:
            if not isinstance(per_bench, dict):
                raise ValueError(f"num_samples_per_benchmark must map benchmarks to n, got {per_bench!r}")
            unknown = sorted(set(per_bench) - set(self.benchmarks))
            if unknown:
                raise ValueError(
                    f"num_samples_per_benchmark names {unknown}, which are not among benchmarks {self.benchmarks}"
                )
            wrong = {b: n for b, n in per_bench.items() if isinstance(n, bool) or not isinstance(n, int) or n < 1}
            if wrong:
                raise ValueError(f"num_samples_per_benchmark: every n must be an integer >= 1, got {wrong}")
        most = max([self.num_samples, *(per_bench or {}).values()])
        bad = [k for k in self.k_list if not 1 <= k <= most]
        if bad:
            raise ValueError(f"k_list: every k must be in [1, the largest number of samples={most}], got {bad}")
        if self.table not in ("pass", "appendix"):
            raise ValueError(f"table must be 'pass' or 'appendix', got {self.table!r}")
        if self.model_labels is not None and len(self.model_labels) != len(self.models):
            raise ValueError(
                f"model_labels: one label per model ({len(self.models)} models), got {len(self.model_labels)}"
            )
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


def sample_groups(args: EvalArguments) -> list[EvalArguments]:
    """The evaluation as runs of one sample count each (`num_samples_per_benchmark`): each takes the benchmarks with
    that n, the k of `k_list` up to n and n itself (the appendix reports pass@n). One run where every benchmark has
    `num_samples`, which is then `args` itself."""
    from dataclasses import replace

    counts = args.num_samples_per_benchmark or {}
    by_n: dict[int, list[str]] = {}
    for bench in args.benchmarks:
        by_n.setdefault(counts.get(bench, args.num_samples), []).append(bench)
    if list(by_n) == [args.num_samples]:
        return [args]
    runs = []
    for n, benches in by_n.items():
        ks = sorted({k for k in args.k_list if k <= n} | {n})
        report_k = args.report_k if args.report_k in ks else None
        runs.append(
            replace(
                args, benchmarks=benches, num_samples=n, num_samples_per_benchmark=None, k_list=ks, report_k=report_k
            )
        )
    return runs
