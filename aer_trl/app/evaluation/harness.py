"""The evaluation harness: pass@k / mean@n of models on math benchmarks, exact after any interruption or change.

Which file does what (each readable alone):
- `args.py`: `EvalArguments`, the keys of `recipes/evaluate.py` (prompt format keys shared with training);
- `backends.py`: `transformers` (CPU/GPU) or vLLM (GPU); a generator samples one chunk of prompts from one seed;
- `plan.py`: problems in the run's prompt format, chunks (the determinism contract), generating what is missing
  (in one process or one worker per GPU);
- `store.py`: the fingerprinted generations store (torn lines repaired, fsync'ed appends);
- `scoring.py`: verdicts and pass@k per (model, benchmark) over exactly the planned problems;
- `reports.py`: `metrics.json` (merged over runs), `table.md`, `passk.png`.

This module runs them in order: `evaluate(args)`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..files import lock_folder, unlock
from .args import EvalArguments, sample_groups
from .backends import TransformersGenerator, VLLMGenerator, check_model, choose_backend, default_factory
from .plan import Plan, Problem, generate_missing, load_problems, make_plans, prompt_text, run_workers
from .reports import write_reports
from .scoring import judge, score

__all__ = [
    "EvalArguments",
    "Plan",
    "Problem",
    "TransformersGenerator",
    "VLLMGenerator",
    "check_model",
    "evaluate",
    "judge",
    "load_problems",
    "make_plans",
    "prompt_text",
    "score",
]


EVAL_LOCK = "_aer_trl_eval.lock"


def evaluate(args: EvalArguments, generator_factory=None) -> dict:
    """Run (or resume) the evaluation; returns the metrics of this run's models and benchmarks (`metrics.json` also
    keeps the entries of earlier runs into the same folder)."""
    if not args.models:
        raise ValueError("models: give at least one checkpoint folder or Hub id")
    lock = lock_folder(  # two evaluations in one folder repair and rewrite each other's store and metrics.json
        args.output_dir,
        EVAL_LOCK,
        "evaluation is writing into it",
        "Wait for it (its samples are then reused here), or give this one another output_dir.",
    )
    try:
        backend = choose_backend(args.backend)
        metrics: dict = {}
        for run in sample_groups(args):  # one run per sample count (the appendix: 32 on AIME, 8 on the others)
            plans = make_plans(run, backend)
            workers = run.data_parallel or (torch.cuda.device_count() if backend == "vllm" else 1)
            if generator_factory is not None or workers <= 1:
                generate_missing(run, plans, generator_factory or default_factory(backend))
            else:
                run_workers(run, plans, backend, workers, lock)
            for model, per_bench in score(run, plans).items():
                metrics.setdefault(model, {}).update(per_bench)
        if args.num_samples_per_benchmark:
            write_reports(args, metrics)  # the table over every benchmark, laid out as `args` asks
        return metrics
    finally:  # released and removed however the evaluation ends
        unlock(lock, Path(args.output_dir) / EVAL_LOCK)
