"""The evaluation harness end to end on a tiny local model and a local benchmark (transformers backend)."""

import json

import pytest

from aer_trl.evaluate import EvalArguments, PassAtKCallback, TransformersGenerator, evaluate
from tests import helpers


@pytest.fixture
def model_and_bench(tmp_path, tokenizer):
    model_dir = tmp_path / "tiny"
    helpers.make_model(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    bench = tmp_path / "bench.jsonl"
    # the char model emits mostly single characters: make a few golds likely to be hit by chance
    rows = [{"question": f"{i}?", "answer": str(i % 3)} for i in range(10)]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(model_dir), str(bench)


def make_args(out, model, bench, **kw):
    return EvalArguments(
        models=[model],
        benchmarks=[bench],
        output_dir=str(out),
        num_samples=8,
        k_list=[1, 2, 4, 8],
        max_new_tokens=2,
        batch_size=3,
        seed=7,
        **kw,
    )


class Counting:
    """Wraps the generator factory, counts the problems generated and can fail after some batches."""

    def __init__(self, fail_after=None):
        self.problems, self.batches, self.fail_after = 0, 0, fail_after

    def __call__(self, model_name, args):
        gen = TransformersGenerator.from_pretrained(model_name, args)

        def run(prompts, seed):
            if self.fail_after is not None and self.batches >= self.fail_after:
                raise KeyboardInterrupt("simulated interruption")
            self.batches += 1
            self.problems += len(prompts)
            return gen(prompts, seed)

        return run


def test_end_to_end_table_json_plot(tmp_path, model_and_bench):
    model, bench = model_and_bench
    metrics = evaluate(make_args(tmp_path / "eval", model, bench))
    out = tmp_path / "eval"
    m = metrics[model][bench]
    assert m["num_problems"] == 10
    assert 0.0 <= m["pass@1"] <= m["pass@2"] <= m["pass@4"] <= m["pass@8"] <= 1.0
    assert m["mean@n"] == pytest.approx(m["pass@1"])
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(metrics))
    table = (out / "table.md").read_text()
    assert "| Method | bench pass@1 | bench pass@8 | Avg. pass@1 | Avg. pass@8 |" in table and "| tiny |" in table
    assert (out / "passk.png").stat().st_size > 5000
    lines = (out / "generations.jsonl").read_text().splitlines()
    assert len(lines) == 10 and all(len(json.loads(x)["completions"]) == 8 for x in lines)


def test_resume_after_interruption_matches_uninterrupted_run(tmp_path, model_and_bench):
    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench))

    first = Counting(fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate(make_args(tmp_path / "resumed", model, bench), generator_factory=first)
    assert first.problems == 6  # two batches of 3 written before the interruption
    second = Counting()
    resumed = evaluate(make_args(tmp_path / "resumed", model, bench), generator_factory=second)
    assert second.problems == 4  # only the unfinished problems are generated again
    assert resumed == reference
    ref_lines = sorted((tmp_path / "ref" / "generations.jsonl").read_text().splitlines())
    assert sorted((tmp_path / "resumed" / "generations.jsonl").read_text().splitlines()) == ref_lines

    third = Counting()
    rescored = evaluate(make_args(tmp_path / "resumed", model, bench, rescore=True), generator_factory=third)
    assert third.problems == 0 and rescored == reference  # re-scored from disk, nothing generated


def test_invalid_eval_arguments():
    with pytest.raises(ValueError, match="k_list"):
        EvalArguments(models=["m"], num_samples=4, k_list=[1, 8])
    with pytest.raises(ValueError, match="backend"):
        EvalArguments(models=["m"], backend="tgi")


def test_pass_at_k_callback_records_best_checkpoint(tmp_path, tokenizer, model_and_bench):
    from aer_trl import AERGRPOTrainer

    _, bench = model_and_bench
    cb = PassAtKCallback(bench, eval_steps=1, num_samples=4, k_list=[1, 4], max_new_tokens=2, max_problems=4)
    trainer = AERGRPOTrainer(
        model=helpers.make_model(tokenizer),
        reward_funcs=[helpers.even_length_reward],
        args=helpers.make_config(tmp_path, max_steps=2),
        train_dataset=helpers.make_dataset(),
        processing_class=tokenizer,
        callbacks=[cb],
    )
    trainer.train()
    assert [h["step"] for h in cb.history] == [1, 2]
    best = json.loads((tmp_path / "best_checkpoint.json").read_text())
    assert best["step"] == cb.best_step and best["pass@1"] == max(h["pass@1"] for h in cb.history)
    assert (tmp_path / f"checkpoint-{cb.best_step}").exists()
    assert any(k.startswith("eval_passk/bench/pass@1") for h in trainer.state.log_history for k in h)


def test_data_parallel_workers_give_the_same_result(tmp_path, model_and_bench):
    """Batches spread over 2 worker processes (one per GPU with vLLM; here on CPU) give the single-process result."""
    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench))
    sharded = evaluate(make_args(tmp_path / "dp", model, bench, data_parallel=2, backend="transformers"))
    assert sharded == reference
    assert sorted(p.name for p in (tmp_path / "dp").glob("generations*.jsonl")) == [
        "generations.shard0.jsonl",
        "generations.shard1.jsonl",
    ]
