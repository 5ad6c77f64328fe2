"""The queue: every missing cell of the studies, seed-major, each claimed (a lock on a file, so several queues can
share the studies), trained, evaluated and recorded before the next."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from aer_trl.app.files import try_lock
from aer_trl.atomic import atomic_write

from .cells import held_out, train_cell
from .records import evaluation_mismatch, export_record, read_record, share_record
from .spec import Arm, Study, cell_dir, record_dir


@dataclass
class Claim:
    """A cell claimed by this queue: an exclusive lock (`flock`) on `<record dir>/.claim`, held through `fd` by this
    process and by the training process it starts (which inherits `fd`). The kernel releases it when the last of them
    ends, however it ends: a queue killed on its own (`kill PID`) leaves its training running, and the cell stays
    claimed until that training ends too."""

    path: Path
    fd: int

    def release(self) -> None:
        os.close(self.fd)


def claim_cell(study: Study, arm: Arm, seed: int) -> Claim | None:
    """Claim a cell for this process; None when another queue, or a training a killed queue started, holds it.
    Several queues can then share one list of studies, one cell each at a time."""
    out = record_dir(study, arm, seed)
    out.mkdir(parents=True, exist_ok=True)
    fd = try_lock(out / ".claim")
    return None if fd is None else Claim(out / ".claim", fd)


def run_queue(
    studies: list[Study],
    output_dir: str | Path,
    evaluate_models: bool = True,
    seeds: list[int] | None = None,
    arms: list[str] | None = None,
) -> None:
    """Every missing cell of every study, seed-major across the studies (an interrupted queue leaves every arm at
    about the same number of seeds), each trained, evaluated and recorded before the next starts. A cell another
    live queue has claimed (`claim_cell`) is left to it, so two queues (e.g. one thread each on two cores, each with
    its own --output_dir) can work through the same studies. `seeds` / `arms` (names): only those cells of the
    studies are trained (the studies, and so their tables, keep every seed and arm; a record another study
    holds is copied for any arm). A study's deviation seeds (`Deviation`) are left to the deviation's study file."""
    if arms is not None:
        known = {arm.name for study in studies for arm in study.arms}
        unknown = [name for name in arms if name not in known]
        if unknown:
            raise ValueError(f"arms {unknown} are in none of the studies; their arms: {sorted(known)}")
    base_done: dict[Path, dict] = {}
    for seed in sorted({s for study in studies for s in study.seeds}):
        if seeds is not None and seed not in seeds:
            continue
        for study in studies:
            if seed not in study.seeds or (study.deviation and seed in study.deviation.seeds):
                continue  # a deviation's seeds train in its own study file
            for arm in study.arms:
                # a record another study holds is copied whatever `arms` says (copying trains nothing: a queue
                # for the rivals alone still gets the shared reference's cells, and so its paired tables)
                record = read_record(study, arm, seed, check_evaluation=False)
                mismatch = record is not None and evaluation_mismatch(study, record["passk"])
                if mismatch:  # evaluated again (its cell trained again where its model is not in output_dir)
                    print(f"{study.title} / {arm.name} seed {seed}: the record was {mismatch}", flush=True)
                elif record is not None or share_record(studies, study, arm, seed):
                    continue
                if arms is not None and arm.name not in arms:
                    continue
                claim = claim_cell(study, arm, seed)
                if claim is None:
                    print(
                        f"{study.title} / {arm.name} seed {seed}: another queue has it (or the training a killed "
                        "queue started still runs)",
                        flush=True,
                    )
                    continue
                try:
                    _run_cell(study, arm, seed, output_dir, evaluate_models, base_done, claim)
                finally:
                    claim.release()


def _run_cell(
    study: Study, arm: Arm, seed: int, output_dir, evaluate_models: bool, base_done: dict, claim: Claim | None = None
) -> None:
    """Train, evaluate and record one claimed cell (the untrained model's evaluation first, once per study)."""
    base = study.records / "base_passk.json"
    if evaluate_models and (not base.is_file() or evaluation_mismatch(study, json.loads(base.read_text()))):
        if study.records not in base_done:
            from aer_trl.app.gguf import convert_gguf

            base_done[study.records] = held_out(study, study.arms[0], str(convert_gguf()), output_dir)
            print(f"untrained: held-out pass@1 {100 * base_done[study.records]['pass@1']:.1f}%", flush=True)
        study.records.mkdir(parents=True, exist_ok=True)
        atomic_write(study.records / "base_passk.json", json.dumps(base_done[study.records], sort_keys=True))
    run = train_cell(study, arm, seed, output_dir, claim)
    print(f"{study.title} / {arm.name} seed {seed}: trained ({run['seconds']:.0f} s)", flush=True)
    if not evaluate_models:
        return
    folder = cell_dir(study, arm, seed, output_dir)
    passk = held_out(study, arm, str(folder), output_dir)
    export_record(study, arm, seed, folder, passk)
    print(f"{arm.name} seed {seed}: held-out pass@1 {100 * passk['pass@1']:.1f}%, recorded", flush=True)
