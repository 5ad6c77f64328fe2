"""One cell trained in its own process (resumed when killed, its checkpoints dropped once finished) and a model's
held-out pass@k through the evaluation harness, in the format and budget the arm trained with."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from aer_trl.app.checkpoints import is_complete_checkpoint
from aer_trl.app.prompts import prompt_settings
from aer_trl.atomic import atomic_write

from .spec import Arm, Study, cell_dir, settings_hash


def environment() -> dict:
    """What a cell trained with beyond its settings, recorded in its run.json so a record says what reproduces it:
    the code (the checkout's commit, and whether its tracked files differed from it), the versions of the packages
    that compute, the CPU, whether it has bfloat16 matrix kernels, and the threads a training process takes
    (`AER_CPU_THREADS`, else all the cores); on a CUDA machine the GPU, CUDA's and vLLM's versions instead of the
    kernels."""
    import importlib.metadata
    import os
    import platform

    def git(*args: str) -> str | None:
        try:
            here = Path(__file__).parent
            done = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": git("rev-parse", "HEAD"),
        "tracked_changes": None if status is None else bool(status),
        "python": platform.python_version(),
        **{name: version(name) for name in ("torch", "transformers", "trl", "accelerate")},
        "cpu": cpu,
        "threads": int(os.environ.get("AER_CPU_THREADS", 0)) or os.cpu_count(),
        **device_environment(version),
    }


def device_environment(version) -> dict:
    """On a CUDA machine, the device and vLLM's version (a cell trained there). On a CPU, whether PyTorch has bfloat16
    matrix kernels there (`cpu_bf16_kernels`, `aer_trl.hardware.cpu_has_bf16_kernels`): without them a bf16 cell runs
    every matmul in PyTorch's reference GEMM (another float path, and ~20x the step time of a CPU with them:
    docs/real_llm.md §3.11)."""
    import torch

    if not torch.cuda.is_available():
        from aer_trl.hardware import cpu_has_bf16_kernels

        return {"cpu_bf16_kernels": cpu_has_bf16_kernels()}
    return {"gpu": torch.cuda.get_device_name(), "cuda": torch.version.cuda, "vllm": version("vllm")}


def train_cell(study: Study, arm: Arm, seed: int, output_dir: str | Path, claim=None) -> dict:
    """Train one cell in its own process unless it is finished; resume a killed one from its newest checkpoint; drop
    the checkpoints of a finished one. `claim` (the queue's `Claim`): the training process holds it too, so the cell
    stays claimed while it runs, also after the queue that started it is killed."""
    folder = cell_dir(study, arm, seed, output_dir)
    done = folder / "run.json"
    if done.exists():
        return json.loads(done.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    settings = study.merged(arm)
    atomic_write(folder / "recipe.yaml", yaml.safe_dump(settings, sort_keys=True, allow_unicode=True))
    resume = any(is_complete_checkpoint(p) for p in folder.glob("checkpoint-*"))
    command = [
        sys.executable,
        "-m",
        "aer_bench.run",  # the bench's training command line (`aer_trl.app.run` with its classes)
        "--config",
        str(folder / "recipe.yaml"),
        "--output_dir",
        str(folder),
        "--seed",
        str(seed),
        "--disable_tqdm",
        "true",
        *(["--resume_from_checkpoint", "latest"] if resume else []),
    ]
    start = time.perf_counter()
    with open(folder / "train.log", "a") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        code = subprocess.call(
            command, stdout=log, stderr=subprocess.STDOUT, pass_fds=() if claim is None else (claim.fd,)
        )
    if code != 0:
        raise RuntimeError(f"training {arm.name} seed {seed} failed (exit {code}); see {folder / 'train.log'}")
    run = {
        "arm": arm.name,
        "recipe": arm.recipe,
        "seed": seed,
        "settings_hash": settings_hash(settings),
        "seconds": time.perf_counter() - start,
        "resumed": resume,
        "environment": environment(),
    }
    atomic_write(done, json.dumps(run, indent=2))
    # A finished cell is never resumed: its checkpoints (weights plus optimizer state, ~2 GB for SmolLM2) only fill
    # the disk. The final model stays in the folder for the evaluation.
    for checkpoint in folder.glob("checkpoint-*"):
        shutil.rmtree(checkpoint, ignore_errors=True)
    return run


def eval_arguments(
    study: Study, arm: Arm, models: list[str], output_dir: str | Path, max_new_tokens: int | None = None
):
    """Held-out sampling in the format and token budget the arm was trained with (its merged recipe, parsed as the
    training command parses it: a `max_completion_length`, held-out or prompt setting of the study reaches the
    evaluation), on the first `study.tier_sizes()` problems of each tier of the held-out split the arm's training
    left out (drawn as training draws it, so the few-shot examples are the training's). `max_new_tokens`: another
    budget than the trained one."""
    from aer_bench.training import BenchEvalArguments, parse_recipe

    eval_dir = Path(output_dir) / "eval"
    eval_dir.mkdir(parents=True, exist_ok=True)
    recipe = eval_dir / f".recipe-{arm.recipe}-{settings_hash(study.merged(arm))}.yaml"
    atomic_write(recipe, yaml.safe_dump(study.merged(arm), sort_keys=True, allow_unicode=True))
    script_args, training_args, _ = parse_recipe(["--config", str(recipe), "--output_dir", str(eval_dir)])
    return BenchEvalArguments(
        models=models,
        benchmarks=["arithmetic"],
        output_dir=str(eval_dir),
        num_samples=study.eval_samples,
        k_list=list(range(1, study.eval_samples + 1)),
        max_new_tokens=max_new_tokens or training_args.max_completion_length,
        temperature=1.0,
        seed=0,
        batch_size=8,
        arithmetic_test_per_tier=script_args.arithmetic_test_per_tier,
        arithmetic_test_extra=script_args.arithmetic_test_extra,
        arithmetic_eval_per_tier=study.tier_sizes(),
        **prompt_settings(script_args),
    )


def held_out(study: Study, arm: Arm, model: str, output_dir: str | Path) -> dict:
    """pass@k overall and per tier of one model on the held-out split (resumable through the harness's store), at
    the trained budget; with the study's `eval_long_tokens`, the same sampled again at that budget under `longer`
    (the same sampling seeds: a completion's first tokens are those of the shorter budget's, so an answer found only
    at the longer budget was cut off by the shorter one)."""
    from aer_trl.app.evaluation import evaluate

    metrics = evaluate(eval_arguments(study, arm, [model], output_dir))
    passk = next(iter(metrics.values()))["arithmetic"]
    if study.eval_long_tokens:
        longer = evaluate(eval_arguments(study, arm, [model], output_dir, study.eval_long_tokens))
        passk["longer"] = next(iter(longer.values()))["arithmetic"]
    return passk
