"""Train with AER (or a baseline) from a YAML recipe.

    accelerate launch recipes/train.py                                  # the laptop lab (CPU, a few minutes)
    accelerate launch recipes/train.py --config recipes/smollm2_135m_instruct/gsm8k/aer.yaml   # a real LLM on CPU
    accelerate launch recipes/train.py --config recipes/lab/grpo.yaml   # any recipe
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/train.py \\
        --config recipes/qwen3_4b_base/deepscaler/aer.yaml              # paper scale

Every key of a recipe is a field of `AERScriptArguments`, `AERConfig` (all of TRL's `GRPOConfig` included) or TRL's
`ModelConfig`; command-line flags override the YAML.
"""

import os
import sys

from trl import ModelConfig, TrlParser

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from aer_trl import AERConfig  # noqa: E402
from aer_trl.run import AERScriptArguments, train  # noqa: E402

DEFAULT_RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lab", "aer.yaml")


def _given(argv, flag):
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # No recipe and nothing said about what to train: the laptop lab's recipe. A run that names its own model or
    # data gets no recipe it did not ask for.
    if (
        not _given(argv, "--config")
        and not _given(argv, "--model_name_or_path")
        and not _given(argv, "--dataset_name")
    ):
        print(f"recipes/train.py: no --config, model or data given: running the laptop lab recipe {DEFAULT_RECIPE}")
        argv = ["--config", DEFAULT_RECIPE, *argv]
    parser = TrlParser((AERScriptArguments, AERConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    return train(script_args, training_args, model_args)


if __name__ == "__main__":
    trainer = main()
    # tear the process group down before exit (several processes): left to interpreter shutdown, gloo's threads can
    # abort a run that has already succeeded and saved
    trainer.accelerator.end_training()
