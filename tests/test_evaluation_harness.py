"""`evaluate` end to end: an interrupted evaluation resumed equals an uninterrupted one; one evaluation per folder
at a time."""

import pytest

from aer_trl.app.evaluation import evaluate
from tests import helpers
from tests.eval_helpers import Fake, Real, lines, make_args


def test_real_model_interrupted_then_resumed_equals_uninterrupted(tmp_path, model_and_bench):
    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench), generator_factory=Real())
    first = Real(fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate(make_args(tmp_path / "resumed", model, bench), generator_factory=first)
    assert first.problems == 6  # two chunks of 3 problems, one generate call each
    second = Real()
    assert evaluate(make_args(tmp_path / "resumed", model, bench), generator_factory=second) == reference
    assert second.problems == 4  # the chunks [6, 7, 8] and [9]
    assert sorted(lines(tmp_path / "resumed")) == sorted(lines(tmp_path / "ref"))

    third = Real()
    assert evaluate(make_args(tmp_path / "resumed", model, bench, rescore=True), generator_factory=third) == reference
    assert third.problems == 0  # re-scored from disk, nothing generated


def test_a_second_evaluation_into_the_same_folder_is_refused_while_the_first_runs(tmp_path, model_and_bench):
    """Two evaluations in one folder repair and rewrite each other's store and merge metrics.json over each other:
    while one holds the folder, another is refused by name; a killed one leaves no stale lock."""
    from aer_trl.app.evaluation.harness import EVAL_LOCK

    model, bench = model_and_bench
    out = tmp_path / "eval"
    out.mkdir()
    with helpers.lock_held_elsewhere(out / EVAL_LOCK) as holder:
        with pytest.raises(RuntimeError, match=f"another evaluation is writing into it \\(process {holder.pid}\\)"):
            evaluate(make_args(out, model, bench), generator_factory=Fake())
        assert not (out / "generations.jsonl").exists()
    assert evaluate(make_args(out, model, bench), generator_factory=Fake())[model][bench]["pass@1"] >= 0
