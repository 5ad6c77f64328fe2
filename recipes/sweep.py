"""The paper's ρ and τ sweeps (Figure 4a–b, Tables of the appendix) as one command per value.

    python recipes/sweep.py --param aer_rho                        # print the 6 commands of the ρ sweep (lab)
    python recipes/sweep.py --param aer_tau --run                  # run the 8 τ values one after the other
    python recipes/sweep.py --param aer_rho --config recipes/qwen3_8b_base/deepscaler/aer.yaml \\
        --launcher "accelerate launch --config_file recipes/accelerate_configs/zero3.yaml"

Each run writes to <recipe output_dir>-<param><value>; everything else is the recipe's, so the rows differ in one key.
Each resumes its folder's newest checkpoint if it has one (`--resume_from_checkpoint auto`): a sweep stopped half-way
and run again continues where it stopped, and a finished value trains nothing.
"""

import argparse
import shlex
import subprocess
import sys

import yaml

PAPER_VALUES = {
    "aer_rho": [0.0, 0.2, 0.4, 0.6, 0.8, 1.0],  # with tau = 0.4
    "aer_tau": [0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.2],  # with rho = 0.2
}


def commands(config: str, param: str, values: list[float], launcher: str, extra: list[str]) -> list[list[str]]:
    with open(config) as f:
        output_dir = yaml.safe_load(f).get("output_dir", "runs/sweep")
    return [
        [
            *shlex.split(launcher),
            "recipes/train.py",
            "--config",
            config,
            f"--{param}",
            str(v),
            "--output_dir",
            f"{output_dir}-{param}{v}",
            "--resume_from_checkpoint",
            "auto",
            *extra,
        ]
        for v in values
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--param", required=True, choices=sorted(PAPER_VALUES))
    parser.add_argument("--values", nargs="+", type=float, default=None, help="default: the paper's values")
    parser.add_argument("--config", default="recipes/lab/aer.yaml")
    parser.add_argument("--launcher", default="accelerate launch")
    parser.add_argument("--run", action="store_true", help="run the commands one after the other")
    args, extra = parser.parse_known_args(argv)
    for cmd in commands(args.config, args.param, args.values or PAPER_VALUES[args.param], args.launcher, extra):
        print(shlex.join(cmd), flush=True)
        if args.run:
            subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
