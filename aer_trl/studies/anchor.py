"""How much a steadier anchor narrows H* across seeds (docs/real_llm.md §3.3), from committed records alone.

    python -m aer_trl.studies.anchor results/real_llm/*/study.yaml [--docs docs/real_llm.md]

With α₀ = 0 and `aer_anchor_rollouts: k`, α cannot move before H0 is known, so AER's first k rollout batches are
GRPO's and its H0 would be the mean entropy of GRPO's first k rollout batches on the same seed. Over every GRPO
cell recorded in the given studies (one per seed: cells that share settings and seed are one run), this prints, for
k = 1..5, H0's mean, standard deviation and coefficient of variation across seeds (H* = τ·H0 varies alike).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from ..io import atomic_write
from ..metrics import read_metrics
from .real_study import load_study, read_record

KS = (1, 2, 3, 4, 5)


def grpo_first_entropies(study_files: list[str], rollouts: int = max(KS)) -> dict[int, list[float]]:
    """seed → the first `rollouts` logged entropies of the recorded GRPO cell of that seed (the first settings found
    for it; the studies' GRPO arms share settings but for the number of steps, which the first steps do not see)."""
    found: dict[int, list[float]] = {}
    for path in study_files:
        study = load_study(path)
        for arm in study.arms:
            if arm.recipe != "grpo":
                continue
            for seed in study.seeds:
                if seed in found or read_record(study, arm, seed) is None:
                    continue
                folder = study.records / "cells" / arm.name / f"seed{seed}"
                steps = [r for r in read_metrics(folder / "metrics.jsonl") if "train_runtime" not in r]
                entropies = [r["aer/entropy"] for r in steps if r.get("aer/entropy") is not None][:rollouts]
                if len(entropies) == rollouts:
                    found[seed] = entropies
    return found


def anchor_table(found: dict[int, list[float]]) -> str:
    lines = [
        f"H0 under `aer_anchor_rollouts: k`, across the {len(found)} recorded GRPO seeds ({sorted(found)}): mean, "
        "standard deviation and coefficient of variation (sd / mean) of H0 = the mean entropy of the first k rollout "
        "batches.",
        "",
        "| k | H0 mean | H0 sd | H0 sd / mean |",
        "|---|---|---|---|",
    ]
    for k in KS:
        h0 = [statistics.fmean(e[:k]) for e in found.values()]
        mean = statistics.fmean(h0) if h0 else float("nan")
        sd = statistics.stdev(h0) if len(h0) > 1 else float("nan")
        lines.append(f"| {k} | {mean:.3f} | {sd:.3f} | {sd / mean:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="+", help="study files whose GRPO records to read")
    parser.add_argument("--docs", default=None, help="a page whose <!-- study:anchor --> block gets the table")
    args = parser.parse_args(argv)
    table = anchor_table(grpo_first_entropies(args.studies))
    print(table)
    if args.docs:
        docs = Path(args.docs)
        text = docs.read_text()
        start, end = "<!-- study:anchor -->", "<!-- /study:anchor -->"
        if start in text and end in text:
            head, rest = text.split(start, 1)
            atomic_write(docs, f"{head}{start}\n{table}{end}{rest.split(end, 1)[1]}")
    return table


if __name__ == "__main__":
    main()
