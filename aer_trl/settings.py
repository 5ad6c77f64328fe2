"""Which settings shape the trained model, and how two sets of them differ: what a checkpoint records beside AER's
controller state (`AERArguments.run_settings`) and what a resume with other settings names (`aer_trl.resume`)."""

from __future__ import annotations

import json
import re

# Fields that do not shape the trained model: where and how often it logs, saves, evaluates and pushes; left out of
# `AERGRPOConfig.run_settings`, so a resume with another output_dir or logging_steps is not reported as a change.
_BOOKKEEPING = re.compile(
    r"(logging|log|save|hub|trackio|eval|do|include|dataloader|vllm_server|vllm_group)_.*|.*_full_eval|"
    r"output_dir|overwrite_output_dir|run_name|project|report_to|push_to_hub|resume_from_checkpoint|"
    r"restore_callback_states_from_checkpoint|disable_tqdm|skip_memory_metrics|local_rank|debug|label_names|"
    r"length_column_name|prediction_loss_only|metric_for_best_model|greater_is_better|load_best_model_at_end|"
    r"batch_eval_metrics|per_device_eval_batch_size|num_generations_eval|num_completions_to_print|"
    r"torch_empty_cache_steps|ddp_timeout|lab_cache_dir|vllm_logp_gap_limit"
)


def shaping_settings(values: dict) -> dict:
    """The entries of a dict of arguments that shape the trained model (all but `_BOOKKEEPING`), as JSON values."""
    return json.loads(json.dumps({k: v for k, v in values.items() if not _BOOKKEEPING.fullmatch(k)}, default=str))


def settings_changes(saved: dict, current: dict) -> dict[str, tuple]:
    """field -> (saved value, current value) for every field both sets know and that differs."""
    return {k: (saved[k], current[k]) for k in sorted(saved.keys() & current.keys()) if saved[k] != current[k]}


def describe_changes(changes: dict[str, tuple]) -> str:
    """`{"tau": (0.4, 0.5)}` → "tau 0.4 -> 0.5", for warnings that name changed settings."""
    return "; ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
