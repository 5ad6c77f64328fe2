"""A run's output folder and checkpoints, as `aer_trl.app.training` uses them: which checkpoint a
`resume_from_checkpoint` value means (complete ones only), one run at a time in a folder, no fresh start over an
earlier run's checkpoints, and a LoRA checkpoint resumed only as the adapter it was trained as."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..settings import describe_changes
from .files import lock_folder

logger = logging.getLogger(__name__)


def _step(path: Path) -> int:
    try:
        return int(path.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def is_complete_checkpoint(folder: Path) -> bool:
    """A save writes trainer_state.json last; a save killed while writing it (or a full disk) leaves it torn."""
    try:
        return isinstance(json.loads((folder / "trainer_state.json").read_text()), dict)
    except (OSError, ValueError):
        return False


def resolve_resume(value, output_dir: str) -> str | None:
    """`resume_from_checkpoint` as Trainer.train wants it: `true`/`latest` → the newest *complete* checkpoint of
    `output_dir` (one whose trainer_state.json, written last by a save, reads whole; incomplete ones are skipped with a
    warning), an error when there is none; `auto` → the same, or None (a fresh start) when there is none: one command
    for a job that may be a first start or a restart (a requeued job, a sweep run again); a folder → that folder,
    `false`/unset → None; anything else is an error naming the value."""
    if value is None or value is False:
        return None
    text = str(value).strip()
    if text.lower() in ("", "false", "no", "none"):
        return None
    if value is True or text.lower() in ("true", "latest", "yes", "auto"):
        folders = sorted((p for p in Path(output_dir).glob("checkpoint-*") if p.is_dir()), key=_step)
        complete = [p for p in folders if is_complete_checkpoint(p)]
        for p in folders:
            if p not in complete and (not complete or _step(p) > _step(complete[-1])):
                logger.warning(
                    "resume_from_checkpoint: skipping %s, an incomplete checkpoint (trainer_state.json missing or "
                    "torn: the save was interrupted, or the disk filled up)",
                    p,
                )
        if not complete:
            if text.lower() == "auto":
                return None
            raise FileNotFoundError(
                f"resume_from_checkpoint={value!r}: no complete checkpoint in {output_dir} (`auto` starts afresh then)"
            )
        return str(complete[-1])
    path = Path(text)
    if path.is_dir():
        if not is_complete_checkpoint(path):
            raise FileNotFoundError(
                f"resume_from_checkpoint: {path} is not a complete checkpoint (its trainer_state.json is missing or "
                "does not read as JSON: the save was interrupted)"
            )
        return str(path)
    raise ValueError(
        f"resume_from_checkpoint: {value!r} is neither true/latest/auto/false nor an existing checkpoint folder"
    )


RUN_LOCK = "_aer_trl.lock"  # in output_dir; "_*" files are never pushed to the Hub (transformers' ignore patterns)


def lock_output_dir(training_args) -> int | None:
    """One run at a time in an `output_dir`: the main process holds a lock on `<output_dir>/_aer_trl.lock` while it
    trains, and a second run into the same folder (launched twice, a job requeued while the first still runs) is
    refused before it writes anything: two runs there overwrite each other's checkpoints and interleave their
    metrics.jsonl, silently. A killed run leaves no stale lock (the kernel releases it). On a file system without
    locks the run goes on, with a warning."""
    if training_args.process_index != 0:
        return None
    return lock_folder(
        training_args.output_dir,
        RUN_LOCK,
        "run is training into it",
        "Wait for it or stop it (then resume with resume_from_checkpoint: latest), or choose another output_dir.",
    )


def check_fresh_start(output_dir: str) -> None:
    """A run that starts from step 0 in a folder that holds an earlier run's complete checkpoints is refused: its own
    checkpoints would overwrite some of them and sit beside the rest, and a later `resume_from_checkpoint: latest`
    (the highest step) would continue the earlier run. Measured on the lab recipe: a 4-step run, then a fresh 2-step
    run into its folder, then that run resumed to 3 steps: it resumed from the first run's checkpoint-4 and trained
    nothing, silently where the two runs' settings agree. transformers 5 has no `overwrite_output_dir`; this is the
    refusal its example scripts made."""
    found = sorted((p for p in Path(output_dir).glob("checkpoint-*") if is_complete_checkpoint(p)), key=_step)
    if found:
        names = ", ".join(p.name for p in found[:3]) + (f" ... ({len(found)} in all)" if len(found) > 3 else "")
        raise FileExistsError(
            f"output_dir {output_dir} holds an earlier run's checkpoints ({names}) and this run starts from step 0: "
            "resume it (resume_from_checkpoint: latest, or auto in a job that may be a first start), or choose "
            "another output_dir, or delete them"
        )


# what a LoRA adapter's weights compute with (saved adapter_config.json key -> ModelConfig field)
ADAPTER_FIELDS = {"r": "lora_r", "lora_alpha": "lora_alpha", "use_rslora": "use_rslora", "use_dora": "use_dora"}


def check_resume_adapter(checkpoint: str, model_args) -> None:
    """A checkpoint resumes as what it was trained as. A LoRA checkpoint resumed without `use_peft`, or a full one
    with it, failed deep in transformers (a missing weights index, a mismatched optimizer group); a LoRA one resumed
    with another `lora_alpha` or `use_rslora` loaded its weights under another scaling and trained on, silently
    (measured: lora_alpha 32 -> 64 made the adapter's scaling 4.0 where it was trained at 2.0). Each is refused here,
    naming what differs; `lora_dropout` and the other training settings may change (named by the resume warning)."""
    from trl import get_peft_config

    saved_path = Path(checkpoint) / "adapter_config.json"
    use_peft = bool(getattr(model_args, "use_peft", False))
    if saved_path.is_file() and not use_peft:
        raise ValueError(
            f"resume_from_checkpoint: {checkpoint} holds a LoRA adapter (adapter_config.json) and this run trains the "
            "full model: resume with use_peft: true and the checkpoint's LoRA settings, or start a new run"
        )
    if use_peft and not saved_path.is_file():
        raise ValueError(
            f"resume_from_checkpoint: {checkpoint} holds a full model and this run trains a LoRA adapter (use_peft: "
            "true): resume without use_peft, or start a new run from the checkpoint's weights"
        )
    if not use_peft:
        return
    saved, current = json.loads(saved_path.read_text()), get_peft_config(model_args).to_dict()
    changed = {
        field: (saved.get(k), current.get(k)) for k, field in ADAPTER_FIELDS.items() if saved.get(k) != current.get(k)
    }
    if changed:
        raise ValueError(
            f"resume_from_checkpoint: {checkpoint}'s LoRA adapter was trained with other settings "
            f"({describe_changes(changed)}): its weights would compute another function than the one trained. Resume "
            "with the checkpoint's settings, or start a new run"
        )
