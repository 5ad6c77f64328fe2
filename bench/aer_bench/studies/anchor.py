"""How much a steadier anchor narrows H* across seeds (docs/real_llm.md §3.4), from committed records alone.

    python -m aer_bench.studies.anchor results/real_llm/*/study.yaml [--probe_record F] [--docs docs/real_llm.md]
    python -m aer_bench.studies.anchor --measure_probe 32 --seeds 0 1 ... --probe_record F   # the probe's runs

With α₀ = 0 and `aer_anchor_rollouts: k`, α cannot move before H0 is known, so AER's first k rollout batches are
GRPO's and its H0 would be the mean entropy of GRPO's first k rollout batches on the same seed. Over every GRPO
cell recorded in the given studies (one per seed: cells that share settings and seed are one run), this prints, for
k = 1..5, H0's mean, standard deviation and coefficient of variation across seeds (H* = τ·H0 varies alike).

`aer_anchor_probe: P` (a probe of the untrained policy on P prompts before step 1) is measured by running the
recipe for one step per seed with the probe on (`--measure_probe P`): the probe's H0 and the first rollout batch's
entropy (the paper's anchor: the same untrained policy on the rollout batch's 4 prompts), one JSON record for all
seeds, written after each seed (a killed measurement resumes at the next seed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from aer_trl.atomic import atomic_write
from aer_trl.metrics import read_metrics

from .real_study import load_study, read_record, replace_block

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


def _spread(values: list[float]) -> str:
    """'mean | sd | sd / mean' of H0 across seeds."""
    mean = statistics.fmean(values) if values else float("nan")
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{mean:.3f} | {sd:.3f} | {sd / mean:.2f}"


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
        lines.append(f"| {k} | {_spread([statistics.fmean(e[:k]) for e in found.values()])} |")
    return "\n".join(lines) + "\n"


def probe_table(record: dict) -> str:
    """The probe's H0 against the first rollout batch's on the same seeds (the record of `measure_probe`)."""
    seeds = sorted(record["seeds"], key=int)
    first = [record["seeds"][s]["first_rollout"] for s in seeds]
    probe = [record["seeds"][s]["probe"] for s in seeds]
    n, p = record["rollout_prompts"], record["probe_prompts"]
    return (
        "\n".join(
            [
                f"H0 of the untrained policy across {len(seeds)} seeds ({[int(s) for s in seeds]}), measured in the "
                f"same runs: the first rollout batch ({n} prompts × {record['num_generations']}, the paper's anchor) "
                f"and `aer_anchor_probe: {p}` ({p} prompts × {record['num_generations']} before step 1).",
                "",
                "| anchor | prompts | H0 mean | H0 sd | H0 sd / mean |",
                "|---|---|---|---|---|",
                f"| first rollout batch | {n} | {_spread(first)} |",
                f"| probe | {p} | {_spread(probe)} |",
            ]
        )
        + "\n"
    )


def measure_probe(prompts: int, seeds: list[int], record_path: Path, recipe: Path, output_dir: Path | None) -> dict:
    """One training step of `recipe` per seed with `aer_anchor_probe: prompts`; records the probe's H0 and the first
    rollout batch's entropy per seed (resumable: seeds already in the record are skipped)."""
    from aer_bench.training import train_recipe

    record = json.loads(record_path.read_text()) if record_path.is_file() else {"seeds": {}}
    if record["seeds"] and record.get("probe_prompts") != prompts:
        raise ValueError(f"{record_path} holds a probe of {record['probe_prompts']} prompts, not {prompts}")
    for seed in seeds:
        if str(seed) in record["seeds"]:
            continue
        with tempfile.TemporaryDirectory(dir=output_dir) as folder:
            overrides = ["--max_steps", "1", "--aer_anchor_probe", str(prompts), "--seed", str(seed)]
            overrides += ["--output_dir", folder, "--save_strategy", "no", "--report_to", "none"]
            _, args, trainer = train_recipe(recipe, overrides)
        first = next(h for h in trainer.state.log_history if "aer/entropy" in h)
        record.update(
            recipe=str(recipe),
            probe_prompts=prompts,
            num_generations=args.num_generations,
            rollout_prompts=args.per_device_train_batch_size * args.world_size // args.num_generations,
        )
        probe, rollout = first["aer/anchor_probe_entropy"], first["aer/entropy"]
        record["seeds"][str(seed)] = {"probe": probe, "first_rollout": rollout}
        record_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(record_path, json.dumps(record, indent=2, sort_keys=True) + "\n")
        print(f"seed {seed}: probe H0 {probe:.4f}, first rollout {rollout:.4f}", flush=True)
    return record


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="*", help="study files whose GRPO records to read")
    parser.add_argument("--docs", default=None, help="a page whose <!-- study:anchor --> block gets the table")
    parser.add_argument("--probe_record", type=Path, default=None, help="the probe measurement's JSON record")
    parser.add_argument("--measure_probe", type=int, default=0, help="run the probe of this many prompts per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--recipe", type=Path, default=Path("results/real_llm/recipes/aer.yaml"))
    parser.add_argument("--output_dir", type=Path, default=None, help="where the one-step runs go (a temp folder)")
    args = parser.parse_args(argv)
    if args.measure_probe:
        if args.probe_record is None:
            parser.error("--measure_probe needs --probe_record")
        measure_probe(args.measure_probe, args.seeds, args.probe_record, args.recipe, args.output_dir)
        return ""
    if not args.studies:
        parser.error("give the study files whose GRPO records to read")
    table = anchor_table(grpo_first_entropies(args.studies))
    if args.probe_record is not None and args.probe_record.is_file():
        table += "\n" + probe_table(json.loads(args.probe_record.read_text()))
    print(table)
    if args.docs:
        replace_block(Path(args.docs), "anchor", table)
    return table


if __name__ == "__main__":
    main()
