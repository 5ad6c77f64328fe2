"""The training command line: `aer-train`, `python -m aer_trl.app.run` and `recipes/train.py` are this `main`.

    aer-train --list                                                   # the shipped recipes, one line each
    aer-train --config smollm2_135m_instruct/gsm8k/aer                 # a shipped recipe by name (from a wheel too)
    aer-train --config my_recipe.yaml --max_steps 10                   # any recipe; flags override the YAML
    accelerate launch -m aer_trl.app.run --config my_recipe.yaml       # several processes / DeepSpeed

Every key of a recipe is a field of `AERScriptArguments`, of the config of the trainer its `trainer:` key names
(`AERGRPOConfig` with all of TRL's `GRPOConfig`, the default; `AERRLOOConfig` with TRL's `RLOOConfig` for
`trainer: rloo`) or of TRL's `ModelConfig`. The run itself is `aer_trl.app.training.train`. A user's mistake is
printed as one paragraph without a traceback (`aer_trl.app.cli`).
"""

from __future__ import annotations

import sys

# absolute imports: `python -m aer_trl.run` (the old path) runs this file's code as __main__ of package aer_trl;
# nothing that imports TRL at the top: `aer-train --list` answers at once
from aer_trl.app.cli import front_door, run_friendly


def main(argv=None, script_class=None, config_class=None, trainer_class=None):
    """Parse `argv` (default: the process's arguments) and train; `--list` prints the shipped recipes instead (and
    returns None). The classes as in `training.parse_recipe` and `training.train`, for a command line of an
    extension with keys of its own."""
    argv = front_door("aer-train", list(sys.argv[1:] if argv is None else argv), "train")
    if argv is None:  # --list
        return None

    from aer_trl.app.logs import configure_logging
    from aer_trl.app.training import AERScriptArguments, parse_recipe, train

    script_args, training_args, model_args = parse_recipe(argv, script_class or AERScriptArguments, config_class)
    configure_logging(training_args)
    return train(script_args, training_args, model_args, trainer_class)


def finish(trainer) -> None:
    """Tear the process groups down before exit (several processes: left to interpreter shutdown, gloo's threads can
    abort a run that has already succeeded and saved, and a colocated vLLM engine's exit hook prints `ValueError:
    Invalid process group specified`)."""
    if trainer is None:  # --list
        return
    from aer_trl.upstream.vllm_engine import release_colocated_engine

    trainer.accelerator.wait_for_everyone()  # no rank tears the group down while another still uses it
    release_colocated_engine(trainer)
    trainer.accelerator.end_training()


def cli() -> None:
    """The console script: train, then `finish`; a user's mistake is one paragraph, exit status 2."""
    finish(run_friendly("aer-train", main))


if __name__ == "__main__":
    cli()
