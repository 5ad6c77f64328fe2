"""`PassAtKCallback`: the paper's checkpoint selection during training (validate every N optimizer steps, keep the
checkpoint with the best pass@1)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from .harness import EvalArguments, TransformersGenerator, judge, load_problems
from .passk import mean_pass_at_k


def _dist():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class PassAtKCallback(TrainerCallback, ExportableState):
    """Evaluates pass@k on a benchmark every `eval_steps` optimizer steps and keeps the best checkpoint by pass@1.

    - When pass@1 improves, the Trainer is asked to save a checkpoint at that step, and the step is recorded as the
      Trainer's best (`state.best_global_step` / `best_metric`), so `save_total_limit` rotation never deletes it;
      `<output_dir>/best_checkpoint.json` is written once that checkpoint is on disk, so it always points to a folder
      that exists. Metrics are logged as `eval_passk/<benchmark>/pass@k`.
    - Sampling runs inside a forked RNG (CPU and every CUDA device): the training RNG is exactly as it was.
    - With several processes (DDP or DeepSpeed), each samples a share of the problems (problem i on rank
      i % world size; each problem has its own seed, so the result does not depend on the split), every rank making
      the same number of generate calls (ZeRO-3 runs them in step through transformers' `synced_gpus`); the counts
      are gathered, and every rank computes the same pass@k and agrees on the best checkpoint.
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
        if eval_steps < 1:
            raise ValueError(f"eval_steps must be >= 1, got {eval_steps}")
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
        self._problems = None

    def state(self) -> dict:
        return {
            "args": dict(self._init),
            "attributes": {
                "best_pass_at_1": self.best_pass_at_1,
                "best_step": self.best_step,
                "history": self.history,
            },
        }

    def on_train_begin(self, args, state, control, **kwargs):
        if self.best_step is None and state.best_global_step:  # resumed without the callback's own state
            self.best_step, self.best_pass_at_1 = state.best_global_step, state.best_metric
        if args.save_strategy == "no":
            raise ValueError("PassAtKCallback (eval_benchmark) saves the best checkpoint: set save_strategy 'steps'")

    def evaluate(self, model, tokenizer) -> dict[str, float]:
        """pass@k of `model` on the benchmark, identical on every rank."""
        if self._problems is None:
            self._problems = load_problems(self.benchmark, self.eval_args, tokenizer)
        rank, world = _dist()
        generator = TransformersGenerator(model, tokenizer, self.eval_args)
        counts = {}
        # every rank makes the same number of generate calls (ZeRO-3's sharded forward needs them in step:
        # transformers' synced_gpus); a rank without a problem left samples the first one again and drops it
        for start in range(0, len(self._problems), world):
            index = start + rank
            problem = self._problems[index] if index < len(self._problems) else self._problems[0]
            (completions,) = generator([problem.text], [problem.seed])
            if index < len(self._problems):
                correct, _ = judge(completions, problem.answer)
                counts[problem.index] = (len(correct), sum(correct))
        if world > 1:
            gathered = [None] * world
            torch.distributed.all_gather_object(gathered, counts)
            counts = {i: c for part in gathered for i, c in part.items()}
        ordered = [counts[p.index] for p in self._problems]
        return {f"pass@{k}": mean_pass_at_k(ordered, k) for k in self.eval_args.k_list}

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.eval_steps != 0:
            return
        result = self.evaluate(model, processing_class)
        self.history.append({"step": state.global_step, **result})
        state.log_history.append(
            {f"eval_passk/{Path(self.benchmark).stem}/{k}": v for k, v in result.items()} | {"step": state.global_step}
        )
        if self.best_pass_at_1 is None or result["pass@1"] > self.best_pass_at_1:
            self.best_pass_at_1, self.best_step = result["pass@1"], state.global_step
            # transformers protects `best_global_step`'s checkpoint from `save_total_limit` rotation
            state.best_global_step, state.best_metric = self.best_step, self.best_pass_at_1
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        if self.best_step is None or not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{self.best_step}"
        if not folder.is_dir():
            return  # not saved yet (or saved under another run dir): keep the last valid pointer
        best = {"step": self.best_step, "pass@1": self.best_pass_at_1, "checkpoint": str(folder)}
        path = Path(args.output_dir) / "best_checkpoint.json"
        tmp = path.with_name(f".best_checkpoint.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(best, indent=2))
        os.replace(tmp, path)
