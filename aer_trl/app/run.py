"""The training command line: `aer-train`, `python -m aer_trl.app.run` and `recipes/train.py` are this `main`.

    aer-train --config recipes/smollm2_135m_instruct/gsm8k/aer.yaml   # any recipe; flags override the YAML
    aer-train --config qwen3_4b_base/deepscaler/aer                    # a shipped recipe by name (from a wheel too)
    accelerate launch -m aer_trl.app.run --config my_recipe.yaml          # several processes / DeepSpeed

Every key of a recipe is a field of `AERScriptArguments`, of the config of the trainer its `trainer:` key names
(`AERGRPOConfig` with all of TRL's `GRPOConfig`, the default; `AERRLOOConfig` with TRL's `RLOOConfig` for
`trainer: rloo`) or of TRL's `ModelConfig`. The run itself is `aer_trl.app.training.train`.
"""

from __future__ import annotations

import sys

# absolute imports: `python -m aer_trl.run` (the old path) runs this file's code as __main__ of package aer_trl
from aer_trl.app.logs import configure_logging
from aer_trl.app.resources import resolve_recipe
from aer_trl.app.training import AERScriptArguments, parse_recipe, train
from aer_trl.vllm_support import release_colocated_engine


def main(argv=None, script_class=AERScriptArguments, config_class=None, trainer_class=None):
    """Parse `argv` (default: the process's arguments) and train. The classes as in `training.parse_recipe` and
    `training.train`, for a command line of an extension with keys of its own."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(argv):  # a shipped recipe by name where no such file exists (an installed wheel)
        if arg == "--config" and i + 1 < len(argv):
            argv[i + 1] = resolve_recipe(argv[i + 1])
        elif arg.startswith("--config="):
            argv[i] = "--config=" + resolve_recipe(arg.split("=", 1)[1])
    script_args, training_args, model_args = parse_recipe(argv, script_class, config_class)
    configure_logging(training_args)
    return train(script_args, training_args, model_args, trainer_class)


def finish(trainer) -> None:
    """Tear the process groups down before exit (several processes: left to interpreter shutdown, gloo's threads can
    abort a run that has already succeeded and saved, and a colocated vLLM engine's exit hook prints `ValueError:
    Invalid process group specified`)."""
    trainer.accelerator.wait_for_everyone()  # no rank tears the group down while another still uses it
    release_colocated_engine(trainer)
    trainer.accelerator.end_training()


def cli() -> None:
    """The console script: train, then `finish`."""
    finish(main())


if __name__ == "__main__":
    cli()
