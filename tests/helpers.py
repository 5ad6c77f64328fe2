"""Shared builders for the tests: a tiny Qwen3, a char tokenizer, a small prompt set and toy rewards."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

from datasets import Dataset

from aer_bench.lab.model import build_tiny_qwen3
from aer_bench.lab.tokenizer import build_char_tokenizer
from aer_trl import AERGRPOConfig, AERGRPOTrainer


def make_tokenizer():
    return build_char_tokenizer()


def make_model(tokenizer, seed: int = 0, hidden_size: int = 32):
    return build_tiny_qwen3(tokenizer, hidden_size=hidden_size, num_layers=2, num_heads=2, seed=seed)


def save_model(tokenizer, folder: Path, **model_kwargs) -> str:
    """A tiny model (`make_model`'s keywords) and the tokenizer saved as a local model folder; returns its path."""
    make_model(tokenizer, **model_kwargs).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def make_dataset(n: int = 16) -> Dataset:
    return Dataset.from_dict(
        {"prompt": [f"{i}+{i % 7}=" for i in range(n)], "answer": [str(i + i % 7) for i in range(n)]}
    )


def even_length_reward(completions, **kwargs):
    """A toy 'correctness': 1.0 when the completion has an even number of characters."""
    return [float(len(c) % 2 == 0) for c in completions]


def digit_count_reward(completions, **kwargs):
    """A toy shaping reward that varies across completions (gives GRPO non-zero advantages)."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def always_correct(completions, **kwargs):
    return [1.0] * len(completions)


def always_wrong(completions, **kwargs):
    return [0.0] * len(completions)


def config_kwargs(output_dir, **overrides) -> dict:
    kwargs = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        learning_rate=1e-2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        gradient_checkpointing=False,
        disable_tqdm=True,
        temperature=1.0,
    )
    kwargs.update(overrides)
    return kwargs


def make_config(output_dir, config_class=AERGRPOConfig, **overrides) -> AERGRPOConfig:
    return config_class(**config_kwargs(output_dir, **overrides))


def make_bench_config(output_dir, **overrides):
    """The research bench's config (`share_prompt_forward` / `share_prompt_generation`), for its trainer."""
    from aer_bench.training import BenchConfig

    return make_config(output_dir, BenchConfig, **overrides)


def make_trainer(tokenizer, args, seed: int = 0, reward_funcs=None, **kwargs) -> AERGRPOTrainer:
    """A tiny AERGRPOTrainer (the bench's `BenchGRPOTrainer` for a bench config): the tiny Qwen3 (`seed`), the toy
    prompts, the even-length reward unless given."""
    trainer_class = AERGRPOTrainer
    if hasattr(args, "share_prompt_forward"):
        from aer_bench.training import BenchGRPOTrainer as trainer_class
    return trainer_class(
        model=make_model(tokenizer, seed=seed),
        reward_funcs=reward_funcs or [even_length_reward],
        args=args,
        train_dataset=make_dataset(),
        processing_class=tokenizer,
        **kwargs,
    )


HOLD_LOCK = """
import sys, time
from pathlib import Path
from aer_trl.io import try_lock

assert try_lock(sys.argv[1]) is not None
Path(sys.argv[1] + ".held").touch()
time.sleep(120)
"""


@contextlib.contextmanager
def lock_held_elsewhere(path: Path):
    """Another process holds `aer_trl.io.try_lock(path)` inside the block (its process object is yielded), and is
    killed at the end."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{path}.held").exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the lock holder did not start"
            time.sleep(0.1)
        yield holder
    finally:
        holder.kill()
        holder.wait()
        Path(f"{path}.held").unlink(missing_ok=True)
