"""Evaluation harness: pass@k / mean@k of one or more models on one or more math benchmarks (SPEC §4).

- Backend: vLLM when it is installed and a CUDA GPU is present (data parallel over the GPUs), else batched
  `transformers` generation on CPU/GPU. A progress bar either way.
- Every generation and its verdict is appended to `<output_dir>/generations.jsonl` as soon as its batch is done, so an
  interrupted evaluation resumes where it stopped, and a finished one can be re-scored without generating again.
- Outputs: `metrics.json`, `table.md` (laid out like the paper's Table 1), k50, and `passk.png` (pass@k against k).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from .evaluation import k50, mean_pass_at_k, sample_completions
from .rewards import math_accuracy_reward


@dataclass
class EvalArguments:
    """What `recipes/evaluate.py` takes (YAML keys or flags)."""

    models: list[str] = field(default_factory=list, metadata={"help": "Checkpoint folders or Hub ids to evaluate."})
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
    max_new_tokens: int = field(default=8192, metadata={"help": "Generation budget per sample."})
    seed: int = field(default=0, metadata={"help": "Sampling seed (each batch is seeded from it: resumable)."})
    batch_size: int = field(default=8, metadata={"help": "Problems per generation batch (transformers backend)."})
    max_problems: int | None = field(default=None, metadata={"help": "Evaluate only the first N problems."})
    backend: str = field(default="auto", metadata={"help": "'auto', 'vllm' or 'transformers'."})
    data_parallel: int = field(
        default=0, metadata={"help": "Worker processes, one per GPU. 0: every visible GPU with vLLM, else 1."}
    )
    rescore: bool = field(default=False, metadata={"help": "Re-judge stored generations instead of keeping verdicts."})

    def __post_init__(self):
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}")
        bad = [k for k in self.k_list if not 1 <= k <= self.num_samples]
        if bad:
            raise ValueError(f"k_list: every k must be in [1, num_samples={self.num_samples}], got {bad}")
        if self.backend not in ("auto", "vllm", "transformers"):
            raise ValueError(f"backend must be 'auto', 'vllm' or 'transformers', got {self.backend!r}")


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


class TransformersGenerator:
    """Batched sampling with `transformers` (the CPU backend; also used by `PassAtKCallback` during training)."""

    def __init__(self, model, tokenizer, args: EvalArguments):
        self.model, self.tokenizer, self.args = model, tokenizer, args
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @classmethod
    def from_pretrained(cls, model_name: str, args: EvalArguments) -> TransformersGenerator:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_name, dtype=dtype).to(device).eval()
        return cls(model, AutoTokenizer.from_pretrained(model_name), args)

    def __call__(self, prompts: list, seed: int) -> list[list[str]]:
        # one batch, seeded by the caller: the same samples whatever came before (resume, sharding)
        texts = [prompt_text(p, self.tokenizer) for p in prompts]
        a = self.args
        return sample_completions(
            self.model,
            self.tokenizer,
            texts,
            n=a.num_samples,
            temperature=a.temperature,
            top_p=a.top_p,
            max_new_tokens=a.max_new_tokens,
            batch_size=len(texts),
            seed=seed,
            disable_tqdm=True,
        )


class VLLMGenerator:  # pragma: no cover - needs a CUDA GPU
    @classmethod
    def from_pretrained(cls, model_name: str, args: EvalArguments) -> VLLMGenerator:
        return cls(model_name, args)

    def __init__(self, model_name: str, args: EvalArguments):
        from vllm import LLM

        self.args = args
        self.llm = LLM(
            model=model_name,
            data_parallel_size=max(1, torch.cuda.device_count()),
            seed=args.seed,
            max_model_len=None,
            enable_prefix_caching=True,
        )
        self.tokenizer = self.llm.get_tokenizer()

    def __call__(self, prompts: list, seed: int) -> list[list[str]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=self.args.num_samples,
            temperature=self.args.temperature,
            top_p=self.args.top_p,
            max_tokens=self.args.max_new_tokens,
            seed=seed,
        )
        outputs = self.llm.generate([prompt_text(p, self.tokenizer) for p in prompts], params, use_tqdm=False)
        return [[o.text for o in out.outputs] for out in outputs]


def load_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    records = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut by an interruption: its batch is regenerated
                    break
    return records


def load_done(out: Path) -> dict:
    """(model, benchmark) -> {problem index: record}, from every generations*.jsonl in `out` (shards included)."""
    done = defaultdict(dict)
    for path in sorted(out.glob("generations*.jsonl")):
        for r in load_records(path):
            done[(r["model"], r["benchmark"])][r["index"]] = r
    return done


def generate_missing(args: EvalArguments, factory, shard: int = 0, num_shards: int = 1) -> None:
    """Generate and judge every batch not yet on disk; batch b belongs to shard b % num_shards. A batch is seeded
    from its position, so the samples are the same whatever the sharding or the interruptions."""
    from .data import load_math_dataset

    out = Path(args.output_dir)
    gen_path = out / ("generations.jsonl" if num_shards == 1 else f"generations.shard{shard}.jsonl")
    done = load_done(out)
    for model_name in args.models:
        generator = None
        for bench in args.benchmarks:
            data = load_math_dataset(bench)
            if args.max_problems is not None:
                data = data.select(range(min(args.max_problems, len(data))))
            have = done[(model_name, bench)]
            starts = [s for s in range(0, len(data), args.batch_size) if (s // args.batch_size) % num_shards == shard]
            for start in tqdm(starts, desc=f"{Path(model_name).name} | {bench}", disable=shard > 0):
                idx = list(range(start, min(start + args.batch_size, len(data))))
                if all(i in have for i in idx):
                    continue
                generator = generator or factory(model_name, args)
                batch = generate_and_judge(generator, data, idx, seed=args.seed + start)
                with open(gen_path, "a") as f:
                    for i, rec in zip(idx, batch):
                        rec.update(model=model_name, benchmark=bench)
                        have[i] = rec
                        f.write(json.dumps(rec) + "\n")


def _shard_worker(args: EvalArguments, backend: str, shard: int, num_shards: int) -> None:
    factory = (VLLMGenerator if backend == "vllm" else TransformersGenerator).from_pretrained
    generate_missing(args, factory, shard, num_shards)


def evaluate(args: EvalArguments, generator_factory=None) -> dict:
    """Run (or resume) the evaluation; returns the metrics dict also written to `metrics.json`.

    With the vLLM backend and several GPUs (or `data_parallel` > 1), the batches are spread over one worker process
    per GPU (`CUDA_VISIBLE_DEVICES` set for each), each appending to its own shard file.
    """
    if not args.models:
        raise ValueError("models: give at least one checkpoint folder or Hub id")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    backend = choose_backend(args.backend)
    workers = args.data_parallel or (torch.cuda.device_count() if backend == "vllm" else 1)
    if generator_factory is not None or workers <= 1:
        factory = generator_factory or (VLLMGenerator if backend == "vllm" else TransformersGenerator).from_pretrained
        generate_missing(args, factory)
    else:
        import multiprocessing as mp
        import os

        ctx = mp.get_context("spawn")
        procs, visible = [], os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
        for shard in range(workers):
            if gpus:
                os.environ["CUDA_VISIBLE_DEVICES"] = gpus[shard % len(gpus)]
            proc = ctx.Process(target=_shard_worker, args=(args, backend, shard, workers))
            proc.start()
            procs.append(proc)
        if visible is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        for proc in procs:
            proc.join()
        failed = [i for i, p in enumerate(procs) if p.exitcode != 0]
        if failed:
            raise RuntimeError(f"evaluation workers {failed} failed; re-run to resume from the generations on disk")
    return score(args, load_done(out))


def generate_and_judge(generator, data, idx: list[int], seed: int) -> list[dict]:
    samples = generator([data[i]["prompt"] for i in idx], seed=seed)
    records = []
    for i, completions in zip(idx, samples):
        gold = data[i]["answer"]
        verdicts = math_accuracy_reward(completions, answer=[gold] * len(completions))
        records.append(
            {"index": i, "answer": gold, "completions": completions, "correct": [v == 1.0 for v in verdicts]}
        )
    return records


def score(args: EvalArguments, done: dict) -> dict:
    """pass@k per (model, benchmark) from stored generations (re-judged when `rescore`)."""
    out = Path(args.output_dir)
    metrics: dict = {}
    for model_name in args.models:
        metrics[model_name] = {}
        for bench in args.benchmarks:
            recs = list(done[(model_name, bench)].values())
            if args.rescore:
                for r in recs:
                    verdicts = math_accuracy_reward(r["completions"], answer=[r["answer"]] * len(r["completions"]))
                    r["correct"] = [v == 1.0 for v in verdicts]
            counts = [(len(r["correct"]), sum(r["correct"])) for r in recs]
            if not counts:
                continue
            entry = {f"pass@{k}": mean_pass_at_k(counts, k) for k in args.k_list}
            entry["mean@n"] = sum(c / n for n, c in counts) / len(counts)
            entry["k50"] = k50(counts)
            entry["num_problems"] = len(counts)
            metrics[model_name][bench] = entry
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    (out / "table.md").write_text(markdown_table(metrics, args) + "\n")
    plot_pass_at_k(metrics, args, out / "passk.png")
    return metrics


def markdown_table(metrics: dict, args: EvalArguments) -> str:
    """Rows: models; for each benchmark and their average, pass@1 and pass@report_k in % (the paper's Table 1)."""
    k = args.report_k or max(args.k_list)
    benches = list(args.benchmarks)
    head = "| Method | " + " | ".join(f"{Path(b).stem} pass@1 | {Path(b).stem} pass@{k}" for b in benches)
    lines = [head + f" | Avg. pass@1 | Avg. pass@{k} |", "|---" * (2 * len(benches) + 3) + "|"]
    for model_name, per_bench in metrics.items():
        cells, p1, pk = [], [], []
        for b in benches:
            m = per_bench.get(b)
            if m is None:
                cells += ["–", "–"]
                continue
            p1.append(m["pass@1"])
            pk.append(m.get(f"pass@{k}", float("nan")))
            cells += [f"{100 * p1[-1]:.1f}", f"{100 * pk[-1]:.1f}"]
        avg = [f"{100 * sum(x) / len(x):.1f}" if x else "–" for x in (p1, pk)]
        lines.append(f"| {Path(model_name).name} | " + " | ".join(cells + avg) + " |")
    return "\n".join(lines)


def plot_pass_at_k(metrics: dict, args: EvalArguments, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = list(args.benchmarks)
    fig, axes = plt.subplots(1, len(benches), figsize=(4.5 * len(benches), 3.6), squeeze=False)
    for ax, bench in zip(axes[0], benches):
        for model_name, per_bench in metrics.items():
            m = per_bench.get(bench)
            if m:
                ax.plot(
                    args.k_list, [100 * m[f"pass@{k}"] for k in args.k_list], marker="o", label=Path(model_name).name
                )
        ax.set_xscale("log", base=2)
        ax.set_title(Path(bench).stem)
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k (%)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


class PassAtKCallback(TrainerCallback, ExportableState):
    """Evaluates pass@k on a benchmark every `eval_steps` during training and keeps the best checkpoint by pass@1.

    The paper selects the checkpoint with the best pass@1 on a validation set (AIME25 every 20 steps). When pass@1
    improves, the callback asks the Trainer to save a checkpoint at that step and records it in
    `<output_dir>/best_checkpoint.json`; metrics are logged as `eval_passk/<benchmark>/pass@k`.
    Generation runs on the main process with `transformers` (DDP or one device; not under ZeRO-3).
    """

    def __init__(
        self,
        benchmark: str,
        eval_steps: int = 20,
        num_samples: int = 4,
        k_list=(1, 4),
        max_new_tokens: int = 1024,
        temperature: float = 1.0,
        max_problems: int | None = None,
        batch_size: int = 8,
        seed: int = 0,
    ):
        self.benchmark, self.eval_steps = benchmark, eval_steps
        sampling = dict(
            num_samples=num_samples,
            k_list=list(k_list),
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            max_problems=max_problems,
            batch_size=batch_size,
            seed=seed,
        )
        self.eval_args = EvalArguments(models=["<training>"], benchmarks=[benchmark], **sampling)
        self._init = dict(benchmark=benchmark, eval_steps=eval_steps, **sampling)  # what `state()` saves
        self.best_pass_at_1: float | None = None
        self.best_step: int | None = None
        self.history: list[dict] = []
        self._data = None

    def state(self) -> dict:
        return {
            "args": dict(self._init),
            "attributes": {
                "best_pass_at_1": self.best_pass_at_1,
                "best_step": self.best_step,
                "history": self.history,
            },
        }

    def _dataset(self):
        if self._data is None:
            from .data import load_math_dataset

            data = load_math_dataset(self.benchmark)
            if self.eval_args.max_problems is not None:
                data = data.select(range(min(self.eval_args.max_problems, len(data))))
            self._data = data
        return self._data

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.eval_steps <= 0 or state.global_step % self.eval_steps != 0 or not state.is_world_process_zero:
            return
        data = self._dataset()
        was_training = model.training
        model.eval()
        generator = TransformersGenerator(model, processing_class, self.eval_args)
        counts = []
        for start in range(0, len(data), self.eval_args.batch_size):
            idx = list(range(start, min(start + self.eval_args.batch_size, len(data))))
            for rec in generate_and_judge(generator, data, idx, seed=self.eval_args.seed + start):
                counts.append((len(rec["correct"]), sum(rec["correct"])))
        if was_training:
            model.train()
        result = {f"pass@{k}": mean_pass_at_k(counts, k) for k in self.eval_args.k_list}
        self.history.append({"step": state.global_step, **result})
        state.log_history.append(
            {f"eval_passk/{Path(self.benchmark).stem}/{k}": v for k, v in result.items()} | {"step": state.global_step}
        )
        if self.best_pass_at_1 is None or result["pass@1"] > self.best_pass_at_1:
            self.best_pass_at_1, self.best_step = result["pass@1"], state.global_step
            control.should_save = True
            best = {
                "step": self.best_step,
                "pass@1": self.best_pass_at_1,
                "checkpoint": str(Path(args.output_dir) / f"checkpoint-{self.best_step}"),
            }
            Path(args.output_dir).mkdir(parents=True, exist_ok=True)
            (Path(args.output_dir) / "best_checkpoint.json").write_text(json.dumps(best, indent=2))
