"""The names the installed transformers wants, so that a run's log shows progress, not deprecation warnings.

transformers renamed `past_key_values` to `cache` (the old name warns, and goes for `forward` in 5.40) and
`gradient_checkpointing` to `activation_checkpointing` in `TrainingArguments` (the old name warns, and goes in v6).
aer_trl's own calls use whichever name the installed version has; TRL's own calls are TRL's.
"""

from __future__ import annotations

import dataclasses
import inspect

__all__ = ["cache_kwarg", "has_activation_checkpointing"]


def cache_kwarg(model) -> str:
    """The keyword under which `model`'s forward (and `generate`) takes a KV cache: `cache` where the installed
    transformers has it, else `past_key_values`. Looks through DDP/DeepSpeed (`.module`) and PEFT wrappers."""
    inner = model
    while hasattr(inner, "module") and inner.module is not inner:
        inner = inner.module
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    try:
        parameters = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def has_activation_checkpointing() -> bool:
    """Whether the installed `TrainingArguments` has `activation_checkpointing` (the new name)."""
    from transformers import TrainingArguments

    return any(f.name == "activation_checkpointing" for f in dataclasses.fields(TrainingArguments))
