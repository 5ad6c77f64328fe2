"""Two machines on this one: two launchers (the `accelerate launch` line recipes/slurm/train.sbatch runs on each node,
taken from its dry run) as machine ranks 0 and 1 on 127.0.0.1, one CPU process each, DeepSpeed ZeRO-3 over gloo. One
"machine" is killed in mid-run; the other must stop with an error, not hang; both then resume from the last
checkpoint, AER's controller state with it."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_distributed import ROOT, SCRIPT, check_group_accuracy_and_lockstep, free_port, trained_figures

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
# DeepSpeed ZeRO-3 on CPU, every parameter sharded (tests/data/zero3_cpu.json), one launcher per node (standard),
# as accelerate's flags: a config file beside a DeepSpeed config file is refused by accelerate ("the following
# accelerate config variables will be ignored")
CPU_ARGS = ["--use_deepspeed", "--deepspeed_config_file", str(ROOT / "tests" / "data" / "zero3_cpu.json")]
CPU_ARGS += ["--zero3_init_flag", "true", "--deepspeed_multinode_launcher", "standard"]
CPU_ARGS += ["--mixed_precision", "no", "--dynamo_backend", "no"]
SLURM_SHIMS = {  # what a SLURM job provides, for a dry run: srun runs its command once per node
    "scontrol": '#!/usr/bin/env bash\n[ "$1 $2" = "show hostnames" ] && printf "%s\\n" $FAKE_HOSTS\n',
    "srun": """#!/usr/bin/env bash
n=1; while [ "$1" != "${1#--}" ]; do [ "$1" = --nodes ] && n=$2; shift 2; done
for i in $(seq 0 $((n - 1))); do SLURM_NODEID=$i "$@"; done
""",
}


def slurm_dry_run(folder: Path, hosts: list[str], *args: str, **settings: str) -> subprocess.CompletedProcess:
    """recipes/slurm/train.sbatch (`AER_LAUNCH_PRINT`: each node's command printed, not run) under a stand-in SLURM
    job on `hosts`; `settings`: the script's environment (LAYOUT, GPUS_PER_NODE, ACCELERATE_CONFIG, ...)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in SLURM_SHIMS.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    path = f"{folder}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = dict(os.environ, PATH=path, FAKE_HOSTS=" ".join(hosts), SLURM_JOB_NODELIST="job", AER_LAUNCH_PRINT="1")
    env.update(settings)
    done = subprocess.run(
        ["bash", "recipes/slurm/train.sbatch", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done


def start_machines(out: Path, port: int, *script_args: str) -> list[subprocess.Popen]:
    """Each "machine" runs the SLURM script's line for its rank, its training script replaced by the test's."""
    out.mkdir(parents=True, exist_ok=True)
    done = slurm_dry_run(
        out.parent / "slurm",
        ["127.0.0.1", "127.0.0.1"],
        "recipe.yaml",
        GPUS_PER_NODE="1",
        MAIN_PROCESS_PORT=str(port),
        ACCELERATE_CONFIG="",
        ACCELERATE_ARGS=" ".join(CPU_ARGS),
    )
    lines = [shlex.split(line) for line in done.stdout.splitlines() if line.startswith("accelerate launch")]
    assert [line[line.index("--machine_rank") + 1] for line in lines] == ["0", "1"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    machines = []
    for rank, line in enumerate(lines):
        launcher = line[2 : line.index("recipes/train.py")]  # `accelerate launch`'s flags, as the script gives them
        command = [sys.executable, "-m", "accelerate.commands.launch", *launcher]
        command += [str(SCRIPT), "--output_dir", str(out), *script_args]
        log = open(out.parent / f"{out.name}.machine{rank}.log", "w")  # noqa: SIM115 (closed with the process)
        machines.append(
            subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )
    return machines


def wait(machine: subprocess.Popen, seconds: float) -> int | None:
    try:
        return machine.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def kill(machine: subprocess.Popen) -> None:
    """The machine is lost: its launcher and every process under it (torch's elastic agent starts the training
    process in a session of its own, so the launcher's process group alone leaves it running)."""
    import psutil

    try:
        processes = [psutil.Process(machine.pid), *psutil.Process(machine.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        processes = []
    for process in processes:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    machine.wait()


def finished(machines: list[subprocess.Popen], out: Path, log: Path) -> list[dict]:
    try:
        codes = [wait(m, 600) for m in machines]
    finally:
        for m in machines:
            kill(m)
    assert codes == [0, 0], log.read_text()[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_two_machines_lose_one_and_resume_to_the_uninterrupted_runs_parameters(tmp_path):
    """Qwen3-30B-A3B's architecture (a tiny Qwen3-MoE, router loss on) on two machines under ZeRO-3, every parameter
    sharded, AER's bonus on: an uninterrupted run; a run whose machine 1 is lost after the step-2 checkpoint (machine 0
    must stop with an error, not hang); and that run resumed on both machines from checkpoint-2, which must end with
    the uninterrupted run's parameters, α trajectory and logs."""
    common = ["--moe", "true", "--max_steps", "4", "--save_steps", "2"]
    whole = finished(
        start_machines(tmp_path / "whole", free_port(), *common), tmp_path / "whole", tmp_path / "whole.machine0.log"
    )
    assert whole[0]["sharded"] and whole[1]["sharded"]
    assert any(".experts." in name for name in whole[0]["parameters"])
    check_group_accuracy_and_lockstep(whole)
    logs = trained_figures(whole[0]["train_logs"])
    assert len(logs) == 4 and all(h["aux_loss"] > 0 for h in logs) and logs == trained_figures(whole[1]["train_logs"])

    out = tmp_path / "run"
    machines = start_machines(out, free_port(), *common, "--step_delay", "3")
    try:
        deadline = time.monotonic() + 600
        while not (out / "checkpoint-2" / "trainer_state.json").exists():
            assert all(m.poll() is None for m in machines), (tmp_path / "run.machine0.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint-2 within 10 minutes"
            time.sleep(0.5)
        time.sleep(1.0)  # checkpoint-2 is whole (both ranks' shards) before the next step ends
        kill(machines[1])  # machine 1 is lost in mid-run
        code = wait(machines[0], 180)
        log = (tmp_path / "run.machine0.log").read_text()
        assert code is not None, "machine 0 hung after machine 1 was lost"
        assert code != 0 and not (out / "rank0.json").exists()  # it stopped, and did not claim to have finished
        assert "Connection closed by peer" in log or "Error" in log
    finally:
        for m in machines:
            kill(m)
    assert not (out / "checkpoint-4").exists()

    resumed_dir = tmp_path / "resumed"
    machines = start_machines(resumed_dir, free_port(), *common, "--resume_from", str(out / "checkpoint-2"))
    resumed = finished(machines, resumed_dir, tmp_path / "resumed.machine0.log")
    for rank in (0, 1):
        assert len(resumed[rank]["rollouts"]) == 2  # steps 3-4: it resumed at step 2
        # the controller came back with the checkpoint: α goes on from 0.52, not from α₀ (0.5) again
        assert resumed[rank]["history"] == whole[rank]["history"]
        assert resumed[rank]["parameters"] == whole[rank]["parameters"]  # bit for bit, after a crash
        assert trained_figures(resumed[rank]["train_logs"])[-2:] == logs[2:]


@pytest.mark.parametrize("layout", ["colocate", "server"])
def test_the_slurm_script_runs_one_accelerate_launch_on_every_node(tmp_path, layout):
    """recipes/slurm/train.sbatch under a stand-in SLURM (3 nodes): each training node gets the plain `accelerate
    launch` line with its own rank, the totals and the first node as the main one; in the server layout the last node
    serves vLLM."""
    recipe = "recipes/qwen3_30b_a3b_base/deepscaler/aer.yaml"
    done = slurm_dry_run(tmp_path, ["node0", "node1", "node2"], recipe, "--seed", "1", LAYOUT=layout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("accelerate launch")]
    nodes = 3 if layout == "colocate" else 2
    assert len(lines) == nodes
    for rank, line in enumerate(lines):
        assert line.startswith("accelerate launch --config_file recipes/accelerate_configs/zero3.yaml ")
        assert f"--machine_rank {rank} " in line and "--main_process_ip node0 " in line
        assert f"--num_machines {nodes} --num_processes {8 * nodes}" in line
        assert f"recipes/train.py --config {recipe}" in line and line.endswith("--seed 1")
    if layout == "server":
        assert "--vllm_mode server --vllm_server_host node2" in lines[0]
        assert (
            "trl vllm-serve --model Qwen/Qwen3-30B-A3B-Base" in done.stdout
            and "--enable-expert-parallel" in done.stdout
        )


def test_the_shipped_zero3_config_starts_one_launcher_per_node():
    """The sbatch line passes no DeepSpeed launcher flag: the shipped config must say `standard` (pdsh otherwise)."""
    import yaml

    config = yaml.safe_load((ROOT / "recipes" / "accelerate_configs" / "zero3.yaml").read_text())
    assert config["deepspeed_config"]["deepspeed_multinode_launcher"] == "standard"
