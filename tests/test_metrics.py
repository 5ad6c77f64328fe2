"""aer_trl.metrics: metrics.jsonl is written whatever report_to says; a fresh run starts it anew, a resumed run keeps
what was logged up to its checkpoint and drops what the killed run logged after it (trained and logged again)."""

import json
import math
from types import SimpleNamespace

from transformers import TrainerState

from aer_trl.callbacks import MetricsFileCallback
from aer_trl.metrics import read_metrics


def _state(step, zero=True):
    state = TrainerState()
    state.global_step, state.is_world_process_zero = step, zero
    return state


def _log(cb, args, step, **logs):
    cb.on_log(args, _state(step), None, logs=logs)


def test_a_fresh_run_starts_a_fresh_file_and_non_finite_values_become_null(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 9, "loss": 1.0}\n')  # an older run in the same folder
    args = SimpleNamespace(output_dir=str(tmp_path))
    cb = MetricsFileCallback()
    cb.on_train_begin(args, _state(0), None)
    _log(cb, args, 1, loss=0.5, reward=math.nan)
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "loss": 0.5, "reward": None}]


def test_a_resumed_run_drops_what_was_logged_after_its_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    killed = [{"step": s, "loss": float(s)} for s in (1, 2, 3, 4, 5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in killed) + '{"step": 6, "lo')  # killed mid-line
    args = SimpleNamespace(output_dir=str(tmp_path))
    cb = MetricsFileCallback()
    cb.on_train_begin(args, _state(3), None)  # resumed from checkpoint-3
    _log(cb, args, 4, loss=40.0)
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3, 4]
    assert read_metrics(path)[-1]["loss"] == 40.0  # the step logged again, once


def test_a_finished_run_resumed_again_keeps_one_end_of_training_summary(tmp_path):
    path = tmp_path / "metrics.jsonl"
    done = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 2.0}, {"step": 2, "train_runtime": 9.0, "train_loss": 1.5}]
    path.write_text("".join(json.dumps(r) + "\n" for r in done))  # killed after its summary, before the model save
    args = SimpleNamespace(output_dir=str(tmp_path))
    cb = MetricsFileCallback()
    cb.on_train_begin(args, _state(2), None)  # resumed from checkpoint-2 = max_steps: nothing left to train
    _log(cb, args, 2, train_runtime=0.01, train_loss=0.0)
    assert read_metrics(path) == done[:2] + [{"step": 2, "train_runtime": 0.01, "train_loss": 0.0}]


def test_reading_a_killed_runs_log_leaves_out_its_torn_last_line_only(tmp_path):
    import pytest

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert read_metrics(path) == [{"step": 1}, {"step": 2}]
    path.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
    with pytest.raises(ValueError, match="metrics.jsonl: line 2 is not a JSON record"):
        read_metrics(path)


def test_logging_before_train_starts_the_file_and_other_ranks_write_nothing(tmp_path):
    args = SimpleNamespace(output_dir=str(tmp_path / "out"))
    cb = MetricsFileCallback()
    _log(cb, args, 0, eval_reward=0.25)  # trainer.evaluate() before trainer.train()
    assert read_metrics(tmp_path / "out" / "metrics.jsonl") == [{"step": 0, "eval_reward": 0.25}]
    other = MetricsFileCallback(tmp_path / "rank1.jsonl")
    other.on_log(args, _state(1, zero=False), None, logs={"loss": 1.0})
    assert not (tmp_path / "rank1.jsonl").exists()
