"""Sampling a chunk: what the samples are a function of."""

import json

from aer_trl.app.evaluation import evaluate
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


def test_a_stop_string_ends_each_sample_where_it_first_occurs_and_is_not_kept(tokenizer):
    """`stop` (a base model's recipe stops at a next 'Question:'): each sample is the unstopped sample cut before its
    first stop string (transformers' stop_strings, as vLLM's stop); the other rows' draws are unchanged."""
    from aer_trl.app.evaluation.sampling import cut_at_stop, sample_chunk
    from tests import helpers

    model = helpers.make_model(tokenizer)
    texts = ["1+1=", "22+3=", "7*8="]
    free = sample_chunk(model, tokenizer, texts, n=3, seed=5, max_new_tokens=12)
    stop = next(ch for ch in "".join(s for row in free for s in row) if ch.isalnum())  # a character that occurs
    stopped = sample_chunk(model, tokenizer, texts, n=3, seed=5, max_new_tokens=12, stop=[stop])
    assert stopped == [[cut_at_stop(s, [stop]) for s in row] for row in free]
    assert any(stop in s for row in free for s in row) and not any(stop in s for row in stopped for s in row)
    assert cut_at_stop("x\nQuestion: y", ["\nQuestion:", "y"]) == "x" and cut_at_stop("abc", None) == "abc"


def test_the_stop_strings_are_part_of_the_fingerprint_only_where_set(tmp_path, model_and_bench):
    from aer_trl.app.evaluation.backends import vllm_sampling
    from aer_trl.app.evaluation.plan import run_fingerprint

    model, bench = model_and_bench
    plain, stopped = make_args(tmp_path, model, bench), make_args(tmp_path, model, bench, stop="\nQuestion:")
    assert stopped.stop == ["\nQuestion:"]  # one string from a recipe: a list of one
    assert "stop" not in run_fingerprint(plain, model, "transformers")  # earlier stores stay valid
    assert run_fingerprint(stopped, model, "transformers")["stop"] == ["\nQuestion:"]
    assert vllm_sampling(stopped)["stop"] == ["\nQuestion:"] and "stop" not in vllm_sampling(plain)
