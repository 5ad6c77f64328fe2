"""Train with AER (or a baseline) from a YAML recipe: the command line `aer_trl.app.run` (installed as `aer-train`).

    accelerate launch recipes/train.py --list                           # the shipped recipes, one line each
    accelerate launch recipes/train.py --config recipes/smollm2_135m_instruct/gsm8k/aer.yaml   # a real LLM on CPU
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/train.py \\
        --config recipes/qwen3_4b_base/deepscaler/aer.yaml              # paper scale

A recipe names its data (`dataset_name`); the laptop lab's recipes (`recipes/lab/`) are the research bench's and run
with its classes: `accelerate launch -m aer_bench.run --config recipes/lab/aer.yaml`. Every key of a recipe is a field
of `AERScriptArguments`, of the config of the trainer its `trainer:` key names (`AERGRPOConfig` by default,
`AERRLOOConfig`, `AERAsyncGRPOConfig`) or of TRL's `ModelConfig`; command-line flags override the YAML. The recipes
ship inside the package (`aer_trl/recipes/`; the folders here link to them).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from aer_trl.app.run import cli, main  # noqa: E402, F401 (main: tests and notebooks call it)

if __name__ == "__main__":
    cli()
