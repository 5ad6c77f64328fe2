"""How closely AER holds the policy entropy at its target, against plain GRPO, from lab runs' metrics.

For each run folder (with metrics.jsonl), over the second half of training: the relative distance |H_t − H*| / H*,
its median and 90th percentile, with H* the AER target (τ·H0, the same reference for GRPO, which logs it too).

    python -m aer_bench.studies.demo --seeds 0 1 2 --output_dir runs/demo3
    python benchmarks/entropy_tracking.py runs/demo3
    python benchmarks/entropy_tracking.py runs/ablation/cells/grpo-* runs/ablation/cells/aer-*   # ablation runs
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from aer_trl.metrics import read_metrics  # noqa: E402


def tracking(records: list[dict]) -> dict:
    pts = [
        (r["step"], r["aer/entropy"], r["aer/target_entropy"])
        for r in records
        if r.get("aer/entropy") is not None and r.get("aer/target_entropy") and "train_runtime" not in r
    ]
    if not pts:
        raise ValueError("no aer/entropy and aer/target_entropy in these metrics")
    last = pts[-1][0]
    dist = sorted(abs(h - t) / t for s, h, t in pts if s > last / 2)
    p90 = dist[min(len(dist) - 1, int(round(0.9 * (len(dist) - 1))))]
    within = sum(d <= 0.15 for d in dist) / len(dist)
    return {
        "median": statistics.median(dist),
        "p90": p90,
        "within_15pct": within,
        "mean_entropy_2nd_half": statistics.mean(h for s, h, _ in pts if s > last / 2),
        "target": pts[-1][2],
        "initial": records[0].get("aer/initial_entropy"),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "dirs",
        nargs="+",
        help="demo output folders (<method>-seed<k>/metrics.jsonl) or lab_ablation runs (<run>/seed<k>/metrics.jsonl)",
    )
    args = parser.parse_args(argv)
    by_method: dict[str, list[dict]] = {}
    for folder in map(Path, args.dirs):
        # one lab_ablation run (named by its folder), else a demo folder (<method>-seed<k>)
        found = [(folder.name, m) for m in sorted(folder.glob("seed*/metrics.jsonl"))] or [
            (m.parent.name.rsplit("-seed", 1)[0], m) for m in sorted(folder.glob("*-seed*/metrics.jsonl"))
        ]
        if not found:
            raise SystemExit(f"{folder}: no <method>-seed<k>/metrics.jsonl or seed<k>/metrics.jsonl in it")
        for method, metrics in found:
            by_method.setdefault(method, []).append(tracking(read_metrics(metrics)))
    print("| method | seeds | median abs(H-H*)/H* | p90 | share within 15% | mean H (2nd half) | H* |")
    print("|---|---|---|---|---|---|---|")
    for method, rows in by_method.items():

        def mean(key, rows=rows):
            return statistics.mean(r[key] for r in rows)

        print(
            f"| {method} | {len(rows)} | {mean('median'):.3f} | {mean('p90'):.3f} | {100 * mean('within_15pct'):.0f}% "
            f"| {mean('mean_entropy_2nd_half'):.3f} | {mean('target'):.3f} |"
        )
    return by_method


if __name__ == "__main__":
    main()
