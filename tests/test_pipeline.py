"""The whole lab pipeline in a few steps: warm start, GRPO and AER through recipes/train.py's code, figure, table."""

import json
import sys
from pathlib import Path

import pytest

from aer_trl.lab import demo
from aer_trl.metrics import read_metrics
from aer_trl.training import train_recipe

ROOT = Path(__file__).resolve().parents[1]


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


def test_train_script_default_is_the_lab(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "recipes"))
    import train  # recipes/train.py

    import aer_trl.run

    captured = {}
    monkeypatch.setattr(aer_trl.run, "train", lambda s, t, m: captured.update(script=s, training=t, model=m))
    train.main(["--output_dir", str(tmp_path)])
    assert captured["script"].dataset_name == "lab" and captured["model"].model_name_or_path is None
    assert captured["training"].use_cpu and captured["training"].method == "aer"
    assert captured["training"].output_dir == str(tmp_path)  # flags override the YAML


def test_unknown_reward_is_a_clear_error():
    from aer_trl.training import resolve_reward_funcs

    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        resolve_reward_funcs(["nope"])


def lab_argv(tmp_path, *extra):
    return [
        "--config",
        str(ROOT / "recipes" / "lab" / "aer.yaml"),
        "--output_dir",
        str(tmp_path / "run"),
        "--lab_cache_dir",
        str(tmp_path / "lab"),
        *demo.QUICK_OVERRIDES,
        "--steps_per_generation",  # one optimizer step per rollout batch: a checkpoint after every step is exact
        "1",
        "--save_strategy",
        "steps",
        "--save_steps",
        "1",
        *extra,
    ]


def test_resume_true_from_the_cli_skips_an_incomplete_checkpoint(tmp_path):
    import subprocess

    sys.path.insert(0, str(ROOT / "recipes"))
    import train  # recipes/train.py

    train.main(lab_argv(tmp_path, "--max_steps", "2"))
    run = tmp_path / "run"
    (run / "checkpoint-2" / "trainer_state.json").unlink()  # a save killed half-way (or a full disk)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "recipes" / "train.py"),
            *lab_argv(tmp_path, "--max_steps", "3"),
            "--resume_from_checkpoint",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skipping" in done.stderr and "checkpoint-2" in done.stderr
    state = json.loads((run / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3


def test_resume_values_are_checked(tmp_path):
    from aer_trl.training import resolve_resume

    assert resolve_resume("false", str(tmp_path)) is None and resolve_resume(None, str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        resolve_resume("latest", str(tmp_path))
    with pytest.raises(ValueError, match="'maybe'"):
        resolve_resume("maybe", str(tmp_path))


def test_a_half_specified_real_run_is_refused():
    from trl import ModelConfig

    from aer_trl.sources import get_source
    from aer_trl.training import check_model_given

    with pytest.raises(ValueError, match="dataset_name: say what to train on"):
        get_source(None)
    with pytest.raises(ValueError, match="model_name_or_path: training on 'gsm8k' needs a model"):
        check_model_given(get_source("gsm8k"), ModelConfig())
    with pytest.raises(FileNotFoundError, match="model_name_or_path: no model folder"):
        check_model_given(get_source("gsm8k"), ModelConfig(model_name_or_path="runs/a/missing"))
    check_model_given(get_source("lab"), ModelConfig())  # sources with a default model need none
    check_model_given(get_source("arithmetic"), ModelConfig())


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
