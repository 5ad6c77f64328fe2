"""Verdicts and pass@k over exactly the planned problems."""

import json
import logging

import pytest

from aer_trl.app.evaluation import evaluate
from aer_trl.app.rewards import JUDGE_VERSION
from tests.eval_helpers import Fake, lines, make_args


@pytest.mark.parametrize(
    ("instruction", "written"),
    [
        ("End with a line 'Answer: <number>'.", "so\nAnswer: {}"),
        ("Put the final answer in <answer></answer> tags.", "<answer>{}</answer>"),
        (None, "so \\boxed{{{}}}"),  # the default instruction asks for \boxed{}
    ],
)
def test_the_evaluation_judges_the_answer_format_its_prompt_asks_for(tmp_path, model_and_bench, instruction, written):
    """`prompt_instruction` asking for another format: the evaluation (and the validation during training) judged every
    completion as `\\boxed{}`, pass@k 0 however right the answers were."""
    model, bench = model_and_bench
    answers = {f"{i}?": str(i % 3) for i in range(10)}  # the bench's questions and golds

    def right(model_name, args):
        def run(texts, seed):
            golds = [next(a for q, a in answers.items() if q in t) for t in texts]
            return [[written.format(g)] * args.num_samples for g in golds]

        return run

    kw = {} if instruction is None else {"prompt_instruction": instruction}
    metrics = evaluate(make_args(tmp_path / "eval", model, bench, **kw), generator_factory=right)
    assert metrics[model][bench]["pass@1"] == 1.0
    rescored = evaluate(make_args(tmp_path / "eval", model, bench, rescore=True, **kw), generator_factory=right)
    assert rescored == metrics


def test_verdicts_of_another_answer_checker_version_are_judged_again(tmp_path, model_and_bench, caplog):
    model, bench = model_and_bench
    out = tmp_path / "eval"
    reference = evaluate(make_args(out, model, bench), generator_factory=Fake())
    assert reference[model][bench]["pass@8"] > 0
    records = [json.loads(x) for x in lines(out)]
    assert {r["judge"] for r in records} == {JUDGE_VERSION}

    def store(judge_version):  # verdicts no checker of this version would give, stored as `judge_version`'s
        for r in records:
            r["correct"] = [False] * len(r["correct"])
            r.pop("judge", None)
            if judge_version is not None:  # None: written before verdicts recorded their version
                r["judge"] = judge_version
        (out / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    store(JUDGE_VERSION)  # this version's verdicts are what the store says
    assert evaluate(make_args(out, model, bench), generator_factory=Fake())[model][bench]["pass@8"] == 0
    for older in (JUDGE_VERSION - 1, None):
        store(older)
        again = Fake()
        with caplog.at_level(logging.WARNING):
            assert evaluate(make_args(out, model, bench), generator_factory=again) == reference
        assert again.problems == 0 and "stored samples of 10 problems again" in caplog.text
        caplog.clear()


def test_incomplete_set_is_refused(tmp_path, model_and_bench):
    from aer_trl.app.evaluation.harness import make_plans, score

    model, bench = model_and_bench
    args = make_args(tmp_path / "eval", model, bench, max_problems=4)
    evaluate(args, generator_factory=Fake())
    more = make_args(tmp_path / "eval", model, bench)
    # problem 3 was sampled in the chunk [3] of the 4-problem run, not in [3, 4, 5]: 7 of 10 are missing
    with pytest.raises(RuntimeError, match="7 of 10 problems have no stored samples"):
        score(more, make_plans(more, "transformers"))


def test_a_problem_repeated_in_a_benchmark_counts_its_own_samples(tmp_path, model_and_bench):
    """A benchmark that lists a problem twice (in one chunk or in two) evaluates each listing on its own samples, as
    it would two different problems: the store keeps both, and pass@1 is the mean over every generated sample."""
    from aer_trl.app.evaluation.store import load_store

    model, _ = model_and_bench
    bench = tmp_path / "repeats.jsonl"
    rows = [{"question": q, "answer": "1"} for q in ["0?", "0?", "1?", "0?", "2?"]]  # "0?" in chunk 0 twice, chunk 1
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = make_args(tmp_path / "eval", model, str(bench))
    result = evaluate(args, generator_factory=Fake())[model][str(bench)]
    store = load_store(tmp_path / "eval")
    assert len(store) == len(rows)
    verdicts = [v for r in store.values() for v in r["correct"]]
    assert len(verdicts) == len(rows) * args.num_samples
    assert result["pass@1"] == pytest.approx(sum(verdicts) / len(verdicts))
    again = Fake()
    assert evaluate(args, generator_factory=again)[model][str(bench)] == result and again.problems == 0


def test_each_problems_correct_count_is_reported_in_the_benchmarks_order(tmp_path, model_and_bench):
    """`correct` (per problem, and per group where the benchmark has groups): the counts pass@k was computed from,
    so any k up to n, or a per-problem view, comes from metrics.json without the store."""
    model, bench = model_and_bench
    m = evaluate(make_args(tmp_path / "eval", model, bench), generator_factory=Fake())[model][bench]
    stored = {json.loads(x)["index"]: sum(json.loads(x)["correct"]) for x in lines(tmp_path / "eval")}
    assert m["correct"] == [stored[i] for i in sorted(stored)] and len(m["correct"]) == 10
    assert m["pass@1"] == pytest.approx(sum(m["correct"]) / (10 * 8))
