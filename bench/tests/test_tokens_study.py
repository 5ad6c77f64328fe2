"""studies/tokens.py's breakdown: it reads back the completions the evaluation stored for a model and sums each token's
entropy and gradient norm by class. Checked against an independent computation: each completion fed one token at a
time, the entropy taken from the last position's logits. An untrained model's entropy is nearly log V at every
position, so the gradient norms are what tell an offset error (checked: the logits shifted by one fail here)."""

import json

import pytest
import torch

from aer_bench.analysis import REPORTED, entropy_and_gradient, token_classes
from aer_bench.studies.tokens import breakdown
from aer_trl.app.evaluation import EvalArguments, evaluate
from tests import helpers


@pytest.fixture
def evaluated(tmp_path, tokenizer):
    model_dir = tmp_path / "tiny"
    helpers.save_model(tokenizer, model_dir)
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps({"question": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(3)))
    args = EvalArguments(
        models=[str(model_dir)],
        benchmarks=[str(bench)],
        output_dir=str(tmp_path / "eval"),
        num_samples=3,
        k_list=[1],
        max_new_tokens=6,
        batch_size=2,
        temperature=0.7,
        seed=3,
        backend="transformers",
    )
    evaluate(args)
    return model_dir, args


@torch.no_grad()
def test_breakdown_sums_each_stored_completions_token_entropies_by_class(evaluated, tokenizer):
    model_dir, args = evaluated
    sums = breakdown(str(model_dir), args, samples=2)

    from transformers import AutoModelForCausalLM

    from aer_trl.app.evaluation.plan import make_plans
    from aer_trl.app.evaluation.store import load_store

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    records = {r["problem"]: r for r in load_store(model_dir.parent / "eval", repair=False).values()}
    problems = [p for chunk in make_plans(args, "transformers")[0].chunks for p in chunk.problems]
    assert len(records) == len(problems) == 3 and all(len(r["completions"]) == 3 for r in records.values())
    expected = {c: {"tokens": 0, "entropy": 0.0, "gradient": 0.0} for c in REPORTED}
    for problem in problems:  # the prompt as the evaluation formatted it (instruction, chat template)
        record = records[problem.hash]
        prompt = tokenizer(problem.text, add_special_tokens=False).input_ids
        for completion in record["completions"][:2]:  # samples=2: the first two of each problem
            ids = tokenizer(completion, add_special_tokens=False).input_ids
            classes = token_classes([tokenizer.decode([i]) for i in ids])
            for n, c in enumerate(classes):
                logits = model(input_ids=torch.tensor([prompt + ids[:n]])).logits[0, -1]
                h, g = entropy_and_gradient(logits / args.temperature)
                if c in expected:
                    expected[c]["tokens"] += 1
                    expected[c]["entropy"] += h.item()
                    expected[c]["gradient"] += g.item()
    assert sum(v["tokens"] for v in sums.values()) > 0
    for c in REPORTED:
        assert sums[c]["tokens"] == expected[c]["tokens"], c
        assert sums[c]["entropy"] == pytest.approx(expected[c]["entropy"], rel=1e-4, abs=1e-5), c
        assert sums[c]["gradient"] == pytest.approx(expected[c]["gradient"], rel=1e-4, abs=1e-5), c


def test_breakdown_of_a_model_the_evaluation_did_not_sample_is_an_error(evaluated, tokenizer, tmp_path):
    _, args = evaluated
    other = tmp_path / "other"
    helpers.save_model(tokenizer, other, seed=1)
    args.models = [str(other)]
    with pytest.raises(RuntimeError, match="no stored held-out samples"):
        breakdown(str(other), args)
