"""One node's `accelerate launch` command for a run over several nodes, and a launcher for it: the same command on
localhost (tests/test_multinode.py, two "machines" on 127.0.0.1) and under SLURM (recipes/slurm/train.sbatch).

    python -m aer_trl.app.launch --num_machines 2 --gpus_per_machine 8 --machine_rank $NODE_RANK \\
        --main_process_ip $MASTER_ADDR -- recipes/train.py --config recipes/qwen3_30b_a3b_base/deepscaler/aer.yaml
    python -m aer_trl.app.launch ... --print   # the command only

Under SLURM the rank and the main node's address come from the job (`SLURM_NODEID`, the first host of
`SLURM_JOB_NODELIST`) where not given. DeepSpeed's multi-node launcher is `standard` (one `accelerate launch` per
node, as SLURM starts them; accelerate's default calls pdsh, which a SLURM job does not need).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["main", "node_command"]


def node_command(
    script: list[str],
    *,
    num_machines: int,
    gpus_per_machine: int,
    machine_rank: int,
    main_process_ip: str,
    main_process_port: int = 29500,
    config_file: str | None = None,
    launcher_args: list[str] = (),
    cpu: bool = False,
    python: str = sys.executable,
) -> list[str]:
    """The `accelerate launch` command of node `machine_rank` of `num_machines`, `gpus_per_machine` processes each
    (on CPU: `cpu`, processes over gloo). `script`: the training script and its arguments. A config file sets the rest
    (`recipes/accelerate_configs/zero3.yaml`: DeepSpeed ZeRO-3), or `launcher_args` do (e.g. `--use_deepspeed
    --deepspeed_config_file ...`); the values given here override its machine fields."""
    for name, value, low in (("num_machines", num_machines, 1), ("gpus_per_machine", gpus_per_machine, 1)):
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if not 0 <= machine_rank < num_machines:
        raise ValueError(f"machine_rank must be in [0, num_machines={num_machines}), got {machine_rank}")
    if not script:
        raise ValueError("no training script given (after --: recipes/train.py --config ...)")
    command = [python, "-m", "accelerate.commands.launch"]
    if config_file is not None:
        if not Path(config_file).is_file():
            raise FileNotFoundError(f"config_file: no accelerate config {config_file!r}")
        command += ["--config_file", config_file]
    command += [
        *["--num_machines", str(num_machines), "--num_processes", str(num_machines * gpus_per_machine)],
        *["--machine_rank", str(machine_rank), "--main_process_ip", main_process_ip],
        *["--main_process_port", str(main_process_port), "--same_network"],
    ]
    deepspeed = "--use_deepspeed" in launcher_args or (
        config_file is not None and "deepspeed" in Path(config_file).read_text().lower()
    )
    if deepspeed:
        command += ["--deepspeed_multinode_launcher", "standard"]  # not pdsh: one launcher per node
    if cpu:
        command += ["--mixed_precision", "no", "--dynamo_backend", "no"]
        if config_file is None and not deepspeed:
            command += ["--multi_gpu"]  # several CPU processes over gloo (`--cpu` starts one)
    return command + list(launcher_args) + list(script)


def slurm_main_host() -> str | None:
    """The first host of the SLURM job's node list (the main node), via `scontrol show hostnames`."""
    nodes = os.environ.get("SLURM_JOB_NODELIST")
    if not nodes:
        return None
    out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_machines", type=int, default=int(os.environ.get("SLURM_JOB_NUM_NODES", "1")))
    parser.add_argument("--gpus_per_machine", type=int, default=8)
    parser.add_argument("--machine_rank", type=int, default=int(os.environ.get("SLURM_NODEID", "0")))
    parser.add_argument("--main_process_ip", default=None, help="unset: the SLURM job's first host")
    parser.add_argument("--main_process_port", type=int, default=29500)
    parser.add_argument("--config_file", default="recipes/accelerate_configs/zero3.yaml")
    parser.add_argument("--cpu", action="store_true", help="processes on the CPU over gloo (the localhost test)")
    parser.add_argument("--print", action="store_true", help="print the command instead of running it")
    args = parser.parse_args(own)
    ip = args.main_process_ip or slurm_main_host()
    if ip is None:
        parser.error("--main_process_ip: not given and no SLURM job to read it from")
    command = node_command(
        script,
        num_machines=args.num_machines,
        gpus_per_machine=args.gpus_per_machine,
        machine_rank=args.machine_rank,
        main_process_ip=ip,
        main_process_port=args.main_process_port,
        config_file=args.config_file or None,
        cpu=args.cpu,
    )
    if args.print:
        print(" ".join(command))
        return 0
    os.execv(command[0], command)  # this process becomes the node's launcher: a signal to it reaches accelerate


if __name__ == "__main__":
    sys.exit(main())
