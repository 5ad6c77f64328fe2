"""A rollout worker for TRL's asynchronous GRPO that needs no vLLM server and no GPU, written so it could be proposed
to TRL as its CPU and test path: `LocalRolloutWorker` implements TRL's `RolloutWorkerProtocol` (it samples groups of
completions with its own copy of the policy in a background thread, scores them with the reward functions and queues
`RolloutSample`s tagged with the policy version that sampled them), and `LocalWeightTransfer` implements TRL's
`WeightTransferProtocol` (each sync copies the trainer's weights into the worker's copy). Generation runs while the
trainer trains, so the samples the trainer takes are up to `max_staleness` versions old: real staleness on a laptop.

Sampling is a plain token loop with a KV cache on the trainer's device, with a `torch.Generator` of the worker's own
seeded for each group by the run's seed and the group's place in the run (the trainer's random state is never
touched; a resumed run, which starts at the checkpoint's first untrained group, draws each group from the stream the
uninterrupted run drew it from); each token's log-probability is taken at the sampling temperature, as TRL's fused
head scores it.

By default the worker samples as fast as it can with whichever weights it holds, so which policy version samples a
group depends on the two threads' timing. `schedule(lag, samples_per_step)` fixes it instead (a lockstep schedule):
group k is sampled by the version `lag` steps older than the one that trains it, the worker waits for that version
and each weight sync waits until the worker has sampled every group its outgoing version is due to sample. A run is
then a function of its settings alone, and a checkpoint keeps the groups sampled with versions older than its own
(`inflight`), which a resumed run replays before it samples again: it goes on as the run never stopped.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import queue
import threading
import time
import warnings

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from ..compat import cache_kwarg

logger = logging.getLogger(__name__)


def _rollout_sample_class():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.async_grpo.async_rollout_worker import RolloutSample
    return RolloutSample


class LocalRolloutWorker:
    """Samples `num_generations` completions per prompt of `dataset` (cycled, in a seeded order) with `model` (its own
    copy, updated by `LocalWeightTransfer`), scores them with `reward_funcs` (TRL's signature: `prompts`,
    `completions`, `completion_ids` and the dataset's other columns as keyword arguments) and puts one
    `RolloutSample` per completion on `rollout_buffer`, with TRL's advantage (the group's rewards standardised)."""

    def __init__(
        self,
        model,
        processing_class,
        dataset,
        reward_funcs,
        num_generations: int,
        max_completion_length: int,
        temperature: float = 1.0,
        seed: int = 0,
        queue_maxsize: int = 64,
        reward_func_names: list[str] | None = None,
        chat_template_kwargs: dict | None = None,
    ):
        self.model = model.eval()
        self.tokenizer = processing_class
        self.dataset = dataset
        self.reward_funcs = list(reward_funcs)
        if reward_func_names is None:  # TRL's names (a partial by the function it wraps, an instance by its class)
            from trl.trainer.utils import get_callable_name

            reward_func_names = [get_callable_name(f) for f in self.reward_funcs]
        self.reward_func_names = list(reward_func_names)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.num_generations = num_generations
        self.max_completion_length = max_completion_length
        self.temperature = temperature
        self.seed = seed
        self.generator = torch.Generator(self.model.device)  # re-seeded for each group (`make_samples`)
        self.start_group = 0  # groups of earlier runs (a resume): their prompts are skipped, their numbers kept
        self.rollout_buffer: queue.Queue = queue.Queue(maxsize=queue_maxsize)
        self.metrics_queue: queue.Queue = queue.Queue()
        self.model_version = 0  # the version of the weights in `model` (set by the weight transfer)
        self.lock = threading.Lock()  # held while sampling and while weights are copied in
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._last_put = time.monotonic()
        self.lag: int | None = None  # the lockstep schedule (`schedule`); None: free-running
        self.samples_per_step = 0
        self.turn = threading.Condition()  # guards `model_version`, `next_group` and `records` under the schedule
        self.next_group = 0  # the place in the run of the next group to sample (the schedule)
        self.records: dict[int, list[dict]] = {}  # sampled groups that may not be trained yet (the schedule)
        self.replay: dict[int, list[dict]] = {}  # a checkpoint's untrained groups, queued first (`load_inflight`)

    # -- the lockstep schedule --------------------------------------------------------------------------------
    def schedule(self, lag: int, samples_per_step: int) -> None:
        """Sample group k with the policy version `lag` steps older than the version that trains it (the trainer's
        version v trains step v, whose `samples_per_step` samples are groups in order): version
        `max(1, step(k) - lag)`. `lag` >= 1 (the trainer's data loader reads one micro-batch ahead, while the
        version before it is still the newest), and `samples_per_step` a multiple of `num_generations` (a group
        trained within one step)."""
        if lag < 1:
            raise ValueError(f"local_rollout_lag must be >= 1, got {lag}")
        if samples_per_step % self.num_generations:
            raise ValueError(
                f"local_rollout_lag: the samples of an optimizer step ({samples_per_step}: per_device_train_batch_size"
                f" x gradient_accumulation_steps x processes) must be a multiple of num_generations "
                f"({self.num_generations}), so that each group is trained within one step"
            )
        self.lag, self.samples_per_step = lag, samples_per_step
        self.rollout_buffer.maxsize = 0  # the schedule bounds it (lag + 1 steps); a bound could stall a sync

    def step_of(self, place: int) -> int:
        """The optimizer step (from 1) that trains the run's `place`-th group under the schedule."""
        return place * self.num_generations // self.samples_per_step + 1

    def version_for(self, place: int) -> int:
        return max(1, self.step_of(place) - self.lag)

    def wait_for_turn(self, timeout_s: float) -> None:
        """Before a weight sync replaces version v (the schedule): until every group due to be sampled by v is."""
        if self.lag is None or self._thread is None:  # not started (the cold sync): nothing sampled to wait for
            return
        deadline = time.monotonic() + timeout_s
        with self.turn:
            while self.version_for(self.next_group) <= self.model_version:
                if self._error is not None or self._stop.is_set() or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"weight sync: the local rollout worker has not sampled group {self.next_group}, due to "
                        f"version {self.model_version} ({self._error!r})"
                    )
                self.turn.wait(timeout=0.5)

    def inflight(self, first_untrained: int, below_version: int) -> dict[int, list[dict]]:
        """The sampled groups from the run's `first_untrained`-th on whose version is older than `below_version` (a
        checkpoint's: a resumed run cannot sample them again), as JSON-ready records."""
        with self.turn:
            return {
                k: v for k, v in sorted(self.records.items())
                if k >= first_untrained and v[0]["model_version"] < below_version
            }  # fmt: skip

    def load_inflight(self, groups: dict[int, list[dict]]) -> None:
        """A checkpoint's untrained groups (`inflight`), queued before anything is sampled; sampling goes on after
        them. Call after `start_group` is set and before `start`."""
        places = sorted(int(k) for k in groups)
        if places != list(range(self.start_group, self.start_group + len(places))):
            raise ValueError(
                f"the checkpoint's in-flight groups {places} do not follow its first untrained group "
                f"{self.start_group}"
            )
        self.replay = {int(k): groups[k] for k in groups}
        self.next_group = self.start_group + len(places)

    # -- RolloutWorkerProtocol ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="aer-local-rollouts", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def update_model_version(self, model_version: int) -> None:
        pass  # the version is set with the weights themselves (LocalWeightTransfer), so a sample never mislabels it

    def check_health(self, stale_after_s: float) -> None:
        if self._error is not None:
            raise RuntimeError(f"the local rollout worker failed: {self._error!r}") from self._error
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            raise RuntimeError("the local rollout worker stopped")
        if time.monotonic() - self._last_put > stale_after_s:
            raise RuntimeError(f"the local rollout worker produced nothing for {stale_after_s:.0f} s")

    # -- generation ---------------------------------------------------------------------------------------------
    def _prompts(self):
        """The training prompts in the run's seeded order (a new permutation each epoch), from the `start_group`-th:
        one group per prompt, so a resumed run goes on where the checkpoint's run stopped."""
        order = np.random.default_rng(self.seed)
        indices = (int(i) for _ in itertools.count() for i in order.permutation(len(self.dataset)))
        for index in itertools.islice(indices, self.start_group, None):
            yield self.dataset[index]

    def _prompt_ids(self, prompt) -> list[int]:
        if isinstance(prompt, list):  # conversational: the template's text, its special tokens included (as TRL)
            prompt = self.tokenizer.apply_chat_template(
                prompt, add_generation_prompt=True, tokenize=False, **self.chat_template_kwargs
            )
        return list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    @torch.no_grad()
    def sample(self, prompt_ids: list[int]) -> tuple[list[list[int]], list[list[float]]]:
        """`num_generations` completions of one prompt and each token's log-probability at the temperature."""
        declared = self.model.generation_config.eos_token_id
        declared = [declared] if isinstance(declared, int) else list(declared or [])
        eos = {self.tokenizer.eos_token_id, *declared} - {None}
        n = self.num_generations
        ids = torch.tensor([prompt_ids] * n, device=self.model.device)
        cache = {cache_kwarg(self.model): DynamicCache(config=self.model.config)}  # filled in place by each forward
        logits = self.model(input_ids=ids, use_cache=True, **cache).logits[:, -1]
        tokens, logps = [[] for _ in range(n)], [[] for _ in range(n)]
        done = [False] * n
        for _ in range(self.max_completion_length):
            logp = torch.log_softmax(logits.float() / self.temperature, dim=-1)
            nxt = torch.multinomial(logp.exp(), 1, generator=self.generator).squeeze(1)
            picked = logp.gather(1, nxt.unsqueeze(1)).squeeze(1).tolist()  # one copy to the host per token
            for i, token in enumerate(nxt.tolist()):
                if not done[i]:
                    tokens[i].append(token)
                    logps[i].append(picked[i])
                    done[i] = token in eos
            if all(done):
                break
            logits = self.model(input_ids=nxt.unsqueeze(1), use_cache=True, **cache).logits[:, -1]
        return tokens, logps

    def make_samples(self, row, group_id: int) -> list:
        """One group: sample, score, standardise, as `RolloutSample`s. Its random stream is seeded by the run's seed
        and the group's place in the run (`start_group + group_id`), so a group's completions depend only on them and
        on the weights that sampled it: a resumed run draws group k as the uninterrupted run did."""
        prompt_ids = self._prompt_ids(row["prompt"])
        if self.lag is not None:  # the schedule: wait for the version due to sample this group
            need = self.version_for(self.start_group + group_id)
            with self.turn:
                while self.model_version < need and not self._stop.is_set():
                    self.turn.wait(timeout=0.5)
        with self.lock:
            version = self.model_version
            self.generator.manual_seed(self.seed * 1_000_003 + self.start_group + group_id)
            tokens, logps = self.sample(prompt_ids)
        texts = self.tokenizer.batch_decode(tokens, skip_special_tokens=True)
        conversational = isinstance(row["prompt"], list)
        completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
        extra = {k: [v] * len(texts) for k, v in row.items() if k not in ("prompt", "completion")}
        logged: dict[str, list[float]] = {}  # what the reward functions log (`log_metric`, TRL's keyword)
        log_metric = lambda name, value: logged.setdefault(name, []).append(float(value))  # noqa: E731
        per_func = []
        for func in self.reward_funcs:
            prompts = [row["prompt"]] * len(texts)
            values = func(
                prompts=prompts, completions=completions, completion_ids=tokens, log_metric=log_metric, **extra
            )
            per_func.append([math.nan if v is None else float(v) for v in values])
        per_func = np.array(per_func, dtype=float).reshape(len(self.reward_funcs), len(texts))
        rewards = np.nansum(per_func, axis=0) if len(per_func) else np.zeros(len(texts))
        rewards[np.isnan(per_func).all(axis=0)] = math.nan
        advantages = np.zeros_like(rewards)
        scored = ~np.isnan(rewards)
        if scored.any():
            advantages[scored] = (rewards[scored] - rewards[scored].mean()) / (rewards[scored].std() + 1e-8)
        reward_std = float(rewards[scored].std()) if scored.any() else math.nan
        RolloutSample = _rollout_sample_class()
        samples = []
        for i, (toks, lps) in enumerate(zip(tokens, logps, strict=True)):
            metrics = {"reward": float(rewards[i]), "reward_std": reward_std}
            metrics.update({f"rewards/{n}": float(per_func[j, i]) for j, n in enumerate(self.reward_func_names)})
            metrics.update({name: sum(v) / len(v) for name, v in logged.items()})  # TRL's collator averages them
            samples.append(
                RolloutSample(
                    prompt=row["prompt"],
                    completion=completions[i],
                    input_ids=np.asarray(prompt_ids + toks, dtype=np.int64),
                    completion_mask=np.asarray([0] * len(prompt_ids) + [1] * len(toks), dtype=np.int64),
                    old_log_probs=np.asarray([0.0] * len(prompt_ids) + lps, dtype=np.float32),
                    advantage=float(advantages[i]),
                    model_version=version,
                    group_id=group_id,
                    metrics=metrics,
                    enqueued_at=time.time(),
                )
            )
        return samples

    def _group(self, row, place: int) -> list:
        """The run's `place`-th group: replayed from the checkpoint, or sampled. Under the schedule it is kept (until
        the trainer's version says it is trained) before the sync that waits for it may go on."""
        group_id = place - self.start_group
        if place in self.replay:
            records = self.replay.pop(place)
            samples = [_sample_from_record(r, group_id, enqueued_at=time.time()) for r in records]
        else:
            samples = self.make_samples(row, group_id)
            records = [_sample_record(s) for s in samples] if self.lag is not None else None
        if self.lag is not None:
            with self.turn:  # version v is trained from step v on: steps before it are done
                self.records = {k: v for k, v in self.records.items() if self.step_of(k) >= self.model_version}
                self.records[place] = records
                self.next_group = max(self.next_group, place + 1)
                self.turn.notify_all()
        return samples

    def _run(self) -> None:
        try:
            for place, row in enumerate(self._prompts(), start=self.start_group):
                if self._stop.is_set():
                    return
                samples = self._group(row, place)
                for sample in samples:  # a group's samples go on the queue together, in order
                    while not self._stop.is_set():
                        try:
                            self.rollout_buffer.put(sample, timeout=0.5)
                            self._last_put = time.monotonic()
                            break
                        except queue.Full:
                            continue
        except BaseException as error:  # reported by check_health on the trainer's side
            self._error = error
            logger.exception("local rollout worker failed")


class LocalWeightTransfer:
    """TRL's `WeightTransferProtocol` for a `LocalRolloutWorker`: each sync copies the trainer's parameters (by name)
    into the worker's copy while it holds the worker's lock (no sample is drawn with half-copied weights), and sets
    the version that its next samples carry."""

    def __init__(self, worker: LocalRolloutWorker):
        self.worker = worker
        self.syncs = 0  # the trainer's policy version (a resume sets the checkpoint's)
        self.timeout_s = 600.0  # how long a sync waits for the worker to sample what its version is due to

    def init_weight_transfer(self) -> None:
        pass

    def pause(self) -> None:
        self.worker.wait_for_turn(timeout_s=self.timeout_s)
        self.worker.lock.acquire()

    def send_weights(self, iterator) -> None:
        params = dict(self.worker.model.named_parameters())
        for name, tensor in iterator:
            if name not in params:
                raise KeyError(f"weight sync: the worker's model has no parameter {name!r}")
            params[name].data.copy_(tensor.detach().to(params[name].device, params[name].dtype))

    def resume(self) -> None:
        self.syncs += 1
        with self.worker.turn:
            self.worker.model_version = self.syncs  # TRL's trainer counts its versions alike: 1 after the cold sync
            self.worker.turn.notify_all()
        self.worker.lock.release()

    def destroy(self) -> None:
        pass


def local_rollouts(model, reward_funcs, args, train_dataset=None, processing_class=None, **kwargs) -> dict:
    """`local_rollouts`: a `LocalRolloutWorker` over its own copy of the model (from the same path) and its
    `LocalWeightTransfer`, as the trainer's `rollout_worker` / `weight_transfer`."""
    if train_dataset is None:
        raise ValueError("local_rollouts: the local rollout worker samples prompts of train_dataset, which is None")
    funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs] if reward_funcs else []
    if any(not callable(f) for f in funcs):
        raise ValueError("local_rollouts: the local rollout worker scores with reward functions, not reward models")
    tokenizer = processing_class or AutoTokenizer.from_pretrained(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    copy = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, args.dtype or "float32"))
    copy = copy.to(args.device)  # the worker samples on the trainer's device (a GPU's, or the CPU)
    worker = LocalRolloutWorker(
        copy, tokenizer, train_dataset, funcs, num_generations=args.num_generations,
        max_completion_length=args.max_completion_length, temperature=args.temperature, seed=args.seed,
        chat_template_kwargs=args.chat_template_kwargs,
    )  # fmt: skip
    return {"rollout_worker": worker, "weight_transfer": LocalWeightTransfer(worker)}


def _sample_record(sample) -> dict:
    """A `RolloutSample` as JSON-ready values (its arrays as lists, with their dtypes)."""
    record = {}
    for f in dataclasses.fields(sample):
        value = getattr(sample, f.name)
        record[f.name] = (
            {"array": value.tolist(), "dtype": str(value.dtype)} if isinstance(value, np.ndarray) else value
        )
    return record


def _sample_from_record(record: dict, group_id: int, enqueued_at: float):
    """The `RolloutSample` of a record (`_sample_record`), as the group `group_id` of this run."""
    values = {
        k: np.asarray(v["array"], dtype=v["dtype"]) if isinstance(v, dict) and "array" in v else v
        for k, v in record.items()
    }
    values.update(group_id=group_id, metrics=dict(values["metrics"]), enqueued_at=enqueued_at)
    return _rollout_sample_class()(**values)
