"""`PassAtKCallback`: the paper's checkpoint selection during training (validate every N optimizer steps, keep the
checkpoint with the best pass@1)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from ...atomic import atomic_write
from ...core_algos import rollout_steps
from ...settings import describe_changes
from ..prompts import prompt_settings
from .args import EvalArguments
from .backends import TransformersGenerator
from .passk import passk_summary
from .plan import load_problems, make_chunks
from .scoring import judge

logger = logging.getLogger(__name__)


def _dist():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def assigned_chunks(n: int, rank: int, world: int, generator) -> list[int]:
    """Which of `n` chunks this rank samples. A `main_only` generator (a vLLM server): all on rank 0. A `lockstep`
    one (transformers' generate, which ZeRO-3 runs in step through `synced_gpus`): every rank the same number of
    calls, an index >= n meaning "sample chunk 0 again and drop it". Otherwise chunk i on rank i % world."""
    if getattr(generator, "main_only", False):
        return list(range(n)) if rank == 0 else []
    if generator.lockstep:
        return list(range(rank, n + (-n) % world, world))
    return list(range(rank, n, world))


class PassAtKCallback(TrainerCallback, ExportableState):
    """Evaluates pass@k on a benchmark every `eval_steps` optimizer steps and keeps the best checkpoint by pass@1.

    - When pass@1 improves, the Trainer is asked to save a checkpoint at that step, and the step is recorded as the
      Trainer's best (`state.best_global_step` / `best_metric`), so `save_total_limit` rotation never deletes it;
      `<output_dir>/best_checkpoint.json` is written once that checkpoint is on disk, so it always points to a folder
      that exists. Metrics are logged as `eval_passk/<benchmark>/pass@k`.
    - Sampling runs inside a forked RNG (CPU and every CUDA device): the training RNG is exactly as it was.
    - Sampling is the harness's: problems in chunks of `batch_size`, one seeded `generate` call per chunk with the
      prompts prefilled once, prompts built in the run's prompt format (`prompt_args`: the training run's
      `prompt_*` settings), so validation sees the format training sees.
    - With several processes (DDP or DeepSpeed), each samples a share of the chunks (chunk i on rank i % world size;
      a chunk's samples do not depend on where it runs), every rank making the same number of generate calls
      (ZeRO-3 runs them in step through transformers' `synced_gpus`); the counts are gathered, and every rank
      computes the same pass@k and agrees on the best checkpoint.
    - `sampler_factory` (set by the training entry point when `eval_engine` is vLLM, `evaluation.engine_samplers`):
      samples come from the run's own vLLM engine instead of `generate` (colocated: each rank its own chunks, no
      lockstep; server: the main process samples every chunk)."""

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
        prompt_args=None,
        chat_template_kwargs: dict | None = None,
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
        prompt = prompt_settings(prompt_args) if prompt_args is not None else {}
        if chat_template_kwargs:  # the run's (TRL's `chat_template_kwargs`): part of the prompts it measures
            prompt["chat_template_kwargs"] = dict(chat_template_kwargs)
        self.eval_args = EvalArguments(models=["<training>"], benchmarks=[benchmark], **sampling, **prompt)
        self._init = dict(benchmark=benchmark, eval_steps=eval_steps, **sampling)  # what `state()` saves
        if chat_template_kwargs:
            self._init["chat_template_kwargs"] = dict(chat_template_kwargs)
        # what a pass@1 figure measures: two figures compare only when these agree (the best after a resume)
        self.measure = dict(
            benchmark=benchmark, max_new_tokens=max_new_tokens, temperature=temperature, max_problems=max_problems
        )
        self.measure.update(prompt)
        self.best_pass_at_1: float | None = None
        self.best_step: int | None = None
        self.history: list[dict] = []
        self._restored = False  # the best so far was set from a checkpoint's state by `restore`
        self._problems = None
        self.sampler_factory = None  # EvalArguments -> generator; None: transformers' generate on the model

    def state(self) -> dict:
        return {
            "args": dict(self._init),
            "attributes": {
                "best_pass_at_1": self.best_pass_at_1,
                "best_step": self.best_step,
                "history": self.history,
                "measure": self.measure,
            },
        }

    def restore(self, saved: dict) -> dict[str, tuple]:
        """On resume (`aer_trl.resume`): the best pass@1 so far and the history from a checkpoint's `state()`, this
        run's settings kept. Returns what the figures measure that differs (field -> (saved, current)), named in a
        warning: then the saved best is not comparable with this run's figures and is not restored; the next
        validation sets the best afresh (until then the saved best checkpoint stays protected from rotation)."""
        attributes, arguments = saved.get("attributes", {}), saved.get("args", {})
        measured = attributes.get("measure")
        if measured is None:  # a checkpoint from before `measure` was saved: what its arguments say, and only that
            measured = {k: arguments[k] for k in self.measure if k in arguments}
            keys = sorted(measured)
        else:
            keys = sorted(measured.keys() | self.measure.keys())
        changes = {k: (measured.get(k), self.measure.get(k)) for k in keys if measured.get(k) != self.measure.get(k)}
        self.history = list(attributes.get("history", []))
        self._restored = True
        if not changes:
            self.best_pass_at_1, self.best_step = attributes.get("best_pass_at_1"), attributes.get("best_step")
        elif _dist()[0] == 0:
            logger.warning(
                "resuming with validation that measures something else than the checkpoint's (%s): its best pass@1 "
                "so far (%s at step %s) is not comparable, so the next validation sets the best afresh",
                describe_changes(changes),
                attributes.get("best_pass_at_1"),
                attributes.get("best_step"),
            )
        return changes

    def on_train_begin(self, args, state, control, **kwargs):
        trained = getattr(args, "chat_template_kwargs", None) or {}
        if trained != (self.eval_args.chat_template_kwargs or {}):
            raise ValueError(
                f"PassAtKCallback: the run formats its prompts with chat_template_kwargs={trained!r}, this callback "
                f"with {self.eval_args.chat_template_kwargs!r}; pass chat_template_kwargs={trained!r} so that "
                "validation measures the prompts the run trains on"
            )
        # the run's chat template (set on its tokenizer, which validation formats with): a vLLM engine's own tokenizer
        # gets it too, so the prompt ids are the template's (one BOS), as the run's rollouts
        self.eval_args.chat_template_path = getattr(args, "chat_template_path", None)
        # and the run's stop strings (a base model's recipe stops where it would begin a next question)
        generation = getattr(args, "generation_kwargs", None) or {}
        stop = generation.get("stop") or generation.get("stop_strings") or None
        self.eval_args.stop = [stop] if isinstance(stop, str) else stop
        if self.best_step is None and state.best_global_step and not self._restored:  # resumed without its state
            self.best_step, self.best_pass_at_1 = state.best_global_step, state.best_metric
        if args.save_strategy == "no":
            raise ValueError("PassAtKCallback (eval_benchmark) saves the best checkpoint: set save_strategy 'steps'")
        steps = rollout_steps(args)
        if getattr(args, "aer_measurements", False) and steps:
            if self.eval_steps % steps:
                # AERCallback vetoes a checkpoint inside a rollout batch: the best one would never be written
                raise ValueError(
                    f"eval_every_steps={self.eval_steps} must be a multiple of {steps}, the optimizer steps of one "
                    "rollout batch (steps_per_generation × num_iterations / gradient_accumulation_steps): AER "
                    "checkpoints only at a rollout boundary, so a best checkpoint found inside one could not be saved"
                )

    def evaluate(self, model, tokenizer) -> dict[str, float]:
        """pass@k of `model` on the benchmark, identical on every rank."""
        if self._problems is None:
            self._problems = load_problems(self.benchmark, self.eval_args, tokenizer)
        rank, world = _dist()
        if self.sampler_factory is not None:
            generator = self.sampler_factory(self.eval_args)
        else:
            generator = TransformersGenerator(model, tokenizer, self.eval_args)
        chunks = make_chunks(self._problems, self.eval_args.batch_size, self.eval_args.seed)
        counts = {}
        try:
            for index in assigned_chunks(len(chunks), rank, world, generator):
                chunk = chunks[index] if index < len(chunks) else chunks[0]
                samples = generator([p.text for p in chunk.problems], chunk.seed)
                if index < len(chunks):
                    for problem, completions in zip(chunk.problems, samples):
                        correct, _ = judge(completions, problem.answer, problem.text)
                        counts[problem.index] = (len(correct), sum(correct))
        finally:  # an engine sampler puts its engine back to sleep once, after the last chunk
            if hasattr(generator, "close"):
                generator.close()
        if world > 1:
            gathered = [None] * world
            torch.distributed.all_gather_object(gathered, counts)
            counts = {i: c for part in gathered for i, c in part.items()}
        summary = passk_summary([counts[p.index] for p in self._problems], self.eval_args.k_list)
        return {f"pass@{k}": summary[f"pass@{k}"] for k in summary["k_list"]}

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
        atomic_write(Path(args.output_dir) / "best_checkpoint.json", json.dumps(best, indent=2))
