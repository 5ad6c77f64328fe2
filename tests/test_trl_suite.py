"""benchmarks/trl_suite.py, the harness that runs TRL's own GRPO tests against trl.GRPOTrainer and AERGRPOTrainer,
exercised end to end offline on a small TRL-style suite (tests/data/trl_suite: TRL's Hub ids and data set, TRL's
test-case class): the local models and data answer TRL's ids, the trainer is swapped, the outcomes are compared and
an unexplained difference fails the run."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "data" / "trl_suite"


def _harness():
    spec = importlib.util.spec_from_file_location("trl_suite", ROOT / "benchmarks" / "trl_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_harness_runs_a_trl_style_suite_on_both_trainers_and_reports_the_difference(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "trl_suite.py"), "--trl_tests", str(SUITE)]
    done = subprocess.run(
        [*cmd, "--trainers", "trl", "aer", "--output_dir", str(out)], capture_output=True, text=True, timeout=600
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["results"]["trl"] == {"test_training": "passed", "test_the_trainer_is_trls_own": "passed"}, (
        done.stdout + (out / "pytest-trl.log").read_text()
    )
    # AERGRPOTrainer trains TRL's test as TRL's trainer does; the one test that asks "is this TRL's class?" differs,
    # and an unexplained difference fails the run
    assert summary["results"]["aer"] == {"test_training": "passed", "test_the_trainer_is_trls_own": "failed"}
    assert summary["differences"]["aer"] == [
        {"test": "test_the_trainer_is_trls_own", "trl": "passed", "aer": "failed", "reason": None}
    ]
    assert done.returncode == 1 and "unexplained differences: 1" in done.stdout
    assert "| aer | 1 | 1 | 0 | 0 |" in done.stdout


@pytest.mark.slow
def test_the_rloo_suite_runs_on_trls_trainer_and_aers_with_the_bonus_on(tmp_path):
    """`--suite rloo`: TRL's RLOOTrainer, AERRLOOTrainer converting the test's RLOOConfig, and AER with the bonus on
    from the first step train TRL-style tests alike (RLOO's KL against a reference model loaded by Hub id too)."""
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "trl_suite.py"), "--trl_tests", str(SUITE), "--suite", "rloo"]
    done = subprocess.run(
        [*cmd, "--trainers", "trl", "aer", "aer_bonus", "--output_dir", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["results"]["trl"]["test_training"] == "passed", done.stdout + (out / "pytest-trl.log").read_text()
    for trainer in ("aer", "aer_bonus"):
        assert summary["results"][trainer]["test_training"] == "passed", (out / f"pytest-{trainer}.log").read_text()
        assert summary["differences"][trainer] == [
            {"test": "test_the_trainer_is_trls_own", "trl": "passed", trainer: "failed", "reason": None}
        ]
    assert "aer: 1 tests differ from trl.RLOOTrainer" in done.stdout


def test_a_known_difference_is_explained_and_files_that_are_not_trls_are_refused(tmp_path, monkeypatch):
    harness = _harness()
    monkeypatch.setitem(harness.KNOWN, "aer", {"test_the_trainer": "a subclass, by design"})
    results = {"trl": {"test_the_trainer_is_trls_own": "passed"}, "aer": {"test_the_trainer_is_trls_own": "failed"}}
    assert harness.compare(results)["differences"]["aer"][0]["reason"] == "a subclass, by design"
    (tmp_path / "test_grpo_trainer.py").write_text("def test_x(): pass\n")
    (tmp_path / "testing_utils.py").write_text("")
    with pytest.raises(SystemExit, match="no Apache license header"):
        harness.prepare(tmp_path, tmp_path / "out")
    with pytest.raises(SystemExit, match=r"missing \['test_grpo_trainer.py', 'testing_utils.py'\]"):
        harness.prepare(tmp_path / "nowhere", tmp_path / "out")
