"""AER's metrics (the aer/* keys, docs/usage.md "Metrics"): the per-difficulty telemetry of a rollout batch, the
values a logging step carries over from the last rollout batch, and the reader of the local metrics log
(`<output_dir>/metrics.jsonl`, JSON Lines, one record per Trainer log; written by `callbacks.MetricsFileCallback`,
whatever `report_to` says)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from .core_algos import BUCKETS, difficulty_buckets, hard_mask

# aer/* values set afresh at every logging step from the controller (never carried over from an earlier one)
LIVE_KEYS = ("aer/alpha", "aer/initial_entropy", "aer/target_entropy")


def metric_phase(key: str) -> str:
    """The part of a rollout batch that measures an aer/* metric: "entropy" (`aer/entropy` and the per-bucket
    entropies, over the batch's training, at its end) or "rollout" (λ, g(q) and the buckets' shares, at its
    generation). A logging step carries each phase's last values; a phase that ran since replaces all of them."""
    entropy = key == "aer/entropy" or (key.startswith("aer/bucket/") and key.endswith("/entropy"))
    return "entropy" if entropy else "rollout"


class CarriedMetrics:
    """The aer/* values a logging step without a new rollout batch still logs (steps_per_generation >
    gradient_accumulation_steps): each phase's last values (TRL's fresh averages replace these). A phase that ran
    replaces all its values: a bucket with no prompts in the latest batch logs none."""

    def __init__(self):
        self.carried: dict[str, dict[str, float]] = {}  # phase -> the aer/* values last logged
        self.ran: set[str] = set()  # the phases that ran since the last logging step

    def fill(self, logs: dict, train_metrics: dict) -> None:
        """Adds to `logs` every carried aer/* value it lacks, after taking the phases that ran from `train_metrics`
        (TRL's lists of values since the last logging step)."""
        fresh = {k: sum(v) / len(v) for k, v in train_metrics.items() if k.startswith("aer/") and v}
        for phase in self.ran:
            self.carried[phase] = {k: v for k, v in fresh.items() if metric_phase(k) == phase}
        self.ran.clear()
        for values in self.carried.values():
            logs.update({k: v for k, v in values.items() if k not in logs})

    def restore(self, log_history: list[dict]) -> None:
        """On resume: the carried values come back from the checkpoint's last training log, so the resumed run logs
        what the uninterrupted one does (checkpoints end a rollout batch: that log holds both phases)."""
        last = next((h for h in reversed(log_history) if "loss" in h), {})
        self.carried, self.ran = {}, set()
        for key, value in last.items():
            if key.startswith("aer/") and key not in LIVE_KEYS:
                self.carried.setdefault(metric_phase(key), {})[key] = value


def log_rollout(metrics: dict, g: torch.Tensor, lam: torch.Tensor, rho: float) -> torch.Tensor:
    """The rollout phase's telemetry of one rollout batch (every process's completions): mean λ, and per difficulty
    bucket its share, mean λ and mean accuracy (where the entropy budget goes); the share of hard prompts and the mean
    g(q). Returns each completion's bucket (`difficulty_buckets`), which the loss sums entropy by."""
    buckets = difficulty_buckets(g, rho)
    metrics["aer/lambda_mean"].append(lam.mean().item())
    for b, name in enumerate(BUCKETS):
        members = buckets == b
        metrics[f"aer/bucket/{name}/share"].append(members.float().mean().item())
        if members.any():
            metrics[f"aer/bucket/{name}/lambda"].append(lam[members].mean().item())
            metrics[f"aer/bucket/{name}/accuracy"].append(g[members].mean().item())
    metrics["aer/hard_fraction"].append(hard_mask(g, rho).float().mean().item())
    g_mean = torch.nanmean(g).item()
    if not math.isnan(g_mean):
        metrics["aer/group_accuracy"].append(g_mean)
    return buckets


def entropy_sums(entropies: torch.Tensor, mask: torch.Tensor, bucket: torch.Tensor | None) -> torch.Tensor:
    """One micro-batch's [Σ H, token count, then Σ H and token count per difficulty bucket] over its trained tokens
    (no gradient), summed over a rollout batch's micro-batches and reduced over processes together at its end.
    `bucket`: each completion's bucket (-1: none), or None (all zeros per bucket)."""
    seq_sum, seq_count = (entropies.detach() * mask).sum(-1).float(), mask.sum(-1).float()
    if bucket is not None:
        onehot = torch.nn.functional.one_hot(bucket.clamp(min=0), len(BUCKETS)).float()
        onehot[bucket < 0] = 0
        onehot = onehot.to(seq_sum.device, non_blocking=True)
        per_bucket = torch.cat([onehot.T @ seq_sum, onehot.T @ seq_count])
    else:
        per_bucket = torch.zeros(2 * len(BUCKETS), device=seq_sum.device)
    return torch.cat([torch.stack([seq_sum.sum(), seq_count.sum()]), per_bucket])


def log_entropy(metrics: dict, stats: list[float]) -> float:
    """The entropy phase's telemetry from a rollout batch's reduced `entropy_sums`: `aer/entropy` and the entropy per
    bucket. Returns the token-weighted entropy H_t (NaN for a batch with no trained token)."""
    entropy = stats[0] / stats[1] if stats[1] > 0 else float("nan")
    if not math.isnan(entropy):
        metrics["aer/entropy"].append(entropy)
    n = len(BUCKETS)
    for b, name in enumerate(BUCKETS):
        if stats[2 + n + b] > 0:
            metrics[f"aer/bucket/{name}/entropy"].append(stats[2 + b] / stats[2 + n + b])
    return entropy


def read_metrics(path: str | Path) -> list[dict]:
    """The records of a metrics.jsonl file. A last line cut short (a run killed while logging) is left out; any other
    line that is not JSON is an error naming the file and the line."""
    text = Path(path).read_text()
    lines = text.split("\n")
    records = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if lineno == len(lines):  # no newline after it: the write was cut off
                break
            raise ValueError(f"{path}: line {lineno} is not a JSON record ({err.msg})") from err
    return records
