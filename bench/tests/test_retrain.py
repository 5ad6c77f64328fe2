"""aer_bench.studies.real_study.retrain: a recorded cell trained again is judged bit for bit, within the seed band
or outside it, with what differs in its environment."""

import json

import pytest
import study_helpers

from aer_bench.studies import real_study
from aer_bench.studies.real_study import retrain
from aer_trl.metrics import read_metrics


def rows(values: dict[int, float]) -> dict[int, dict]:
    return {step: {"reward": value, "aer/entropy": 0.5} for step, value in values.items()}


def test_the_verdict_is_bit_for_bit_within_the_band_or_outside_it():
    record = rows({1: 0.3, 2: 0.4})
    band = [rows({1: 0.2, 2: 0.3}), rows({1: 0.5, 2: 0.6})]
    assert retrain.compare(record, rows({1: 0.3, 2: 0.4}), band, 2)["verdict"] == "bit for bit"
    within = retrain.compare(record, rows({1: 0.3, 2: 0.45}), band, 2)
    assert within["verdict"] == "within the seed band"
    assert within["first_unequal"] == {"step": 2, "key": "reward", "record": 0.4, "retrained": 0.45}
    outside = retrain.compare(record, rows({1: 0.9, 2: 0.4}), band, 2)
    assert outside["verdict"] == "outside" and outside["first_outside"]["band"] == [0.2, 0.5]
    assert outside["outside_band"] == 1 and outside["compared"] == 4
    # one other seed is no band: an unequal value is outside
    assert retrain.compare(record, rows({1: 0.31, 2: 0.4}), band[:1], 2)["verdict"] == "outside"
    with pytest.raises(ValueError, match="step 2 is missing from the retrained run"):
        retrain.compare(record, rows({1: 0.3}), band, 2)


def test_the_seed_spread_is_each_seeds_share_outside_the_others_band():
    seeds = [rows({1: 0.1, 2: 0.2}), rows({1: 0.2, 2: 0.3}), rows({1: 0.3, 2: 0.1})]
    # rewards against the other two seeds' range (the entropy, 0.5 everywhere, is always inside): seed 0 outside at
    # step 1 (0.1 < 0.2), seed 1 at step 2 (0.3 > 0.2), seed 2 at both (0.3 > 0.2, 0.1 < 0.2); 4 values each
    assert retrain.seed_spread(seeds, 2) == [0.25, 0.25, 0.5]


def test_environment_changes_name_each_field_or_say_the_record_has_none():
    now = {"commit": "b", "torch": "2.13.0", "cpu": "x"}
    assert retrain.environment_changes({"commit": "a", "torch": "2.13.0", "cpu": "x"}, now) == {"commit": ["a", "b"]}
    assert "does not say" in retrain.environment_changes(None, now)


def test_an_unequal_retrain_on_a_loaded_machine_says_so():
    assert retrain.load_note([1.9, 2.0, 2.1], cores=2) is None  # the retrain's own 2 threads on 2 cores
    note = retrain.load_note([5.8, 5.9, 6.0], cores=2)
    assert "15-minute load average 6.0 on 2 cores" in note and "idle machine" in note


def test_a_gpu_retrain_names_its_device_and_a_cpu_one_its_bf16_kernels(monkeypatch):
    """A cell retrained on a GPU (gpu_smoke's `study` part) says so in what differs from its CPU record; on a CPU the
    environment has no GPU fields but whether PyTorch has bfloat16 matrix kernels there (without them a bf16 cell
    runs on another GEMM), so a CPU record and a CPU retrain on the same kind of CPU compare equal."""
    import torch

    from aer_bench.studies.real_study import cells

    cpu = cells.environment()
    assert not {"gpu", "cuda", "vllm"} & set(cpu)
    assert isinstance(cpu["cpu_bf16_kernels"], bool)
    import aer_trl.hardware

    # an AVX2-only CPU runs a bf16 cell on PyTorch's reference GEMM: a retrain there says so
    monkeypatch.setattr(aer_trl.hardware, "cpu_has_bf16_kernels", lambda: not cpu["cpu_bf16_kernels"])
    other = cells.environment()
    assert retrain.environment_changes(cpu, other) == {
        "cpu_bf16_kernels": [cpu["cpu_bf16_kernels"], not cpu["cpu_bf16_kernels"]]
    }
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    gpu = cells.environment()
    assert gpu["gpu"] == "NVIDIA H200" and "vllm" in gpu
    assert retrain.environment_changes(cpu, gpu)["gpu"] == [None, "NVIDIA H200"]


def test_a_recorded_cell_retrained_is_compared_with_its_record(tmp_path, monkeypatch):
    study = real_study.load_study(study_helpers.write_study(tmp_path / "study"))
    grpo = study.arm("grpo")
    for seed in (0, 1):
        study_helpers.fake_study_record(study, grpo, seed, pass1=0.4, entropy=0.2 + 0.1 * seed, unmarked=3)
    recorded = read_metrics(real_study.record_dir(study, grpo, 0) / "metrics.jsonl")
    commands = []

    def fake_training(command, **kwargs):  # the bench's command line, writing the record's first 3 steps again
        commands.append(command)
        out = tmp_path / "out" / "grpo-seed0"
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recorded if r["step"] <= 3))
        return 0

    monkeypatch.setattr(retrain.subprocess, "call", fake_training)
    result = retrain.retrain(study, grpo, 0, 3, tmp_path / "out", ["--bf16", "true"])
    assert result["verdict"] == "bit for bit" and result["band_seeds"] == 1
    behaviour = result["behaviour"]
    assert behaviour["retrained"] == behaviour["record"] and behaviour["retrained"]["reward_mean"] > 0
    assert behaviour["seed_range"]["entropy_last_quarter"][0] <= behaviour["record"]["entropy_last_quarter"]
    assert "does not say" in result["environment_changes"]  # a record made before environments were recorded
    assert set(result["environment"]) >= {"commit", "torch", "transformers", "trl", "accelerate", "cpu", "threads"}
    assert commands[0][commands[0].index("--max_steps") + 1] == "3" and "aer_bench.run" in commands[0]
    assert commands[0][-2:] == ["--bf16", "true"] and result["overrides"] == ["--bf16", "true"]
    assert json.loads((tmp_path / "out" / "grpo-seed0" / "retrain.json").read_text())["verdict"] == "bit for bit"
    with pytest.raises(FileExistsError, match="an earlier retrain"):
        retrain.retrain(study, grpo, 0, 3, tmp_path / "out")
    again = retrain.retrain(study, grpo, 0, 3, tmp_path / "out", judge_only=True)  # judged again, not trained
    assert again["verdict"] == "bit for bit" and len(commands) == 1
    with pytest.raises(FileNotFoundError, match="no earlier retrain to judge"):
        retrain.retrain(study, grpo, 1, 3, tmp_path / "out", judge_only=True)
    with pytest.raises(ValueError, match="--steps 500"):
        retrain.retrain(study, grpo, 0, 500, tmp_path / "other")
    with pytest.raises(FileNotFoundError, match="no finished record"):
        retrain.retrain(study, study.arm("fixed"), 0, 3, tmp_path / "other")


def test_the_retrained_models_held_out_figures_are_set_beside_the_recorded_seeds(tmp_path):
    study = real_study.load_study(study_helpers.write_study(tmp_path / "study"))
    grpo = study.arm("grpo")
    for seed, pass1 in ((0, 0.4), (1, 0.5)):
        study_helpers.fake_study_record(study, grpo, seed, pass1=pass1, entropy=0.2, unmarked=3)
    sampled = json.loads((real_study.record_dir(study, grpo, 0) / "passk.json").read_text())
    sampled["pass@1"] = 0.9  # above both recorded seeds
    figures = retrain.held_out_beside_seeds(study, grpo, 0, sampled)
    assert figures["seeds"] == [0, 1] and figures["outside_range"] == ["pass@1"]
    assert figures["retrained"]["pass@1"] == pytest.approx(90.0)
    assert figures["seed_range"]["pass@1"] == pytest.approx([44.0, 55.0])  # the records: 1.1 x pass1
    assert figures["record"]["tier3 pass@1"] == pytest.approx(40.0)
    assert figures["retrained"]["no_answer"] == pytest.approx(100 * 3 / 1024)
