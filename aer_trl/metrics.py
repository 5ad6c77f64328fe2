"""A local metrics log that is always written, whatever `report_to` says: JSON Lines, one record per Trainer log."""

from __future__ import annotations

import json
import math
from pathlib import Path

from transformers import TrainerCallback

from .files import atomic_write


def _up_to_checkpoint(line: str, state) -> bool:
    """Whether a metrics.jsonl line belongs to the steps up to the checkpoint (a torn last line does not, nor the
    end-of-training summary of an earlier `train()` call: the resumed run writes the one summary at its end)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return False
    return record.get("step", 0) <= state.global_step and "train_runtime" not in record


class MetricsFileCallback(TrainerCallback):
    """Appends every logged dict (with `step`) to `<output_dir>/metrics.jsonl` on the main process."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.path is None:
            self.path = Path(args.output_dir) / "metrics.jsonl"
        if state.is_world_process_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not state.global_step:  # a fresh run starts a fresh log
                self.path.write_text("")
            elif self.path.is_file():
                # a resumed one appends, after dropping what the killed run logged past the checkpoint it resumes
                # from (those steps are trained and logged again: kept, they would be counted twice)
                lines = self.path.read_text().splitlines(keepends=True)
                atomic_write(self.path, "".join(line for line in lines if _up_to_checkpoint(line, state)))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if self.path is None:  # logging before train(), e.g. trainer.evaluate() first: start the file here
            self.path = Path(args.output_dir) / "metrics.jsonl"
            self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {"step": state.global_step}
        for key, value in logs.items():
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            record[key] = value
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


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
