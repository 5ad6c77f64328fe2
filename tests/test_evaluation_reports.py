"""`metrics.json`, `table.md` and `passk.png` of an evaluation folder."""

import json

import pytest

from aer_trl.app.evaluation import evaluate
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
    # every k asked for (k_list 1 2 4 8; no report_k), then their averages
    head = "| Method | " + " | ".join(f"bench pass@{k}" for k in (1, 2, 4, 8))
    assert head + " | " + " | ".join(f"Avg. pass@{k}" for k in (1, 2, 4, 8)) + " |" in table and "| tiny |" in table
    assert "| tiny | bench | 10 | 8 |" in table  # problems and n stated
    assert (out / "passk.png").stat().st_size > 5000
    assert len(lines(out)) == 10 and all(len(json.loads(x)["completions"]) == 8 for x in lines(out))


def test_report_k_keeps_the_papers_two_columns(tmp_path, model_and_bench):
    model, bench = model_and_bench
    evaluate(make_args(tmp_path / "eval", model, bench, report_k=4), generator_factory=Fake())
    table = (tmp_path / "eval" / "table.md").read_text()
    assert "| Method | bench pass@1 | bench pass@4 | Avg. pass@1 | Avg. pass@4 |" in table


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


def test_the_appendix_protocol_samples_each_benchmark_its_own_n_and_reports_mean_and_pass_at_n(
    tmp_path, model_and_bench
):
    """`num_samples_per_benchmark` (the appendix: 32 on AIME, 8 on MATH500 and AMC23) and `table: appendix`: each
    benchmark is sampled and scored at its own n, table.md has mean@n and pass@n per benchmark with the rows named
    by `model_labels`, and a second run generates nothing."""
    import shutil

    from aer_trl.app.evaluation import EvalArguments

    model, bench = model_and_bench
    other = tmp_path / "hard.jsonl"
    shutil.copy(bench, other)
    out = tmp_path / "eval"
    args = lambda: EvalArguments(  # noqa: E731
        models=[model],
        benchmarks=[bench, str(other)],
        output_dir=str(out),
        max_new_tokens=2,
        batch_size=3,
        seed=7,
        num_samples=2,
        num_samples_per_benchmark={str(other): 4},
        k_list=[1, 2, 4],
        table="appendix",
        model_labels=["Base"],
    )
    fake = Fake()
    metrics = evaluate(args(), generator_factory=fake)
    assert metrics[model][bench]["num_samples"] == 2 and metrics[model][bench]["k_list"] == [1, 2]
    assert metrics[model][str(other)]["num_samples"] == 4 and metrics[model][str(other)]["k_list"] == [1, 2, 4]
    assert fake.problems == 2 * 10  # each benchmark's 10 problems once, each with its own n
    m, h = metrics[model][bench], metrics[model][str(other)]
    table = (out / "table.md").read_text()
    assert "| Method | bench mean@2 | bench pass@2 | hard mean@4 | hard pass@4 |" in table
    cells = [m["mean@n"], m["pass@2"], h["mean@n"], h["pass@4"]]
    assert "| Base | " + " | ".join(f"{100 * c:.1f}" for c in cells) + " |" in table
    again = Fake()
    evaluate(args(), generator_factory=again)
    assert again.problems == 0


def test_per_benchmark_sample_counts_are_checked():
    from aer_trl.app.evaluation import EvalArguments

    with pytest.raises(ValueError, match=r"names \['amc'\], which are not among benchmarks"):
        EvalArguments(models=["m"], benchmarks=["aime24"], num_samples_per_benchmark={"amc": 8})
    with pytest.raises(ValueError, match="every n must be an integer >= 1"):
        EvalArguments(models=["m"], benchmarks=["aime24"], num_samples_per_benchmark={"aime24": 0})
    with pytest.raises(ValueError, match="one label per model"):
        EvalArguments(models=["m"], model_labels=["a", "b"])
    with pytest.raises(ValueError, match="table must be 'pass' or 'appendix'"):
        EvalArguments(models=["m"], table="wide")
    args = EvalArguments(models=["m"], benchmarks=["aime24", "math500"], num_samples_per_benchmark='{"math500": 8}')
    assert args.num_samples_per_benchmark == {"math500": 8}  # JSON from the command line
