"""The benchmark scripts keep working (quick mode). No timing is asserted: figures are printed, not tested."""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_step_cost_quick(tmp_path, capsys):
    import step_cost

    rows = step_cost.main(["--quick", "--trainer", "grpo", "rloo", "--json", str(tmp_path / "rows.json")])
    assert [r["trainer"] for r in rows] == ["grpo", "rloo"]  # AER on each TRL loss against that loss, one run
    assert all(r["grpo_ms"] > 0 and r["aer_ms"] > 0 and "time_ratio" in r for r in rows)
    assert json.loads((tmp_path / "rows.json").read_text()) == rows
    assert "GRPO ms" in capsys.readouterr().out


def test_step_cost_on_cpu_under_bf16_autocast_says_whether_the_cpu_has_bf16_kernels(capsys, monkeypatch):
    """`--cpu_bf16`: each step's loss under bf16 autocast, as TRL's default bf16=True trains on a CPU, so the two
    dtypes can be set side by side on any CPU (without bf16 kernels bf16 runs PyTorch's reference GEMM)."""
    import step_cost
    import torch

    seen = []
    autocast = torch.autocast

    def spy(*args, **kwargs):
        if "enabled" in kwargs and kwargs.get("dtype") is torch.bfloat16:  # the benchmark's autocast
            seen.append(kwargs["enabled"])
        return autocast(*args, **kwargs)

    monkeypatch.setattr(torch, "autocast", spy)
    rows = step_cost.main(["--quick", "--cpu_bf16"])
    assert rows[0]["cpu_bf16"] and rows[0]["shape"].endswith("(bf16 autocast)") and seen and all(seen)
    out = capsys.readouterr().out
    assert f"bf16 matrix kernels: {'yes' if step_cost.cpu_has_bf16_kernels() else 'no'}" in out
    seen.clear()
    assert not step_cost.main(["--quick"])[0]["cpu_bf16"] and seen and not any(seen)  # float32: no autocast


def test_entropy_tracking_reads_demo_metrics(tmp_path, capsys):
    import entropy_tracking

    run = tmp_path / "aer-seed0"
    run.mkdir()
    records = [
        {"step": s, "aer/entropy": h, "aer/target_entropy": 0.2, "aer/initial_entropy": 0.5}
        for s, h in [(1, 0.5), (2, 0.3), (3, 0.22), (4, 0.18)]
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = entropy_tracking.main([str(tmp_path)])
    # second half: steps 3 and 4 -> distances 0.1 and 0.1
    assert abs(out["aer"][0]["median"] - 0.1) < 1e-9 and out["aer"][0]["within_15pct"] == 1.0
    assert "| aer | 1 |" in capsys.readouterr().out
    # the lab_ablation layout: <run>/seed<k>/metrics.jsonl, the run named by its folder
    cells = tmp_path / "cells" / "aer-0123abcd"
    for seed in (0, 1):
        (cells / f"seed{seed}").mkdir(parents=True)
        (cells / f"seed{seed}" / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text())
    out = entropy_tracking.main([str(cells)])
    assert len(out["aer-0123abcd"]) == 2 and "| aer-0123abcd | 2 |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no <method>-seed<k>"):
        entropy_tracking.main([str(tmp_path / "cells")])


def tiny():
    from aer_bench.studies.demo import QUICK_OVERRIDES

    return [*QUICK_OVERRIDES, "--max_steps", "4"]  # one rollout batch: its entropy is measured


@pytest.mark.slow
def test_lab_ablation_is_resumable_and_aggregates_with_intervals(tmp_path, monkeypatch):
    import lab_ablation

    common = ["--study", "rho", "--seeds", "0", "1", "--output_dir", str(tmp_path / "abl")]
    common += ["--lab_cache_dir", str(tmp_path / "lab"), "--eval_per_tier", "2", "--eval_samples", "4"]
    monkeypatch.setattr(lab_ablation, "STUDIES", {"rho": lab_ablation.STUDIES["rho"][:2]})
    rows = lab_ablation.main([*common, *tiny()])
    assert set(rows) == {"aer_rho0.0", "aer_rho0.2"} and all(r["seeds"] == [0, 1] for r in rows.values())
    mean, half = rows["aer_rho0.2"]["pass@1"]
    assert 0 <= mean <= 100 and (half >= 0 or half != half)
    table = (tmp_path / "abl" / "rho.md").read_text()
    assert "| aer_rho0.0 | 2 |" in table and "95% Student-t" in table and "--max_steps 4" in table
    assert (tmp_path / "abl" / "rho.png").stat().st_size > 5000

    from aer_bench import training  # the lab trains through the bench's classes

    monkeypatch.setattr(
        training, "train_recipe", lambda *a, **k: (_ for _ in ()).throw(AssertionError("reran a cell"))
    )
    rerun = lab_ablation.main([*common, *tiny()])  # every cell is on disk: nothing is trained again
    assert rerun["aer_rho0.2"]["pass@1"] == rows["aer_rho0.2"]["pass@1"]
    again = lab_ablation.main([*common, *tiny(), "--aggregate_only"])
    assert again["aer_rho0.2"]["pass@1"] == rows["aer_rho0.2"]["pass@1"]
    # one flag changed: the finished cells belong to other settings and are neither reused nor mixed in
    with pytest.raises(SystemExit, match="no finished cell for study 'rho' with these settings"):
        lab_ablation.main([*common, *tiny(), "--learning_rate", "1e-4", "--aggregate_only"])
    with pytest.raises(AssertionError, match="reran a cell"):
        lab_ablation.main([*common, *tiny(), "--learning_rate", "1e-4"])
    with pytest.raises(SystemExit):  # the script sets these per cell
        lab_ablation.main([*common, *tiny(), "--seed", "3"])


def test_lab_ablation_studies_share_runs_and_sweep_values_win(tmp_path, monkeypatch):
    import lab_ablation

    from aer_bench import training  # the lab trains through the bench's classes

    calls = []

    def fake_run(recipe, overrides):
        calls.append((recipe.stem, overrides))
        raise KeyboardInterrupt  # stop at the first training run: only the plan is checked here

    monkeypatch.setattr(training, "train_recipe", fake_run)
    args = argparse.Namespace(output_dir=str(tmp_path), recipe_overrides=["--aer_rho", "0.9"])
    args.eval_per_tier, args.eval_samples, args.lab_cache_dir = 2, 4, str(tmp_path / "lab")
    dirs = {
        (study, name): lab_ablation.cell_dir(method, extra, 0, args)
        for study, entries in lab_ablation.STUDIES.items()
        for name, method, extra in entries
    }
    # GRPO and AER are one run each, whichever study asks; the sweeps' default points are the AER run
    assert dirs["table1", "aer"] == dirs["table2", "aer"] == dirs["rho", "aer_rho0.2"] == dirs["tau", "aer_tau0.7"]
    assert dirs["table1", "grpo"] == dirs["table2", "grpo"]
    assert len(set(dirs.values())) == 6 + 4 + 4 + 4
    with pytest.raises(KeyboardInterrupt):
        lab_ablation.run_cell("rho", "aer_rho0.5", "aer", ["--aer_rho", "0.5"], 0, args, held_out=None)
    overrides = calls[0][1]
    assert overrides[overrides.index("--aer_rho", overrides.index("0.9")) + 1] == "0.5"  # the sweep's value last


def test_gpu_smoke_turns_vllms_flashinfer_sampler_off_only_where_flashinfer_is_missing(monkeypatch):
    import gpu_smoke

    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    installed = {"vllm": "0.26.0"}
    monkeypatch.setattr(gpu_smoke, "version", installed.get)
    assert gpu_smoke.sampler_env() == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}  # vLLM brought without FlashInfer
    installed["flashinfer-python"] = "0.6.14"
    assert gpu_smoke.sampler_env() == {}  # a pip-installed vLLM: its default
    del installed["vllm"], installed["flashinfer-python"]
    assert gpu_smoke.sampler_env() == {}  # no vLLM
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    installed["vllm"] = "0.26.0"
    assert gpu_smoke.sampler_env() == {}  # the user's setting stands
    assert gpu_smoke.sampler_setting() == "1"  # and the JSON says so
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "0")
    installed["flashinfer-python"] = "0.6.14"
    assert gpu_smoke.sampler_setting() == "0"  # not "vLLM's default" (what the H200 run of 2026-11-27 recorded)
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER")
    assert gpu_smoke.sampler_setting() == "vLLM's default"
    del installed["flashinfer-python"]
    assert gpu_smoke.sampler_setting() == "0"  # the one sampler_env sets


@pytest.mark.real
@pytest.mark.slow
def test_gpu_smoke_runs_every_part_in_its_cpu_mode(tmp_path):
    """`make gpu-smoke` cannot rot before a GPU is lent: its CPU mode runs every part small, and each verdict is
    read from what the part left (the recipe's checkpoint and validation, the shared path really taken)."""
    import gpu_smoke

    report = gpu_smoke.main(["--cpu", "--json", str(tmp_path / "smoke.json"), "--output_dir", str(tmp_path / "out")])
    assert report["failed"] == [] and json.loads((tmp_path / "smoke.json").read_text())["mode"] == "cpu"
    assert report["run"]["parts"] == list(gpu_smoke.DEFAULT_PARTS)  # the whole script's time, in one go
    assert report["run"]["wall_s"] >= sum(report[p]["wall_s"] for p in gpu_smoke.DEFAULT_PARTS) - 1
    assert report["tests"]["ok"] and report["tests"]["skipped"] == report["tests"]["tests"] > 0  # no GPU here
    on, off = [[r for r in report["share"]["rows"] if f"shared prompt {x}" in r["shape"]] for x in ("on", "off")]
    assert on and off and all(r["shared_path_ran"] for r in on) and not any(r["shared_path_ran"] for r in off)
    recipe = report["recipe"]
    assert recipe["checkpoints"] == ["checkpoint-2"] and recipe["model_card"] and not recipe["zero3"]
    assert [v["step"] for v in recipe["validation"]] == [2] and recipe["best_checkpoint"]["step"] == 2
    paper = report["paper"]  # the shipped paper recipe file, sized down; on a GPU: ZeRO-3, bf16
    assert paper["checkpoints"] == ["checkpoint-1"] and [v["step"] for v in paper["validation"]] == [1]
    assert "model_name_or_path" in paper["changed_keys"] and "learning_rate" not in paper["changed_keys"]
    assert report["eval"]["harness_over_plain"] > 0
    assert recipe["vllm"] == paper["vllm"] == (importlib.util.find_spec("vllm") is not None)  # vLLM where installed


@pytest.mark.real
@pytest.mark.slow
def test_gpu_smoke_study_part_retrains_a_recorded_seed_pair_and_judges_it(tmp_path):
    """Issue 61's seed pair, in the CPU mode: one step of the hard-problem study's seed 20 of each arm, trained by the
    retrain command as the study trained it (bf16 autocast; float32 on a CPU without bf16 kernels) and judged
    against the committed records (the plumbing: its figures mean nothing here)."""
    import gpu_smoke

    out = tmp_path / "out"
    report = gpu_smoke.main(["--cpu", "--parts", "study", "--output_dir", str(out)])
    study = report["study"]
    assert report["failed"] == [] and study["steps"] == 1 and not study["vllm"]
    assert study["overrides"] == gpu_smoke.study_overrides(cpu=True)  # float32 on a CPU without bf16 kernels
    for arm in ("grpo", "aer-cap"):
        # the verdict, not which one: under load (another test beside it) a run takes other float paths
        # (docs/real_llm.md §3), so a 1-step CPU retrain is bit for bit only on an idle machine
        verdicts = ("bit for bit", "within the seed band", "within the seed spread", "outside")
        assert study[arm]["exit"] == 0 and study[arm]["verdict"] in verdicts
        assert study[arm]["behaviour"]["retrained"]["reward_mean"] is not None
        assert (out / "study" / f"{arm}-seed20" / "retrain.json").is_file()


def test_gpu_smoke_study_part_switches_the_cpu_recipe_to_the_gpu(monkeypatch):
    """On a GPU the study's CPU settings are switched off and rollouts go through vLLM colocate where installed
    (the recipes' transformers-only generation_kwargs emptied for it); on CPU the record's settings stand, in float32
    where the CPU has no bfloat16 matrix kernels."""
    import gpu_smoke

    import aer_trl.trainer

    monkeypatch.setattr(aer_trl.hardware, "cpu_has_bf16_kernels", lambda: True)
    assert gpu_smoke.study_overrides(cpu=True) == []
    monkeypatch.setattr(aer_trl.hardware, "cpu_has_bf16_kernels", lambda: False)  # an AVX2-only CPU: ~20x a step
    assert gpu_smoke.study_overrides(cpu=True) == ["--bf16", "false"]
    monkeypatch.setattr(gpu_smoke, "has_vllm", lambda: True)
    flags = gpu_smoke.study_overrides(cpu=False)
    pairs = dict(zip(flags[::2], flags[1::2]))
    assert pairs["--use_cpu"] == "false" and pairs["--use_vllm"] == "true" and pairs["--vllm_mode"] == "colocate"
    assert pairs["--share_prompt_generation"] == pairs["--share_prompt_forward"] == "false"
    assert pairs["--generation_kwargs"] == "{}" and "--bf16" not in pairs  # bf16 autocast: the study's own setting
    monkeypatch.setattr(gpu_smoke, "has_vllm", lambda: False)
    assert "--use_vllm" not in gpu_smoke.study_overrides(cpu=False)


def test_gpu_smoke_run_again_trains_its_runs_afresh(tmp_path, monkeypatch):
    """`make gpu-smoke` twice on one machine: each part's run starts in an empty folder (an earlier smoke's
    checkpoints there would refuse the fresh run, or be read as this run's)."""
    import gpu_smoke

    seen = []

    def fake_run(command, log, timeout):
        out = Path(command[command.index("--output_dir") + 1]) if "--output_dir" in command else None
        folder = out if out is not None else tmp_path / "out" / "paper" / "run"
        seen.append(sorted(p.name for p in folder.glob("checkpoint-*")))
        return 0, 0.0

    monkeypatch.setattr(gpu_smoke, "run", fake_run)
    for part, folder in ((gpu_smoke.part_recipe, "recipe"), (gpu_smoke.part_paper, "paper/run")):
        leftover = tmp_path / "out" / folder / "checkpoint-7"
        leftover.mkdir(parents=True)
        (leftover / "trainer_state.json").write_text("{}")
        part(True, tmp_path / "out")
    assert seen == [[], []]


def test_gpu_carry_keeps_what_the_machine_lacks_and_drops_what_a_dense_model_never_loads():
    import gpu_carry

    image = gpu_carry.image_packages()
    assert {"torch", "transformers", "accelerate", "peft", "numpy"} <= image and "vllm" not in image
    pins = ["vllm==0.26.0", "torch==2.11.0", "Tilelang==0.1.9", "flashinfer_python==0.6.14", "pydantic==2.14.4"]
    pins += ["nvidia-cutlass-dsl-libs-cu13==4.6.0", "numpy==2.5.2", "trl==1.16.0"]
    assert gpu_carry.pins_to_carry(pins, image) == ["vllm==0.26.0", "pydantic==2.14.4", "trl==1.16.0"]
    assert "flashinfer_python==0.6.14" in gpu_carry.pins_to_carry(pins, image, flashinfer=True)
    import gpu_smoke

    assert set(gpu_carry.SMOKE_PARTS) <= set(gpu_smoke.PARTS)  # the last device call runs these


def test_gpu_carry_refuses_parts_that_would_travel_with_every_call(tmp_path):
    import gpu_carry

    gpu_carry.check_out(gpu_carry.ROOT / ".carry")  # .gitignore's
    with pytest.raises(SystemExit, match="git does not ignore it"):
        gpu_carry.check_out(gpu_carry.ROOT / "carry-parts")
    with pytest.raises(SystemExit, match="inside the checkout"):
        gpu_carry.check_out(tmp_path)


def test_gpu_carry_strips_vllms_unused_kernels_and_its_parts_join_back(tmp_path):
    import hashlib
    import os

    import gpu_carry

    site = tmp_path / "site"
    files = [
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",  # stripped
        "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",  # kept: Hopper's attention
        "vllm/_moe_C_stable_libtorch.abi3.so",
        "vllm/_C_stable_libtorch.abi3.so",
        "vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so",
        "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so",  # the machine's Python
        "vllm/third_party/deep_gemm/include/cute/a.hpp",
        "vllm/vllm-rs",
    ]
    for name in files:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(b"x" * 10)
    removed = dict(gpu_carry.strip_site(site))
    left = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file())
    assert left == [
        "vllm/_C_stable_libtorch.abi3.so",
        "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so",
        "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
    ]
    assert removed["vllm/third_party/deep_gemm/include"] == 10 and len(removed) == 5

    stream = tmp_path / "site.tar.xz"
    stream.write_bytes(os.urandom(2500))
    parts = gpu_carry.split_stream(stream, 1000, tmp_path / "carry")
    assert [p.relative_to(tmp_path).as_posix() for p in parts] == [
        "carry/1/site.tar.xz.001",
        "carry/2/site.tar.xz.002",
        "carry/3/site.tar.xz.003",
    ]
    assert b"".join(p.read_bytes() for p in sorted(parts, key=lambda p: p.name)) == stream.read_bytes()

    sha = hashlib.sha256(stream.read_bytes()).hexdigest()
    parts = [gpu_carry.ROOT / ".carry" / str(i) / f"site.tar.xz.{i:03d}" for i in (1, 2, 3)]
    calls = gpu_carry.device_calls(parts, sha, "python3 benchmarks/gpu_smoke.py")
    assert [c["carry"] for c in calls] == [[".carry/1"], [".carry/2"], [".carry/3"]]
    assert all(len(c["command"]) <= 2000 for c in calls)  # the device tool's limit on a command
    last = calls[-1]["command"]
    assert f"echo '{sha}  /tmp/site.tar.xz' | sha256sum -c" in last and "PYTHONPATH=/tmp/site" in last
    assert last.index("cat /tmp/carry/site.tar.xz.*") < last.index("tar -xJf") < last.index("gpu_smoke.py")
    # a run longer than one call (the study's seed pair) follows on the warm machine, with what the last call unpacked
    calls = gpu_carry.device_calls(parts, sha, "python3 benchmarks/gpu_smoke.py", then=gpu_carry.THEN)
    then = calls[-1]
    assert len(calls) == 4 and then["carry"] == [] and len(then["command"]) <= 2000
    assert "test -d /tmp/site" in then["command"] and "PYTHONPATH=/tmp/site" in then["command"]
    assert "--parts study" in then["command"] and "sha256sum" not in then["command"]
