"""Two processes on CPU (gloo): group accuracy over groups split across ranks, α in lockstep, DeepSpeed ZeRO-3."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aer_trl.core_algos import difficulty_coefficients, group_accuracy

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "distributed_run.py"
ACCELERATE = [
    sys.executable,
    "-m",
    "accelerate.commands.launch",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
    "--main_process_port",
    "0",
]

ZERO3_CONFIG = str(ROOT / "tests" / "data" / "zero3_cpu.json")
ZERO3 = ["--use_deepspeed", "--deepspeed_config_file", ZERO3_CONFIG, "--zero3_init_flag", "true"]
pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out: Path, *launcher_args: str, script_args=(), script: Path = SCRIPT):
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [
        *ACCELERATE,
        "--main_process_port",
        str(free_port()),
        *launcher_args,
        str(script),
        "--output_dir",
        str(out),
        *script_args,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "Error" in line or "error" in line]
    assert proc.returncode == 0, "\n".join(errors[-20:]) + "\n" + proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def check_group_accuracy_and_lockstep(ranks):
    r0, r1 = ranks
    assert r0["world_size"] == r1["world_size"] == 2
    g_size = r0["num_generations"]
    assert len(r0["rollouts"]) == len(r1["rollouts"]) >= 3
    for rank in ranks:
        for rollout in rank["rollouts"]:
            assert rollout["local_count"] < g_size, "each group must span both ranks for this test"
            # the single-process computation on the same (gathered) completions
            rewards = torch.tensor(rollout["rewards"])
            g = group_accuracy((rewards >= 0.5).float(), g_size)
            lam = difficulty_coefficients(g, rollout["alpha"], rank["rho"])
            n = rollout["local_count"]
            expected = lam[rank["rank"] * n : (rank["rank"] + 1) * n]
            torch.testing.assert_close(torch.tensor(rollout["local_lambda"]), expected)
    # both ranks saw the same gathered rewards and the same α at every rollout
    for a, b in zip(r0["rollouts"], r1["rollouts"]):
        assert a["rewards"] == b["rewards"] and a["alpha"] == b["alpha"]
    # α and H_t identical on both ranks after every iteration
    assert r0["history"] == r1["history"]
    assert [h["alpha"] for h in r0["history"]] == pytest.approx(
        [0.5 + 0.01 * i for i in range(1, len(r0["history"]) + 1)]
    )
    assert r0["initial_entropy"] == r1["initial_entropy"]


def eval_bench(tmp_path) -> str:
    """5 problems: the ranks get 3 and 2, so the one with fewer makes a padding call (ZeRO-3 needs them in step)."""
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps({"question": f"{i}?", "answer": str(i % 3)}) + "\n" for i in range(5)))
    return str(path)


def check_validation_agrees(ranks):
    r0, r1 = ranks
    assert r0["passk_history"] and r0["passk_history"] == r1["passk_history"]
    assert [h["step"] for h in r0["passk_history"]] == [1, 2, 3]
    assert r0["passk_best_step"] == r1["passk_best_step"] is not None


def test_two_processes_ddp(tmp_path):
    ranks = launch(
        tmp_path / "run", "--multi_gpu", script_args=["--max_steps", "3", "--eval_bench", eval_bench(tmp_path)]
    )
    assert not ranks[0]["deepspeed"]
    check_group_accuracy_and_lockstep(ranks)
    check_validation_agrees(ranks)


def test_two_processes_deepspeed_zero3_sharded(tmp_path):
    ranks = launch(
        tmp_path,
        *ZERO3,
        script_args=[
            *["--max_steps", "3", "--save_steps", "2", "--eval_bench", eval_bench(tmp_path)],
        ],
    )
    assert ranks[0]["deepspeed"] and ranks[0]["sharded"] and ranks[1]["sharded"]
    check_group_accuracy_and_lockstep(ranks)
    check_validation_agrees(ranks)  # sampling under ZeRO-3 with uneven shares does not hang
    ckpt = tmp_path / "checkpoint-2"
    assert (ckpt / "trainer_state.json").exists() and any(ckpt.glob("global_step*"))
    state = json.loads((ckpt / "trainer_state.json").read_text())["stateful_callbacks"]["AERCallback"]
    assert state["attributes"]["controller_state"]["iteration"] == 2
    assert state["attributes"]["controller_state"]["alpha"] == pytest.approx(0.52)


def trained_figures(logs: list[dict]) -> list[dict]:
    """The figures of training logs that training determines (not wall-clock times)."""
    return [{k: v for k, v in h.items() if not any(t in k for t in ("time", "runtime", "per_second"))} for h in logs]


def test_two_processes_rloo_deepspeed_zero3_sharded(tmp_path):
    """AERRLOOTrainer as AERGRPOTrainer above: groups split across ranks, α in lockstep on both, parameters sharded
    under ZeRO-3, validation in step, a checkpoint with the controller's state."""
    ranks = launch(
        tmp_path,
        *ZERO3,
        script_args=[
            "--trainer",
            "rloo",
            "--max_steps",
            "3",
            "--save_steps",
            "2",
            "--eval_bench",
            eval_bench(tmp_path),
        ],
    )
    assert ranks[0]["deepspeed"] and ranks[0]["sharded"] and ranks[1]["sharded"]
    check_group_accuracy_and_lockstep(ranks)
    check_validation_agrees(ranks)
    state = json.loads((tmp_path / "checkpoint-2" / "trainer_state.json").read_text())["stateful_callbacks"]
    assert state["AERCallback"]["attributes"]["controller_state"]["alpha"] == pytest.approx(0.52)
    assert ranks[0]["parameters"] == ranks[1]["parameters"]  # the same model, gathered whole, on both ranks


def test_two_processes_async_grpo_lockstep_resumes_exactly(tmp_path):
    """AER on TRL's asynchronous GRPO in 2 processes (the local worker on rank 0, on the lockstep schedule with lag 2,
    8 samples a step): α agrees across ranks, and a run resumed from the uninterrupted run's checkpoint at step 2
    trains steps 3 and 4 as it did (the same losses, entropies, lags and parameters on every rank)."""
    from tests import helpers

    model = helpers.save_model(helpers.make_tokenizer(), tmp_path / "model")
    script, args = ROOT / "tests" / "scripts" / "async_run.py", ["--model", model]
    whole = launch(tmp_path / "whole", "--multi_gpu", script=script, script_args=args)
    assert whole[0]["alpha"] == whole[1]["alpha"] and len(set(whole[0]["alpha"])) == 4
    assert whole[0]["lags"]["4"] == ["aer/lag/2/samples"]
    checkpoint = tmp_path / "whole" / "checkpoint-2"
    assert (checkpoint / "rollout_inflight.json").is_file()
    resumed = launch(tmp_path / "resumed", "--multi_gpu", script=script,
                     script_args=[*args, "--resume_from_checkpoint", str(checkpoint)])  # fmt: skip
    for rank in range(2):
        assert resumed[rank]["alpha"] == whole[rank]["alpha"]
        for key in ("loss", "entropy", "lags"):
            assert {s: resumed[rank][key][s] for s in ("3", "4")} == {s: whole[rank][key][s] for s in ("3", "4")}
        assert resumed[rank]["checksum"] == whole[rank]["checksum"]
