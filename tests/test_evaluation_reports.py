"""`metrics.json`, `table.md` and `passk.png` of an evaluation folder."""

import json

import pytest

from aer_trl.evaluation import evaluate
from tests import helpers
from tests.eval_helpers import Fake, lines, make_args


def test_end_to_end_table_json_plot(tmp_path, model_and_bench):
    model, bench = model_and_bench
    metrics = evaluate(make_args(tmp_path / "eval", model, bench))
    out = tmp_path / "eval"
    m = metrics[model][bench]
    assert m["num_problems"] == 10 and m["num_samples"] == 8 and m["k_list"] == [1, 2, 4, 8]
    assert 0.0 <= m["pass@1"] <= m["pass@2"] <= m["pass@4"] <= m["pass@8"] <= 1.0
    assert m["mean@n"] == pytest.approx(m["pass@1"])
    assert m["fingerprint"]["max_new_tokens"] == 2 and "weights" in m["fingerprint"]["model"]
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(metrics))
    table = (out / "table.md").read_text()
    assert "| Method | bench pass@1 | bench pass@8 | Avg. pass@1 | Avg. pass@8 |" in table and "| tiny |" in table
    assert "| tiny | bench | 10 | 8 |" in table  # problems and n stated
    assert (out / "passk.png").stat().st_size > 5000
    assert len(lines(out)) == 10 and all(len(json.loads(x)["completions"]) == 8 for x in lines(out))


def test_a_second_model_adds_a_row(tmp_path, model_and_bench, tokenizer):
    model, bench = model_and_bench
    other = tmp_path / "other"
    helpers.save_model(tokenizer, other, seed=3)
    out = tmp_path / "eval"
    evaluate(make_args(out, model, bench), generator_factory=Fake())
    evaluate(make_args(out, str(other), bench), generator_factory=Fake())
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {model, str(other)}
    table = (out / "table.md").read_text()
    assert "| tiny |" in table and "| other |" in table
