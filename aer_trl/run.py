"""The training command line: `aer-train`, `python -m aer_trl.run` and `recipes/train.py` are this `main`.

    aer-train --config recipes/lab/grpo.yaml                      # any recipe; flags override the YAML
    accelerate launch -m aer_trl.run --config my_recipe.yaml      # several processes / DeepSpeed
    aer-train                                                      # no recipe, model or data: the laptop lab

Every key of a recipe is a field of `AERScriptArguments`, `AERGRPOConfig` (all of TRL's `GRPOConfig` included) or TRL's
`ModelConfig`. The run itself is `aer_trl.training.train`.
"""

from __future__ import annotations

import sys

from .logs import configure_logging
from .resources import recipe_path, resolve_recipe
from .training import parse_recipe, train
from .vllm_support import release_colocated_engine


def _given(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # No recipe and nothing said about what to train: the laptop lab's recipe. A run that names its own model or
    # data gets no recipe it did not ask for.
    if not any(_given(argv, flag) for flag in ("--config", "--model_name_or_path", "--dataset_name")):
        default = recipe_path("lab", "aer")
        print(f"no --config, model or data given: running the laptop lab recipe {default}")
        argv = ["--config", str(default), *argv]
    for i, arg in enumerate(argv):  # a shipped recipe by name where no such file exists (an installed wheel)
        if arg == "--config" and i + 1 < len(argv):
            argv[i + 1] = resolve_recipe(argv[i + 1])
        elif arg.startswith("--config="):
            argv[i] = "--config=" + resolve_recipe(arg.split("=", 1)[1])
    script_args, training_args, model_args = parse_recipe(argv)
    configure_logging(training_args)
    return train(script_args, training_args, model_args)


def cli() -> None:
    """The console script: train, then tear the process groups down before exit (several processes: left to
    interpreter shutdown, gloo's threads can abort a run that has already succeeded and saved, and a colocated vLLM
    engine's exit hook prints `ValueError: Invalid process group specified`)."""
    trainer = main()
    trainer.accelerator.wait_for_everyone()  # no rank tears the group down while another still uses it
    release_colocated_engine(trainer)
    trainer.accelerator.end_training()


if __name__ == "__main__":
    cli()
