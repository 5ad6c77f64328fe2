"""The evaluation harness: pass@k / mean@n of models on math benchmarks, exact after any interruption or change.

- Backend: vLLM when installed and a CUDA GPU is present (data parallel over the GPUs), else `transformers`.
- Each problem is sampled with its own seed (from `seed` and the problem's hash), so its samples never depend on
  which problems were generated with it, on sharding, or on `max_problems`.
- Every problem's samples and verdicts go to the generations store as soon as they exist (`store.py`: fingerprinted
  records, torn lines repaired, fsync'ed appends). A rerun reuses exactly the records that match the current
  arguments and generates the rest; records made with other arguments are ignored (and kept on disk).
- Scoring covers exactly the problems and samples the current arguments ask for, and refuses an incomplete set.
- Reports: `metrics.json` (one entry per model and benchmark ever completed in the folder, each with n, k, the number
  of problems, the fingerprint and the reward's timeout/unparsed counts), `table.md` (the paper's Table 1 layout) and
  `passk.png`; a second model adds its rows, it does not erase the first.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..gguf import resolve_model
from ..rewards import math_accuracy_reward, pop_reward_stats
from .passk import k50, mean_pass_at_k
from .sampling import sample_completions
from .store import (
    append_records,
    digest,
    file_sha256,
    load_store,
    model_identity,
    problem_hash,
    problem_seed,
)

logger = logging.getLogger(__name__)

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass
class EvalArguments:
    """What `recipes/evaluate.py` takes (YAML keys or flags)."""

    models: list[str] = field(default_factory=list, metadata={"help": "Checkpoint folders or Hub ids to evaluate."})
    model_revision: str | None = field(
        default=None, metadata={"help": "Hub revision of the models given as Hub ids (part of the fingerprint)."}
    )
    benchmarks: list[str] = field(
        default_factory=lambda: ["aime24", "aime25", "amc23", "math500"],
        metadata={"help": "Benchmark names (aime24, aime25, amc23, math500, gsm8k) or local .jsonl/.parquet files."},
    )
    output_dir: str = field(default="runs/eval", metadata={"help": "Where generations, metrics and plots go."})
    num_samples: int = field(default=32, metadata={"help": "n: samples per problem."})
    k_list: list[int] = field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32], metadata={"help": "k values of pass@k (each <= num_samples)."}
    )
    report_k: int | None = field(default=None, metadata={"help": "k of the table's pass@k column (default: max k)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling top-p."})
    max_new_tokens: int = field(default=8192, metadata={"help": "Generation budget per sample (the paper: 8192)."})
    seed: int = field(default=0, metadata={"help": "Sampling seed (each problem's own seed derives from it)."})
    batch_size: int = field(
        default=8,
        metadata={
            "help": "Problems per vLLM generation call and per write to the store (the transformers backend generates "
            "and writes one problem at a time)."
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

    def __post_init__(self):
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
        if self.max_problems is not None and self.max_problems < 1:
            raise ValueError(f"max_problems must be >= 1 or None, got {self.max_problems}")


def choose_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "transformers"
    return "vllm" if torch.cuda.is_available() else "transformers"


def prompt_text(prompt, tokenizer) -> str:
    if isinstance(prompt, str):
        return prompt
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return "\n".join(m["content"] for m in prompt)


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
    """Sampling with `transformers`, one problem at a time with its own seed."""

    def __init__(self, model, tokenizer, args: EvalArguments):
        self.model, self.tokenizer, self.args = model, tokenizer, args
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @classmethod
    def from_pretrained(cls, model_name: str, args: EvalArguments) -> TransformersGenerator:
        from transformers import AutoModelForCausalLM

        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = AutoModelForCausalLM.from_pretrained(model_name, dtype=sampling_dtype(device)).to(device).eval()
        return cls(model, load_tokenizer(model_name), args)

    def __call__(self, texts: list[str], seeds: list[int]) -> list[list[str]]:
        a = self.args
        return sample_completions(
            self.model,
            self.tokenizer,
            texts,
            n=a.num_samples,
            temperature=a.temperature,
            top_p=a.top_p,
            max_new_tokens=a.max_new_tokens,
            seeds=seeds,
            disable_tqdm=True,
        )


class VLLMGenerator:  # pragma: no cover - needs a CUDA GPU
    @classmethod
    def from_pretrained(cls, model_name: str, args: EvalArguments) -> VLLMGenerator:
        return cls(model_name, args)

    def __init__(self, model_name: str, args: EvalArguments):
        from vllm import LLM

        self.args = args
        self.llm = LLM(model=model_name, revision=args.model_revision, seed=args.seed, enable_prefix_caching=True)

    def __call__(self, texts: list[str], seeds: list[int]) -> list[list[str]]:
        from vllm import SamplingParams

        params = [
            SamplingParams(
                n=self.args.num_samples,
                temperature=self.args.temperature,
                top_p=self.args.top_p,
                max_tokens=self.args.max_new_tokens,
                seed=seed,
            )
            for seed in seeds
        ]
        outputs = self.llm.generate(texts, params, use_tqdm=False)
        return [[o.text for o in out.outputs] for out in outputs]


def sampling_dtype(device: str) -> str:
    return "bfloat16" if device == "cuda" else "float32"


def run_fingerprint(args: EvalArguments, model: str, backend: str) -> dict:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {
        "model": model_identity(model, args.model_revision),
        "backend": backend,
        "device": device,
        "dtype": sampling_dtype(device),
        "num_samples": args.num_samples,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
    }


@dataclass
class Problem:
    index: int
    text: str  # the prompt exactly as the model sees it
    answer: str
    hash: str
    seed: int


def load_problems(bench: str, args: EvalArguments, tokenizer) -> list[Problem]:
    from ..data import load_math_dataset

    data = load_math_dataset(bench)
    if args.max_problems is not None:
        data = data.select(range(min(args.max_problems, len(data))))
    if len(data) == 0:
        raise ValueError(f"benchmarks: {bench!r} has no problems with a parseable gold answer")
    problems = []
    for i, row in enumerate(data):
        text = prompt_text(row["prompt"], tokenizer)
        h = problem_hash(text, row["answer"])
        problems.append(Problem(i, text, row["answer"], h, problem_seed(args.seed, h)))
    return problems


def judge(completions: list[str], gold: str) -> tuple[list[bool], dict]:
    verdicts = math_accuracy_reward(completions, answer=[gold] * len(completions))
    stats = pop_reward_stats()
    return [v == 1.0 for v in verdicts], {k: stats.get(k, 0) for k in ("timeouts", "unparsed", "unmarked")}


@dataclass
class Plan:
    """One (model, benchmark) of a run: its fingerprint and problems."""

    model: str
    bench: str
    fp: str
    fingerprint: dict
    problems: list[Problem]


def make_plans(args: EvalArguments, backend: str) -> list[Plan]:
    """Check every model and benchmark before generating anything; fingerprint them."""
    for model in args.models:
        check_model(model)
    args.models = [resolve_model(m) for m in args.models]  # a .gguf file becomes a cached model folder
    plans = []
    for model in args.models:
        tokenizer = load_tokenizer(model)
        fingerprint = run_fingerprint(args, model, backend)
        for bench in args.benchmarks:
            problems = load_problems(bench, args, tokenizer)
            plans.append(Plan(model, bench, digest(fingerprint), fingerprint, problems))
    return plans


def generate_missing(args: EvalArguments, plans: list[Plan], factory, shard: int = 0, num_shards: int = 1) -> None:
    """Generate and judge every problem of this shard that the store lacks for these arguments."""
    out = Path(args.output_dir)
    path = out / ("generations.jsonl" if num_shards == 1 else f"generations.shard{shard}.jsonl")
    done = load_store(out, repair=path)  # other shards' files may be mid-append in their own workers
    step = args.batch_size if choose_backend(args.backend) == "vllm" else 1
    generator, generator_model = None, None
    for plan in plans:
        todo = [
            p
            for p in plan.problems
            if (plan.fp, p.hash) not in done and (p.index // args.batch_size) % num_shards == shard
        ]
        if not todo:
            continue
        bar = tqdm(
            total=len(todo) * args.num_samples,
            unit="sample",
            desc=f"{Path(plan.model).name} | {Path(plan.bench).stem}",
            disable=shard > 0,
        )
        for start in range(0, len(todo), step):
            chunk = todo[start : start + step]
            if generator_model != plan.model:
                generator, generator_model = None, None
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                generator, generator_model = factory(plan.model, args), plan.model
            samples = generator([p.text for p in chunk], [p.seed for p in chunk])
            records = []
            for problem, completions in zip(chunk, samples):
                correct, stats = judge(completions, problem.answer)
                records.append(
                    {
                        "fp": plan.fp,
                        "problem": problem.hash,
                        "index": problem.index,
                        "benchmark": plan.bench,
                        "model": plan.model,
                        "answer": problem.answer,
                        "completions": completions,
                        "correct": correct,
                        "reward_stats": stats,
                    }
                )
            append_records(path, records)
            bar.update(len(chunk) * args.num_samples)
        bar.close()


def _shard_worker(args: EvalArguments, plans: list[Plan], backend: str, shard: int, num_shards: int) -> None:
    factory = (VLLMGenerator if backend == "vllm" else TransformersGenerator).from_pretrained
    generate_missing(args, plans, factory, shard, num_shards)


def evaluate(args: EvalArguments, generator_factory=None) -> dict:
    """Run (or resume) the evaluation; returns the metrics of this run's models and benchmarks (`metrics.json` also
    keeps the entries of earlier runs into the same folder)."""
    if not args.models:
        raise ValueError("models: give at least one checkpoint folder or Hub id")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    backend = choose_backend(args.backend)
    plans = make_plans(args, backend)
    workers = args.data_parallel or (torch.cuda.device_count() if backend == "vllm" else 1)
    if generator_factory is not None or workers <= 1:
        factory = generator_factory or (VLLMGenerator if backend == "vllm" else TransformersGenerator).from_pretrained
        generate_missing(args, plans, factory)
    else:
        _run_workers(args, plans, backend, workers)
    return score(args, plans)


def _run_workers(args: EvalArguments, plans: list[Plan], backend: str, workers: int) -> None:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    procs, visible = [], os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    try:
        for shard in range(workers):
            if gpus:
                os.environ["CUDA_VISIBLE_DEVICES"] = gpus[shard % len(gpus)]
            proc = ctx.Process(target=_shard_worker, args=(args, plans, backend, shard, workers))
            proc.start()
            procs.append(proc)
    finally:
        if visible is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
    for proc in procs:
        proc.join()
    failed = [i for i, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"evaluation workers {failed} failed; run the same command again to resume")


def score(args: EvalArguments, plans: list[Plan]) -> dict:
    """pass@k per (model, benchmark) over exactly the planned problems; an incomplete set is an error."""
    out = Path(args.output_dir)
    done = load_store(out)
    by_problem: dict[tuple[str, str], list[dict]] = {}
    if args.reuse_other_settings:
        for r in done.values():
            by_problem.setdefault((r["model"], r["problem"]), []).append(r)
    metrics: dict = {}
    for plan in plans:
        records, used = [], Counter()
        for p in plan.problems:
            r = done.get((plan.fp, p.hash))
            if r is None and args.reuse_other_settings:
                r = next(iter(by_problem.get((plan.model, p.hash), [])), None)
            if r is not None:
                records.append(r)
                used[r["fp"]] += 1
        missing = len(plan.problems) - len(records)
        if missing:
            raise RuntimeError(
                f"{plan.model} on {plan.bench}: {missing} of {len(plan.problems)} problems have no stored samples for "
                f"these arguments (fingerprint {plan.fp}); run the same command again to generate them"
            )
        stats = Counter()
        counts = []
        for r in records:
            if args.rescore:
                r["correct"], r["reward_stats"] = judge(r["completions"], r["answer"])
            stats.update(r.get("reward_stats", {}))
            counts.append((len(r["correct"]), sum(r["correct"])))
        n_values = {n for n, _ in counts}
        entry = {f"pass@{k}": mean_pass_at_k(counts, k) for k in args.k_list if k <= min(n_values)}
        entry["mean@n"] = sum(c / n for n, c in counts) / len(counts)
        entry["k50"] = k50(counts)
        entry["num_problems"] = len(counts)
        entry["num_samples"] = min(n_values)
        entry["k_list"] = [k for k in args.k_list if k <= min(n_values)]
        entry["fingerprint"] = {"id": plan.fp, **plan.fingerprint}
        if len(used) > 1 or plan.fp not in used:
            entry["reused_fingerprints"] = dict(used)
        bench_path = Path(plan.bench)
        if bench_path.is_file():
            entry["benchmark_sha256"] = file_sha256(bench_path)
        entry["reward_stats"] = {k: stats.get(k, 0) for k in ("timeouts", "unparsed", "unmarked")}
        metrics.setdefault(plan.model, {})[plan.bench] = entry
    write_reports(args, metrics)
    return metrics


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_reports(args: EvalArguments, metrics: dict) -> dict:
    """Merge this run's entries into `metrics.json` (other models and benchmarks stay), then table and plot."""
    out = Path(args.output_dir)
    merged: dict = {}
    path = out / "metrics.json"
    if path.exists():
        try:
            merged = json.loads(path.read_text())
        except json.JSONDecodeError:
            logger.warning("%s is not valid JSON; it is rewritten from this run's results", path)
    for model, per_bench in metrics.items():
        merged.setdefault(model, {}).update(per_bench)
    _atomic_write(path, json.dumps(merged, indent=2))
    _atomic_write(out / "table.md", markdown_table(merged, args) + "\n")
    plot_pass_at_k(merged, out / "passk.png")
    return merged


def _stem(bench: str) -> str:
    return Path(bench).stem


def markdown_table(metrics: dict, args: EvalArguments) -> str:
    """Rows: models; for each benchmark and their average, pass@1 and pass@report_k in % (the paper's Table 1),
    then what each cell was computed from (n, problems)."""
    k = args.report_k or max(args.k_list)
    benches = list(dict.fromkeys(b for per_bench in metrics.values() for b in per_bench))
    head = "| Method | " + " | ".join(f"{_stem(b)} pass@1 | {_stem(b)} pass@{k}" for b in benches)
    lines = [head + f" | Avg. pass@1 | Avg. pass@{k} |", "|---" * (2 * len(benches) + 3) + "|"]
    notes = []
    for model_name, per_bench in metrics.items():
        cells, p1, pk = [], [], []
        for b in benches:
            m = per_bench.get(b)
            if m is None:
                cells += ["–", "–"]
                continue
            p1.append(m["pass@1"])
            cells.append(f"{100 * p1[-1]:.1f}")
            if f"pass@{k}" in m:
                pk.append(m[f"pass@{k}"])
                cells.append(f"{100 * pk[-1]:.1f}")
            else:
                cells.append("–")
            fp = m["fingerprint"]
            notes.append(
                f"| {Path(model_name).name} | {_stem(b)} | {m['num_problems']} | {m.get('num_samples', '?')} | "
                f"{fp['temperature']} | {fp['max_new_tokens']} | {fp['id']} |"
            )
        avg = [f"{100 * sum(x) / len(x):.1f}" if len(x) == len(benches) else "–" for x in (p1, pk)]
        lines.append(f"| {Path(model_name).name} | " + " | ".join(cells + avg) + " |")
    lines += [
        "",
        f"pass@k in %, unbiased estimator over n samples per problem; averages only over rows with every benchmark "
        f"(k = {k}).",
        "",
        "| Method | benchmark | problems | n | temperature | max new tokens | fingerprint |",
        "|---|---|---|---|---|---|---|",
        *notes,
    ]
    return "\n".join(lines)


def plot_pass_at_k(metrics: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = list(dict.fromkeys(b for per_bench in metrics.values() for b in per_bench))
    fig, axes = plt.subplots(1, max(1, len(benches)), figsize=(4.5 * max(1, len(benches)), 3.8), squeeze=False)
    for ax, bench in zip(axes[0], benches):
        for model_name, per_bench in metrics.items():
            m = per_bench.get(bench)
            if m:
                ks = m.get("k_list") or sorted(int(key[5:]) for key in m if key.startswith("pass@"))
                label = f"{Path(model_name).name} (n={m.get('num_samples', '?')}, {m['num_problems']} problems)"
                ax.plot(ks, [100 * m[f"pass@{k}"] for k in ks], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(_stem(bench))
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
