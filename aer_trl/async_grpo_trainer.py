"""`AERAsyncGRPOTrainer`: TRL's experimental `AsyncGRPOTrainer` with AER (docs/design.md, "AER under stale rollouts").

TRL's asynchronous GRPO trains on samples a rollout worker drew with a policy up to `max_staleness` versions old,
packed into rows of a prefix trie; its fused head computes each trained token's entropy with gradient, and only logs
it. The adapter wires those seams to the AER core (`aer_trl.core`):

- groups: the rollout queue is read a whole group at a time (`GroupedRollouts`), so each sample carries its group's
  accuracy g(q) (from the correctness reward the worker recorded, `metrics["rewards/<name>"]`) however the planner
  later splits the group across micro-batches and steps; the collator hands g and the sample's policy version to the
  loss per trained token;
- loss: λ_i from g and the α in force *when the sample is trained* (C1); the bonus `mean_i(λ_i · H_i)` over the
  row's completions, H_i their mean token entropy (with gradient, from the forward TRL's loss ran), scaled for
  gradient accumulation as TRL scales its loss;
- controller: the token-weighted entropy of an optimizer step's micro-batches (all processes) is H_t; α moves once
  per optimizer step (C2 + C3), the version the trainer publishes at each weight sync (`weight_sync_steps` 1);
- staleness: entropy, λ and sample counts per lag (policy versions between sampling and training), `aer/lag/<k>/*`;
  `aer_max_lag` keeps older samples out of H_t and the bonus.
"""

from __future__ import annotations

import collections
import inspect
import itertools
import json
import logging
import math
import queue
import warnings
from pathlib import Path

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

with warnings.catch_warnings():  # TRL warns on every import from trl.experimental
    warnings.simplefilter("ignore")
    from trl.experimental.async_grpo import AsyncGRPOTrainer
    from trl.experimental.async_grpo import async_grpo_trainer as trl_async

from .adapter import AERTrainerBase
from .async_grpo_config import AERAsyncGRPOConfig
from .atomic import atomic_write
from .families import family
from .metrics import log_rollout
from .upstream.rebind import with_names
from .upstream.trl_async import peak_flops_per_device, use_tree_attention_by_device

logger = logging.getLogger(__name__)

GROUP_ACCURACY, SAMPLE_VERSION = "aer/group_accuracy", "sample/model_version"
ROLLOUT_STATE = "rollout_state.json"  # TRL's name and layout for the rollout position in a checkpoint
ROLLOUT_INFLIGHT = "rollout_inflight.json"  # the local worker's sampled, untrained groups (`local_rollout_lag`)


class GroupedRollouts:
    """The rollout queue, read a whole group at a time: a group's samples are handed on together once
    `group_size` of them arrived (or, on a timeout, as far as they came), each stamped with its group's accuracy g
    (`metrics["aer/group_accuracy"]`: the share of its scored samples that `correct` counts correct, the rule of every
    AER trainer: correctness reward ≥ aer_correctness_threshold) and its policy version. A sample without the
    correctness reward is refused naming what is missing. Drop-in for the queue TRL's `RolloutQueueDataset` reads
    (`get`, `qsize`, `put_nowait`)."""

    def __init__(self, rollout_queue, group_size: int, correctness_key: str, correct):
        self.queue = rollout_queue
        self.group_size = group_size
        self.key = correctness_key
        self.correct = correct  # correctness reward values -> 1/0, NaN where unscored (`AERCore.correct`)
        self.pending: dict = collections.OrderedDict()  # group_id -> samples so far
        self.ready: collections.deque = collections.deque()
        self.partial_groups = 0

    def qsize(self) -> int:
        return self.queue.qsize() + len(self.ready) + sum(map(len, self.pending.values()))

    def put_nowait(self, item) -> None:
        self.queue.put_nowait(item)

    def _stamp(self, samples: list) -> None:
        for sample in samples:
            if self.key not in sample.metrics:
                raise KeyError(
                    f"aer_correctness_reward: the rollout samples carry no {self.key!r} (they record "
                    f"{sorted(k for k in sample.metrics if k.startswith('rewards/'))}): name one of those rewards, "
                    "or have the rollout worker record it as TRL's does (metrics['rewards/<reward name>'])"
                )
        rewards = torch.tensor([float(sample.metrics[self.key]) for sample in samples], dtype=torch.float64)
        correct = self.correct(rewards)
        scored = correct[~torch.isnan(correct)]
        g = float(scored.double().mean()) if scored.numel() else math.nan
        for sample in samples:
            sample.metrics = {**sample.metrics, GROUP_ACCURACY: g, SAMPLE_VERSION: float(sample.model_version)}

    def _release(self, group_id) -> None:
        samples = self.pending.pop(group_id)
        self._stamp(samples)
        self.ready.extend(samples)

    def get(self, timeout=None):
        while not self.ready:
            try:
                sample = self.queue.get(timeout=timeout)
            except queue.Empty:
                if not self.pending:
                    raise
                self.partial_groups += 1  # the rest of the oldest group never came in time: hand on what did
                self._release(next(iter(self.pending)))
                break
            self.pending.setdefault(sample.group_id, []).append(sample)
            if len(self.pending[sample.group_id]) >= self.group_size:
                self._release(sample.group_id)
        return self.ready.popleft()


class AERCollator(trl_async.DataCollatorForRollout):
    """TRL's collator, plus each trained token's group accuracy and sampling policy version (`aer_group_accuracy`,
    `aer_sample_version`, laid out as `token_index`), for the loss; and the telemetry the synchronous trainers log,
    under their keys: `completions/mean_length` and `rewards/<name>/mean` (TRL's asynchronous GRPO logs the latter as
    `rewards/<name>`, kept too)."""

    def torch_call(self, examples):
        before = {key: len(values) for key, values in self.metrics.items() if key.startswith("rewards/")}
        batch = super().torch_call(examples)
        (rows,) = examples
        lengths = [float(s["completion_mask"].sum()) for row in rows for s in row.samples]
        self.metrics["completions/mean_length"].append(sum(lengths) / max(1, len(lengths)))
        for key, values in list(self.metrics.items()):
            if key.startswith("rewards/") and not key.endswith("/mean") and len(values) > before.get(key, 0):
                self.metrics[f"{key}/mean"].append(values[-1])
        width = batch["segment_id"].shape[1]
        g = torch.full((len(rows), width), math.nan)
        version = torch.full((len(rows), width), math.nan)
        for r, row in enumerate(rows):
            per_sample_g = torch.tensor([s["metrics"].get(GROUP_ACCURACY, math.nan) for s in row.samples])
            per_sample_v = torch.tensor([s["metrics"].get(SAMPLE_VERSION, math.nan) for s in row.samples])
            segments = batch["segment_id"][r].clamp(max=len(row.samples) - 1)
            g[r], version[r] = per_sample_g[segments], per_sample_v[segments]
        batch["aer_group_accuracy"], batch["aer_sample_version"] = g, version
        return batch


class TrainedGroups(set):
    """TRL's record of the groups trained (`_trained_groups`), which its collator fills as it collates a micro-batch.
    accelerate's data loader collates one micro-batch ahead of training, so at a step's end the groups of the latest
    collate are not trained yet: `first_untrained` leaves them out (TRL's `rollout_state.json` counts them as
    trained, and a resume skips their prompts)."""

    latest: frozenset = frozenset()

    def update(self, *groups) -> None:
        self.latest = frozenset().union(*groups)
        super().update(self.latest)

    def first_untrained(self) -> int:
        trained = self - self.latest
        return next(g for g in itertools.count() if g not in trained)


class AERAsyncGRPOTrainer(AERTrainerBase, AsyncGRPOTrainer):
    """Asynchronous GRPO with Adaptive Entropy Regularization. Same constructor as TRL's `AsyncGRPOTrainer` (a model
    path, reward functions, `rollout_worker` / `weight_transfer` to bring one's own); `args` is an
    `AERAsyncGRPOConfig`. Built through the same constructor as the other AER trainers (`AERTrainerBase`). The tree
    attention follows the trainer's device: TRL's FA3 kernel on a CUDA device that loads it, torch elsewhere
    (`aer_trl.upstream.trl_async`); `aer_trl.upstream.local_rollout` gives a rollout worker that needs no vLLM
    server."""

    config_class = AERAsyncGRPOConfig
    _tag_names = ["trl", family("async_grpo").tag, "aer", "aer_trl"]
    _name = "AER-AsyncGRPO"
    _aer_micro = 0  # micro-steps trained, for the controller's once-per-optimizer-step cadence

    # TRL's constructor and data loader, one module-level name each bound to ours (`upstream.rebind.with_names`):
    # - `get_peak_flops_per_device`: TRL's asks `torch.cuda` for the device's name, which raises off CUDA (a CPU
    #   run); ours returns None there (no MFU logged) and TRL's value on CUDA;
    # - `DataCollatorForRollout`: TRL's collator plus each trained token's group accuracy and policy version
    #   (`AERCollator`), which only the collator can lay out (it alone sees the samples of a packed row).
    _trl_init = with_names(AsyncGRPOTrainer.__init__, get_peak_flops_per_device=peak_flops_per_device)
    _trl_train_dataloader = with_names(AsyncGRPOTrainer.get_train_dataloader, DataCollatorForRollout=AERCollator)

    def _build_trl(self, model, reward_funcs, args, *pos_args, **kwargs) -> None:
        trl_args = (
            inspect.signature(AsyncGRPOTrainer.__init__)
            .bind(self, model, reward_funcs, args, *pos_args, **kwargs)
            .arguments
        )
        trl_args.pop("self")
        funcs = trl_args.get("reward_funcs")
        self._aer_reward_funcs = funcs if isinstance(funcs, list) else [funcs] if funcs is not None else []
        if args.local_rollouts:
            trl_args.update(self._local_rollouts(model, args, trl_args))
        self._trl_init(**trl_args)

    @staticmethod
    def _local_rollouts(model, args, trl_args: dict) -> dict:
        """`local_rollouts`: the local worker and its weight transfer, sharing the trainer's tokenizer (so the chat
        template set on it reaches the worker); what the worker cannot do is refused by name."""
        from transformers import AutoTokenizer

        from .upstream.local_rollout import local_rollouts

        for name in ("rollout_worker", "weight_transfer", "tools", "environment_factory"):
            if trl_args.get(name) is not None:
                raise ValueError(
                    f"local_rollouts=True builds the rollout worker and its weight transfer, which sample without "
                    f"tools or environments, but `{name}` was given: pass local_rollouts=False to use it"
                )
        if trl_args.get("processing_class") is None:  # TRL would load it from the same path: load it once, for both
            trl_args["processing_class"] = AutoTokenizer.from_pretrained(
                model, trust_remote_code=args.trust_remote_code
            )
        return local_rollouts(
            model, trl_args.get("reward_funcs"), args, trl_args.get("train_dataset"), trl_args["processing_class"]
        )

    def aer_reward_names(self) -> list[str]:
        """TRL's names of the rewards the rollout worker records (`metrics["rewards/<name>"]`): the worker's own list
        where it has one (TRL's worker and the local one: environment-owned rewards included), else the reward
        functions' names by TRL's rule; where neither names any (a worker that scores by itself), the one
        `aer_correctness_reward` names. Rank 0's, on every process."""
        from accelerate.utils import broadcast_object_list
        from trl.trainer.utils import get_callable_name

        names = getattr(self.rollout_worker, "reward_func_names", None)
        if names is None:
            names = [get_callable_name(f) for f in self._aer_reward_funcs]
        if not names and isinstance(self.args.aer_correctness_reward, str):
            names = [self.args.aer_correctness_reward]
        return broadcast_object_list([list(names)], from_process=0)[0]

    def _aer_wire(self, args) -> None:
        use_tree_attention_by_device(self.model)
        if args.local_rollout_lag is not None:
            self._schedule_local_worker(args)
        self._trained_groups = TrainedGroups(self._trained_groups)  # before the data loader shares it
        if self.aer_core.on and self.accelerator.is_main_process:
            key = f"rewards/{self.aer_core.correctness_name}"
            self.rollout_queue = GroupedRollouts(self.rollout_queue, args.num_generations, key, self.aer_core.correct)

    def add_callback(self, callback):
        """TRL adds two `StepIntervalCallback`s on purpose (the weight sync and the step metrics); transformers warns,
        with the whole list of callbacks, about any second callback of one class. Those two are added without the
        warning; every other callback goes through transformers' check."""
        if isinstance(callback, trl_async.StepIntervalCallback):
            self.callback_handler.callbacks.append(callback)
            return
        super().add_callback(callback)

    # -- resume: TRL saves and restores the rollout position (`rollout_state.json`: the first untrained prompt, the
    # policy version) for its own vLLM worker only (an isinstance check); the local worker's is kept alike, so that a
    # resumed run goes on with the prompt order and the version count instead of starting both over.
    def _local_worker(self):
        from .upstream.local_rollout import LocalRolloutWorker

        return self.rollout_worker if isinstance(self.rollout_worker, LocalRolloutWorker) else None

    def _schedule_local_worker(self, args) -> None:
        """`local_rollout_lag`: the local worker samples on the lockstep schedule (`LocalRolloutWorker.schedule`)."""
        worker = self._local_worker()
        if worker is None and self.accelerator.is_main_process:
            raise ValueError(
                "local_rollout_lag schedules aer_trl's LocalRolloutWorker (local_rollouts=True); the rollout worker "
                f"given is a {type(self.rollout_worker).__name__}: unset local_rollout_lag"
            )
        if worker is not None:
            samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
            worker.schedule(args.local_rollout_lag, samples * self.accelerator.num_processes)
            if hasattr(self.weight_transfer, "timeout_s"):  # a LocalWeightTransfer: how long a sync waits for it
                self.weight_transfer.timeout_s = args.weight_sync_timeout

    def _save_checkpoint(self, model, trial):
        worker = self._local_worker()
        if worker is not None and self.accelerator.is_main_process:
            folder = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            first = worker.start_group + self._trained_groups.first_untrained()
            published = self.state.global_step % self.args.weight_sync_steps == 0  # the worker holds these weights
            state = {"prompt_index": first, "model_version": self.model_version, "weights_published": published}
            atomic_write(folder / ROLLOUT_STATE, json.dumps(state))
            if worker.lag is not None:
                groups = worker.inflight(first, below_version=self.model_version)
                inflight = {"local_rollout_lag": worker.lag, "samples_per_step": worker.samples_per_step}
                atomic_write(folder / ROLLOUT_INFLIGHT, json.dumps({**inflight, "groups": groups}))
        super()._save_checkpoint(model, trial)

    def _inner_training_loop(self, *args, **kwargs):
        worker, resume = self._local_worker(), kwargs.get("resume_from_checkpoint")
        if worker is not None:
            worker.start_group = worker.next_group = self._groups_before_resume = 0
            worker.replay = {}
            state_file = Path(resume) / ROLLOUT_STATE if resume else None
            if state_file is not None and state_file.is_file():
                state = json.loads(state_file.read_text())
                worker.start_group = worker.next_group = self._groups_before_resume = int(state["prompt_index"])
                # the first sync of the resumed run publishes the checkpoint's weights: where the checkpoint's run had
                # published them already, they keep the version they had (the lags are the uninterrupted run's)
                version = int(state["model_version"]) - bool(state.get("weights_published", False))
                self.model_version = self.weight_transfer.syncs = worker.model_version = version
                if worker.lag is not None:
                    self._load_inflight(worker, Path(resume))
                else:
                    logger.warning(
                        "resuming with the free-running local worker: the groups in flight at the checkpoint are "
                        "sampled again with its weights, so the steps after it differ from the uninterrupted run's "
                        "(local_rollout_lag gives an exact resume)"
                    )
            elif state_file is not None:
                logger.warning("%s has no %s: the local rollout worker starts from prompt 0", resume, ROLLOUT_STATE)
        return super()._inner_training_loop(*args, **kwargs)

    @staticmethod
    def _load_inflight(worker, checkpoint: Path) -> None:
        """The checkpoint's groups sampled by versions older than its own (`rollout_inflight.json`), queued first."""
        path = checkpoint / ROLLOUT_INFLIGHT
        if not path.is_file():
            logger.warning(
                "%s has no %s (a run without local_rollout_lag): its untrained groups are sampled again with the "
                "checkpoint's weights, so the resumed run is not the uninterrupted one", checkpoint, ROLLOUT_INFLIGHT
            )  # fmt: skip
            return
        saved = json.loads(path.read_text())
        for name, now in (("local_rollout_lag", worker.lag), ("samples_per_step", worker.samples_per_step)):
            if saved[name] != now:
                logger.warning(
                    "%s: the checkpoint's run had %s=%s, this one %s: the schedule changes from the checkpoint on",
                    path, name, saved[name], now,
                )  # fmt: skip
        worker.load_inflight({int(k): v for k, v in saved["groups"].items()})

    def get_train_dataloader(self):
        """TRL's, with `AERCollator` (g and the policy version per trained token, the synchronous trainers'
        telemetry keys)."""
        return self._trl_train_dataloader()

    # ------------------------------------------------------------------------------------------------ loss
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not self.aer_core.on:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        captured = {}
        inner = self.accelerator.unwrap_model(model)
        handle = inner.register_forward_hook(lambda module, args, output: captured.__setitem__("output", output))
        try:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            handle.remove()
        selected = inputs["token_index"] >= 0
        token_index, segment = inputs["token_index"][selected], inputs["segment_id"][selected]
        entropy = captured["output"].entropy.flatten()[token_index]  # with gradient, as TRL's loss read it
        padded, mask, first = _per_completion(entropy, segment)
        g = inputs["aer_group_accuracy"][selected][first].float().cpu()
        lag = (self.model_version - inputs["aer_sample_version"][selected][first]).float().cpu()
        keep = torch.ones_like(lag, dtype=torch.bool)
        if self.args.aer_max_lag is not None:
            keep = lag <= self.args.aer_max_lag
        lam = self.aer_core.lambdas(g) * keep
        metrics = self._metrics["train"]
        buckets = log_rollout(metrics, g, lam, self.args.aer_rho)
        self.aer_core.carried.ran.add("rollout")
        bonus = self.aer_core.bonus(padded, mask, lam)
        if bonus is not None:  # TRL's loss is already divided by the accumulation steps
            loss = loss - bonus / self.current_gradient_accumulation_steps
        weights = keep.to(mask.dtype).to(mask.device).unsqueeze(1)
        self.aer_core.measure(padded, mask * weights, torch.where(keep, buckets, -1))
        self._log_lags(padded.detach(), mask, lag, lam)
        return loss

    def _log_lags(self, entropies, mask, lag, lam) -> None:
        seq = ((entropies * mask).sum(-1) / mask.sum(-1).clamp(min=1)).cpu()
        for k in sorted(set(lag.long().tolist())):
            members = lag.long() == k
            self._metrics["train"][f"aer/lag/{k}/samples"].append(float(members.sum()))
            self._metrics["train"][f"aer/lag/{k}/entropy"].append(float(seq[members].mean()))
            self._metrics["train"][f"aer/lag/{k}/lambda"].append(float(lam[members].mean()))

    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._aer_micro += 1
        if self.aer_core.on and self._aer_micro % self.current_gradient_accumulation_steps == 0:
            self.aer_core.finish_iteration(
                lambda t: self.accelerator.reduce(t, reduction="sum"),
                self.accelerator.device,
                self._metrics["train"],
                self.callback_handler.callbacks,
            )
        return loss


def _per_completion(entropy: torch.Tensor, segment: torch.Tensor):
    """A row's trained-token entropies (M,) laid out per completion: (S, L) padded, its mask, and each completion's
    first token's index into the M (for per-completion values given per token). `segment`: each token's completion
    (non-decreasing, as TRL packs them)."""
    full = torch.bincount(segment)
    present = full > 0
    count = full[present]
    starts = torch.cumsum(count, 0) - count
    remap = torch.cumsum(present.long(), 0) - 1  # completion ids without gaps
    seg = remap[segment]
    position = torch.arange(segment.numel(), device=segment.device) - starts[seg]
    padded = entropy.new_zeros(len(count), int(count.max()))
    padded = padded.index_put((seg, position), entropy)
    mask = torch.zeros_like(padded, dtype=entropy.dtype).index_put((seg, position), torch.ones_like(entropy))
    return padded, mask, starts
