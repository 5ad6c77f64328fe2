"""Shared builders for the tests: a tiny Qwen3, a char tokenizer, a small prompt set and toy rewards."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from datasets import Dataset

from aer_trl import AERGRPOConfig, AERGRPOTrainer, AERRLOOConfig, AERRLOOTrainer
from aer_trl.testing import build_char_tokenizer, build_tiny_qwen3, build_tiny_qwen3_moe


def make_tokenizer():
    return build_char_tokenizer()


def make_model(tokenizer, seed: int = 0, hidden_size: int = 32):
    return build_tiny_qwen3(tokenizer, hidden_size=hidden_size, num_layers=2, num_heads=2, seed=seed)


def make_moe_model(tokenizer, seed: int = 0, hidden_size: int = 32, expert_size: int = 16):
    """A tiny Qwen3-MoE (2 layers, 4 experts, top-2, the router's loss on): Qwen3-30B-A3B's architecture."""
    return build_tiny_qwen3_moe(tokenizer, hidden_size=hidden_size, expert_size=expert_size, seed=seed)


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


def make_trainer(tokenizer, args, seed: int = 0, reward_funcs=None, trainer_class=None, **kwargs) -> AERGRPOTrainer:
    """A tiny AER trainer for `args` (`trainer_class`, default AERRLOOTrainer for an AERRLOOConfig, else
    AERGRPOTrainer): the tiny Qwen3 (`seed`), the toy prompts, the even-length reward unless given."""
    trainer_class = trainer_class or (AERRLOOTrainer if isinstance(args, AERRLOOConfig) else AERGRPOTrainer)
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
from aer_trl.app.files import try_lock

assert try_lock(sys.argv[1]) is not None
Path(sys.argv[1] + ".held").touch()
time.sleep(120)
"""


@contextlib.contextmanager
def lock_held_elsewhere(path: Path):
    """Another process holds `aer_trl.app.files.try_lock(path)` inside the block (its process object is yielded),
    and is killed at the end."""
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


# ------------------------------------------------------------------ the trainer tests' shared pieces
def train_aer(tmp_path, tokenizer, reward_funcs=None, seed=0, **overrides):
    args = make_config(tmp_path, **overrides)
    trainer = make_trainer(tokenizer, args, seed=seed, reward_funcs=reward_funcs)
    trainer.train()
    return trainer


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_same_params(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def alphas(trainer):
    return [h["alpha"] for h in trainer.aer_callback.controller.history]


def fixed_batch(tokenizer, lam):
    torch.manual_seed(1)
    b, p_len, c_len = len(lam), 5, 6
    vocab = len(tokenizer)
    completion_mask = torch.ones(b, c_len, dtype=torch.long)
    completion_mask[1, 4:] = 0  # padding inside the batch
    completion_mask[3, 2:] = 0
    return {
        "prompt_ids": torch.randint(4, vocab, (b, p_len)),
        "prompt_mask": torch.ones(b, p_len, dtype=torch.long),
        "completion_ids": torch.randint(4, vocab, (b, c_len)),
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.0, -0.5, 0.25, -0.75]),
        "num_items_in_batch": completion_mask.sum(),
        "aer_lambda": torch.tensor(lam),
    }


def manual_sequence_entropy(model, batch, temperature):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    c_len = batch["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=att).logits[:, -c_len - 1 : -1] / temperature
    logp = F.log_softmax(logits.float(), -1)
    h = -(logp.exp() * logp).sum(-1)
    m = batch["completion_mask"].float()
    return (h * m).sum(-1) / m.sum(-1)


def grads(model, loss):
    model.zero_grad()
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def exit_launched_process(accelerator) -> None:
    """The end of a script `accelerate launch` runs in several processes: the process group torn down once every
    rank is done with it, then exit without the interpreter's teardown. Left to interpreter shutdown (or torn down
    while the other rank still talks), gloo's threads can abort a process that has already succeeded ("terminate
    called without an active exception")."""
    import os

    accelerator.wait_for_everyone()
    accelerator.end_training()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
