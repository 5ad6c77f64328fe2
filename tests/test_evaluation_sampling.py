"""Sampling a chunk: what the samples are a function of."""

import json

from aer_trl.evaluation import evaluate
from tests.eval_helpers import lines, make_args


def test_a_longer_budget_continues_the_shorter_budgets_samples(tmp_path, model_and_bench):
    """The same model, problems and seed at two budgets: every sample of the longer one begins with the shorter one's
    (the real-LLM study splits the answers lost at the trained budget into cut off and never given on this)."""
    model, bench = model_and_bench
    short = evaluate(make_args(tmp_path / "eval", model, bench, max_new_tokens=3))
    longer = evaluate(make_args(tmp_path / "eval", model, bench, max_new_tokens=9))
    assert short[model][bench]["fingerprint"]["id"] != longer[model][bench]["fingerprint"]["id"]
    stored = [json.loads(x) for x in lines(tmp_path / "eval")]
    by_budget = {}
    for r in stored:
        by_budget.setdefault(r["fp"], {})[r["problem"]] = r["completions"]
    first, second = (by_budget[m[bench]["fingerprint"]["id"]] for m in (short[model], longer[model]))
    pairs = [(a, b) for p in first for a, b in zip(first[p], second[p])]
    assert len(pairs) == 10 * 8
    assert all(b.startswith(a) for a, b in pairs)
    assert sum(len(b) > len(a) for a, b in pairs) > 40  # the longer budget did sample more
