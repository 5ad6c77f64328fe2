"""The fingerprinted generations store: torn and garbage lines, a full disk."""

import errno
import json
import logging
import os

import pytest

from aer_trl.app.evaluation import evaluate
from tests.eval_helpers import Fake, lines, make_args


def test_torn_last_line_is_repaired_and_resume_is_exact(tmp_path, model_and_bench, caplog):
    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench), generator_factory=Fake())
    out = tmp_path / "torn"
    evaluate(make_args(out, model, bench), generator_factory=Fake())
    data = (out / "generations.jsonl").read_bytes()
    cut = data.rfind(b"\n", 0, len(data) - 1) + 40  # inside the last record
    (out / "generations.jsonl").write_bytes(data[:cut])
    again = Fake()
    with caplog.at_level(logging.WARNING):
        assert evaluate(make_args(out, model, bench), generator_factory=again) == reference
    assert again.problems == 1 and "line 10" in caplog.text
    assert sorted(lines(out)) == sorted(lines(tmp_path / "ref"))  # no duplicate, no lost record, no torn line


def test_garbage_line_in_the_middle_is_dropped_once(tmp_path, model_and_bench, caplog):
    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench), generator_factory=Fake())
    out = tmp_path / "garbage"
    evaluate(make_args(out, model, bench), generator_factory=Fake())
    rows = lines(out)
    rows[3] = '{"v": 1, "fp": "trunc'
    rows.insert(6, "\x00\x00 not json")
    (out / "generations.jsonl").write_text("\n".join(rows) + "\n")
    again = Fake()
    with caplog.at_level(logging.WARNING):
        assert evaluate(make_args(out, model, bench), generator_factory=again) == reference
    assert again.problems == 3 and "line 4, 7" in caplog.text  # problem 3's chunk [3, 4, 5] again
    assert sorted(lines(out)) == sorted(lines(tmp_path / "ref"))  # only the missing record is written back
    later = Fake()
    assert evaluate(make_args(out, model, bench), generator_factory=later) == reference and later.problems == 0


def test_full_disk_keeps_the_file_whole_and_resumes(tmp_path, model_and_bench, monkeypatch):
    from aer_trl.app.evaluation import store

    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench), generator_factory=Fake())
    out = tmp_path / "full"
    real_fsync, calls = os.fsync, {"n": 0}

    def failing_fsync(fd):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(store.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk is full"):
        evaluate(make_args(out, model, bench, batch_size=3), generator_factory=Fake())
    monkeypatch.setattr(store.os, "fsync", real_fsync)
    assert len(lines(out)) == 6 and all(json.loads(x) for x in lines(out))  # cut back to whole chunks' records
    assert evaluate(make_args(out, model, bench), generator_factory=Fake()) == reference
