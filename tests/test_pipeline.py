"""The whole lab pipeline in a few steps: warm start, GRPO and AER through recipes/train.py's code, figure, table."""

import json
import sys
from pathlib import Path

import pytest

from aer_trl.lab import demo
from aer_trl.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]


def test_demo_quick_runs_the_whole_pipeline(tmp_path):
    summary = demo.main(["--quick", "--output_dir", str(tmp_path / "demo"), "--lab_cache_dir", str(tmp_path / "lab")])
    out = tmp_path / "demo"
    assert (out / "figure.png").stat().st_size > 10_000
    assert "| aer | 1 |" in (out / "passk.md").read_text() and "| grpo | 1 |" in (out / "passk.md").read_text()
    for method in ("grpo", "aer"):
        records = read_metrics(out / f"{method}-seed0" / "metrics.jsonl")
        assert [r["step"] for r in records if "loss" in r] == [1, 2, 3]
        logged = [r for r in records if "loss" in r]
        assert all("aer/entropy" in r and any(k.startswith("lab/accuracy_tier") for k in r) for r in logged)
        assert (out / f"{method}-seed0" / "model.safetensors").exists()
    grpo_alphas = [r["aer/alpha"] for r in read_metrics(out / "grpo-seed0" / "metrics.jsonl")]
    assert set(grpo_alphas) == {0.0}  # the baseline never switches the bonus on
    assert set(summary["passk"]) == {"grpo", "aer"}
    assert json.loads((out / "results.json").read_text())["seeds"] == [0]


def test_train_script_default_is_the_lab(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "recipes"))
    import train  # recipes/train.py

    captured = {}
    monkeypatch.setattr(train, "train", lambda s, t, m: captured.update(script=s, training=t, model=m))
    train.main(["--output_dir", str(tmp_path)])
    assert captured["script"].dataset_name is None and captured["model"].model_name_or_path is None
    assert captured["training"].use_cpu and captured["training"].method == "aer"
    assert captured["training"].output_dir == str(tmp_path)  # flags override the YAML


def test_unknown_reward_is_a_clear_error():
    from aer_trl.run import resolve_reward_funcs

    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        resolve_reward_funcs(["nope"])
