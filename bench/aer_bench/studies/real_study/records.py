"""A cell's compact record (what the tables are made from, on any machine): written, read and checked against the
study's settings, and shared between studies that name the same cell."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from aer_trl.atomic import atomic_write
from aer_trl.metrics import read_metrics

from .spec import RECORD_FILES, Arm, Study, record_dir, settings_hash, sizes_text


def no_answer_share(passk: dict) -> float:
    """The share of held-out completions with no parseable final answer: no marker (`unmarked`), or a marker whose
    content does not parse (`unparsed`), out of every sample scored."""
    stats = passk.get("reward_stats") or {}
    total = passk["num_problems"] * passk["num_samples"]
    return (stats.get("unmarked", 0) + stats.get("unparsed", 0)) / total


def export_record(study: Study, arm: Arm, seed: int, folder: Path, passk: dict) -> Path:
    """The cell's compact record: what the tables are made from, on any machine (no weights, no checkpoints)."""
    out = record_dir(study, arm, seed)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.jsonl", "recipe.yaml"):
        shutil.copyfile(folder / name, out / name)
    atomic_write(out / "passk.json", json.dumps(passk, sort_keys=True))
    atomic_write(out / "run.json", (folder / "run.json").read_text())  # last: a record without it is unfinished
    return out


def evaluation_mismatch(study: Study, passk: dict) -> str | None:
    """How a held-out evaluation (a record's `passk.json`, or the untrained model's) differs from the one the study
    asks for (`eval_per_tier` problems per tier, `eval_samples` samples each, and a sampling at `eval_long_tokens`
    under `longer` when the study asks for one); None when it does not. The study's tables must not mix pass@k over
    different problem sets, sample counts or budgets."""
    groups = passk.get("per_group") or {}
    per_tier = [groups[t].get("num_problems") for t in sorted(groups)]
    per_tier = [] if None in per_tier else per_tier  # a record that does not say: not a mismatch
    wanted = study.tier_sizes()
    size_ok = not per_tier or per_tier == wanted or (len(set(wanted)) == 1 and set(per_tier) == set(wanted))
    if passk.get("num_samples") != study.eval_samples or not size_ok:
        return (
            f"evaluated on {sizes_text(per_tier)} problems per tier x {passk.get('num_samples')} samples, while the "
            f"study asks for {sizes_text(wanted)} x {study.eval_samples}"
        )
    if study.eval_long_tokens:
        longer = passk.get("longer") or {}
        budget = (longer.get("fingerprint") or {}).get("max_new_tokens")
        if budget != study.eval_long_tokens:
            return f"not sampled at the study's longer budget of {study.eval_long_tokens} tokens (found: {budget})"
    return None


def read_record(study: Study, arm: Arm, seed: int, check_evaluation: bool = True) -> dict | None:
    """A cell's record, or None when there is none. A record made with other settings is an error: a changed study
    must name a new arm (or the old record be deleted), never mix two settings under one name. So is (unless
    `check_evaluation` is off) a record evaluated at another size than the study's `eval_per_tier` / `eval_samples`:
    the queue evaluates such a cell again."""
    out = record_dir(study, arm, seed)
    if not (out / "run.json").is_file():
        return None
    run = json.loads((out / "run.json").read_text())
    expected = settings_hash(study.merged(arm))
    if run.get("settings_hash") != expected:
        raise ValueError(
            f"{out}: the record was made with other settings (hash {run.get('settings_hash')}, the study now gives "
            f"{expected}; compare {out / 'recipe.yaml'}): name a new arm for new settings, or delete the record"
        )
    missing = [n for n in RECORD_FILES if not (out / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{out}: the record lacks {missing}")
    passk = json.loads((out / "passk.json").read_text())
    mismatch = evaluation_mismatch(study, passk)
    if check_evaluation and mismatch:
        raise ValueError(
            f"{out}: the record was {mismatch}; the tables would mix the two. Run the study's queue to evaluate the "
            "cell again at the study's size, or restore the study's eval_per_tier / eval_samples"
        )
    return {"run": run, "metrics": read_metrics(out / "metrics.jsonl"), "passk": passk}


def share_record(studies: list[Study], study: Study, arm: Arm, seed: int) -> Path | None:
    """Copy another study's record of the same cell (the same merged settings and seed) to this arm: one trained
    cell, recorded in every study that names it. Its `run.json` says where it came from."""
    wanted = settings_hash(study.merged(arm))
    for other in studies:
        for candidate in other.arms:
            source = record_dir(other, candidate, seed)
            if source == record_dir(study, arm, seed) or not (source / "run.json").is_file():
                continue
            if settings_hash(other.merged(candidate)) != wanted:
                continue
            if evaluation_mismatch(study, json.loads((source / "passk.json").read_text())):
                continue  # the same trained cell, evaluated at another size: this study evaluates it at its own
            out = record_dir(study, arm, seed)
            out.mkdir(parents=True, exist_ok=True)
            for name in (n for n in RECORD_FILES if n != "run.json"):
                shutil.copyfile(source / name, out / name)
            run = json.loads((source / "run.json").read_text())
            run.update(arm=arm.name, copied_from=str(source.relative_to(other.records.parent)))
            atomic_write(out / "run.json", json.dumps(run, indent=2))  # last: a record without it is unfinished
            print(f"{study.title} / {arm.name} seed {seed}: the same cell as {source}, record copied", flush=True)
            return out
    return None
