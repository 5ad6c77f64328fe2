"""Studies written and recorded with made-up numbers, for the bench's tests."""

import json
from pathlib import Path

import yaml

from aer_bench.studies import real_study


def write_study(folder: Path, **extra) -> Path:
    """A study file (arms grpo and fixed α 0.3, seeds 0-1) in `folder`."""
    spec = {
        "title": "test study",
        "seeds": [0, 1],
        "settings": {"aer_tau": 0.4},
        "reference": "grpo",
        "arms": {"grpo": {"recipe": "grpo"}, "fixed": {"recipe": "aer", "settings": {"aer_alpha_init": 0.3}}},
        **extra,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "study.yaml").write_text(yaml.safe_dump(spec))
    return folder / "study.yaml"


def fake_study_record(study, arm, seed, pass1: float, entropy: float, unmarked: int, environment=None):
    """A cell's record as export_record writes it, with made-up numbers (and `environment` in its run.json)."""
    out = real_study.record_dir(study, arm, seed)
    out.mkdir(parents=True)
    h0 = 0.5
    steps = [
        {
            "step": s,
            "reward": 0.3 + 0.01 * s,
            "aer/entropy": entropy if s > 2 else h0,
            "aer/initial_entropy": h0,
            "aer/target_entropy": 0.4 * h0,
            "aer/alpha": 0.0,
            "completions/mean_length": 17.0,
        }
        for s in range(1, 11)
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    passk = {f"pass@{k}": min(1.0, pass1 * (1 + 0.1 * k)) for k in (1, 2, 4, 8, 16)}
    passk["per_group"] = {
        t: {"pass@1": pass1, "pass@16": min(1.0, 2 * pass1), "num_problems": 16, "num_samples": 16} for t in "0123"
    }
    passk.update(num_problems=64, num_samples=16, reward_stats={"unmarked": unmarked, "unparsed": 0, "timeouts": 0})
    (out / "passk.json").write_text(json.dumps(passk))
    (out / "recipe.yaml").write_text(yaml.safe_dump(study.merged(arm)))
    run = {"arm": arm.name, "seed": seed, "settings_hash": real_study.settings_hash(study.merged(arm))}
    if environment is not None:
        run["environment"] = environment
    (out / "run.json").write_text(json.dumps(run))
