"""What this machine runs fast: the advice the trainer gives a user whose settings would run many times slower here
than they need to (logged once at start, never acted on: the user's settings are kept), and how many of its cores a
run is told to use (`busy_cores`, `cpu_threads`: the cores a busy machine leaves free; `env_count`: AER_CPU_THREADS,
AER_VERIFY_WORKERS)."""

from __future__ import annotations

import os

import torch


def cpu_has_bf16_kernels() -> bool:
    """Whether PyTorch multiplies bfloat16 matrices on this CPU with oneDNN's kernels (x86 with AVX-512 or AMX, Arm
    with bf16). Without them (an AVX2-only CPU, e.g. AMD EPYC Milan) a bf16 matmul falls back to PyTorch's reference
    GEMM. True when torch cannot say."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True


def cpu_bf16_warning(device, bf16: bool, model) -> str | None:
    """What to tell a user who trains in bfloat16 (`bf16=True`: autocast, TRL's default; or bf16 weights) on a CPU
    without bf16 matrix kernels (`cpu_has_bf16_kernels`): every matmul then runs in PyTorch's reference GEMM. Measured
    on a 2-core AMD EPYC (AVX2), SmolLM2-135M, 32 completions of 138 tokens, GRPO: 198-200 s per step under bf16
    autocast against 18 s in float32 (docs/usage.md). None where it does not apply."""
    if torch.device(device).type != "cpu":
        return None
    weights = any(p.dtype == torch.bfloat16 for p in model.parameters())
    if not (bf16 or weights) or cpu_has_bf16_kernels():
        return None
    what = "bf16=True (autocast)" if bf16 else "the model's bfloat16 weights"
    return (
        f"{what} on a CPU without bfloat16 matrix kernels (torch.ops.mkldnn._is_mkldnn_bf16_supported() is False: "
        "no AVX-512 or AMX): every bf16 matmul runs in PyTorch's reference GEMM, about 10x slower per step than "
        "float32 (measured: 200 s against 18 s for SmolLM2-135M). Train in float32 here: bf16=False"
        + ("" if bf16 else " and dtype='float32'")
    )


def cpu_threads(cores: int, load: float | None, processes: int = 1) -> tuple[int, str | None]:
    """The torch threads each of a run's `processes` gets on a CPU of `cores` cores of which `load` are busy with
    other work (`busy_cores`): its share of the cores left free, at least 1, and, where the load took threads away,
    what to tell the user. Threads that spin against another job's on the same cores make both far slower: measured on
    2 busy cores, one SmolLM2-135M RLOO step took 258 s with 2 threads and 58 s with 1 (docs/lab.md)."""
    share = max(1, cores // processes)
    if load is None:
        return share, None
    free = max(1, round(cores - load))
    threads = max(1, min(share, free // processes))
    if threads == share:
        return share, None
    return threads, (
        f"the CPU is busy ({load:.1f} of {cores} cores in use by other work): this run uses {threads} thread(s) per "
        f"process instead of {share}, since threads that spin against another job's run several times slower "
        "(measured: 258 s against 58 s a step on 2 busy cores). AER_CPU_THREADS=N sets the count"
    )


def busy_cores(interval: float = 0.5) -> float | None:
    """How many of the machine's cores other work keeps busy now: the CPU time used in the next `interval` seconds
    (this process waits meanwhile), in cores. Not the 1-minute load average, which lags: a run started just after
    another job ended would take fewer threads than the idle machine has, for the whole run. None where it cannot be
    read."""
    try:
        import psutil

        return psutil.cpu_percent(interval=interval) / 100 * (os.cpu_count() or 1)
    except (ImportError, OSError, RuntimeError):
        return None


def env_count(name: str) -> int | None:
    """The positive whole number in environment variable `name`; None when it is unset, empty or 0 (the default
    applies). Anything else is refused with the variable's name: a typo must not quietly become another setting."""
    value = os.environ.get(name, "").strip()
    try:
        count = int(value or 0)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"{name} must be a whole number of at least 1 (or 0/unset for the default), got {value!r}")
    return count or None
