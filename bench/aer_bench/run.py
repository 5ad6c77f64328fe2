"""The bench's training command line: `aer_trl.app.run` with the bench's classes (`aer_bench.training`), so the lab and
arithmetic recipes (`bench/aer_bench/recipes/`, linked from `recipes/`) parse and train.

    python -m aer_bench.run                                           # the laptop lab (CPU, a few minutes)
    accelerate launch -m aer_bench.run --config recipes/lab/grpo.yaml  # any recipe, any launcher
"""

from __future__ import annotations

import sys

from aer_trl.app import run

from .training import BenchScriptArguments, bench_classes


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # No recipe and nothing said about what to train: the laptop lab's recipe. A run that names its own model or
    # data gets no recipe it did not ask for.
    if not any(a.split("=", 1)[0] in ("--config", "--model_name_or_path", "--dataset_name") for a in argv):
        from aer_trl.app.resources import recipe_path

        default = recipe_path("lab", "aer", package="aer_bench")
        print(f"no --config, model or data given: running the laptop lab recipe {default}")
        argv = ["--config", str(default), *argv]
    from aer_trl.app.cli import resolve_config

    argv = resolve_config(argv, "train")  # a shipped recipe's name becomes its path: its `trainer:` picks the classes
    return run.main(argv, BenchScriptArguments, *bench_classes(argv))


def cli() -> None:
    run.finish(main())


if __name__ == "__main__":
    cli()
