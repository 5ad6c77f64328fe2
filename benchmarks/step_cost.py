"""What AER costs over plain GRPO: step time and peak memory, measured side by side in one process.

For each size, one model and one fixed batch; GRPO steps (TRL's own loss) and AER steps (the same loss minus the
difficulty-weighted entropy bonus, half the prompts hard) alternate, so both see the same machine state. Printed per
size: median step time (forward + backward + optimizer step) and peak memory of a step, for each and AER/GRPO.

    python benchmarks/step_cost.py                 # the full sweep (CPU: ~10 minutes; CUDA used when present)
    python benchmarks/step_cost.py --quick         # a smoke run (the test suite runs this)

Peak memory: CUDA peak allocated on a GPU; on CPU the peak resident-set increase over the step, sampled every
0.5 ms with freed heap returned to the OS before each step (glibc malloc_trim).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trl import GRPOTrainer  # noqa: E402

from aer_trl import AERConfig, AERGRPOTrainer  # noqa: E402


@dataclass
class Size:
    hidden: int
    completion_len: int
    vocab: int
    batch: int = 4
    prompt_len: int = 32


BASE = Size(hidden=128, completion_len=128, vocab=4096)
SWEEP = (
    [Size(h, BASE.completion_len, BASE.vocab) for h in (64, 128, 256, 512)]
    + [Size(BASE.hidden, n, BASE.vocab) for n in (64, 256, 1024)]
    + [Size(BASE.hidden, BASE.completion_len, v) for v in (128, 32768, 151936)]
)
QUICK = [Size(hidden=32, completion_len=16, vocab=128, batch=2, prompt_len=8)]


class _Tokenizer:
    """The trainer only needs a pad token and a vocabulary size here: the batch is built directly."""


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


def build(size: Size, device: torch.device, tmp: str):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    vocab = {f"t{i}": i for i in range(size.vocab)}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")), pad_token="t0", eos_token="t2"
    )
    heads = max(2, size.hidden // 64)
    config = Qwen3Config(
        vocab_size=size.vocab,
        hidden_size=size.hidden,
        intermediate_size=size.hidden * 3,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=size.hidden // heads,
        max_position_embeddings=size.prompt_len + size.completion_len,
        pad_token_id=0,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    args = AERConfig(
        output_dir=tmp,
        use_cpu=device.type == "cpu",
        bf16=device.type == "cuda",
        report_to="none",
        per_device_train_batch_size=size.batch,
        num_generations=2,
        max_completion_length=size.completion_len,
        gradient_checkpointing=False,
        learning_rate=1e-5,
        aer_alpha_init=0.5,
        disable_tqdm=True,
    )
    from datasets import Dataset

    trainer = AERGRPOTrainer(
        model=model,
        reward_funcs=[lambda completions, **k: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["t3"] * 4}),
        processing_class=tok,
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    g = torch.Generator().manual_seed(0)
    b, c = size.batch, size.completion_len
    batch = {
        "prompt_ids": torch.randint(3, size.vocab, (b, size.prompt_len), generator=g),
        "prompt_mask": torch.ones(b, size.prompt_len, dtype=torch.long),
        "completion_ids": torch.randint(3, size.vocab, (b, c), generator=g),
        "completion_mask": torch.ones(b, c, dtype=torch.long),
        "advantages": torch.linspace(-1, 1, b),
        "num_items_in_batch": torch.tensor(float(b * c)),
        "aer_lambda": torch.tensor([0.5 if i % 2 == 0 else 0.0 for i in range(b)]),  # half the prompts hard
    }
    batch = {k: v.to(trainer.accelerator.device) for k, v in batch.items()}
    optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=1e-5)
    return trainer, batch, optimizer


def step(trainer, batch, optimizer, aer: bool):
    model = trainer.model
    if aer:
        loss = trainer.compute_loss(model, batch)
    else:
        plain = {k: v for k, v in batch.items() if k != "aer_lambda"}
        loss = GRPOTrainer.compute_loss(trainer, model, plain)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure(size: Size, steps: int, warmup: int, device: torch.device) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        trainer, batch, optimizer = build(size, device, tmp)
        times = {"grpo": [], "aer": []}
        peaks = {"grpo": [], "aer": []}
        for i in range(warmup + steps):
            for name in ("grpo", "aer") if i % 2 == 0 else ("aer", "grpo"):  # alternate the order too
                with PeakMemory(device) as mem:
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    step(trainer, batch, optimizer, aer=name == "aer")
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    elapsed = time.perf_counter() - start
                if i >= warmup:
                    times[name].append(elapsed)
                    peaks[name].append(mem.peak)
    row = {**asdict(size), "device": device.type}
    for name in ("grpo", "aer"):
        row[f"{name}_ms"] = 1000 * statistics.median(times[name])
        row[f"{name}_peak_mib"] = max(peaks[name]) / 2**20
    row["time_ratio"] = row["aer_ms"] / row["grpo_ms"]
    row["mem_ratio"] = row["aer_peak_mib"] / row["grpo_peak_mib"] if row["grpo_peak_mib"] > 0 else float("nan")
    return row


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    sizes = QUICK if args.quick else SWEEP
    steps, warmup = (2, 1) if args.quick else (args.steps, args.warmup)
    print(f"device: {device} | torch {torch.__version__} | threads {torch.get_num_threads()}")
    header = (
        f"{'hidden':>6} {'compl':>5} {'vocab':>6} | {'GRPO ms':>8} {'AER ms':>8} {'ratio':>5} | "
        f"{'GRPO MiB':>8} {'AER MiB':>8} {'ratio':>5}"
    )
    print(header)
    rows = []
    for size in sizes:
        r = measure(size, steps, warmup, device)
        rows.append(r)
        print(
            f"{r['hidden']:>6} {r['completion_len']:>5} {r['vocab']:>6} | {r['grpo_ms']:>8.1f} {r['aer_ms']:>8.1f} "
            f"{r['time_ratio']:>5.2f} | {r['grpo_peak_mib']:>8.1f} {r['aer_peak_mib']:>8.1f} {r['mem_ratio']:>5.2f}",
            flush=True,
        )
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
