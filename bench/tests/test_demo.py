"""aer_bench.studies.demo: the whole lab pipeline in a few steps (warm start, GRPO and AER from their recipes, figure,
table), repeatable by seed."""

import json
from pathlib import Path

import pytest

from aer_bench.studies import demo
from aer_bench.training import train_recipe
from aer_trl.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_quick_runs_the_whole_pipeline(tmp_path):
    summary = demo.main(["--quick", "--output_dir", str(tmp_path / "demo"), "--lab_cache_dir", str(tmp_path / "lab")])
    out = tmp_path / "demo"
    assert (out / "figure.png").stat().st_size > 10_000
    assert (
        "| AER-GRPO (`aer`) | 1 |" in (out / "passk.md").read_text()
        and "| GRPO (`grpo`) | 1 |" in (out / "passk.md").read_text()
    )
    for method in ("grpo", "aer"):
        records = read_metrics(out / f"{method}-seed0" / "metrics.jsonl")
        assert [r["step"] for r in records if "loss" in r] == list(range(1, 9))
        logged = [r for r in records if "loss" in r]
        # H_t is measured over a whole rollout batch (its 4 steps), then repeated on every log
        assert [r["step"] for r in logged if "aer/entropy" in r] == list(range(4, 9))
        # rollout metrics come with the step that sampled them: 4 optimizer steps per rollout batch in the lab
        assert any(k.startswith("lab/accuracy_tier") for k in logged[0])
        assert (out / f"{method}-seed0" / "model.safetensors").exists()
    grpo_alphas = [r["aer/alpha"] for r in read_metrics(out / "grpo-seed0" / "metrics.jsonl")]
    assert set(grpo_alphas) == {0.0}  # the baseline never switches the bonus on
    assert set(summary["passk"]) == {"grpo", "aer"}
    assert json.loads((out / "results.json").read_text())["seeds"] == [0]


@pytest.mark.slow  # 6-9 s on 2 cores
def test_the_same_seed_gives_the_same_lab_run(tmp_path):
    """Repeatability: the lab's RL run (sampling, rewards, 4 off-policy steps per rollout, α) is a function of the
    seed: two runs agree on every logged number except wall-clock ones; another seed gives another run."""
    timing = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}

    def run(name, seed):
        overrides = [*demo.QUICK_OVERRIDES, "--max_steps", "8", "--lab_cache_dir", str(tmp_path / "lab")]
        train_recipe(demo.RECIPES / "aer.yaml", [*overrides, "--output_dir", str(tmp_path / name), "--seed", seed])
        return [
            {k: v for k, v in r.items() if k not in timing} for r in read_metrics(tmp_path / name / "metrics.jsonl")
        ]

    first, second, other = run("a", "0"), run("b", "0"), run("c", "1")
    assert len(first) == 9 and first == second
    assert [r.get("aer/entropy") for r in first] != [r.get("aer/entropy") for r in other]
