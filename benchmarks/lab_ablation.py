"""The paper's ablations on the laptop lab, over seeds, with 95% confidence intervals. Resumable: a finished cell
(method × settings × seed) is never rerun, so the command can be killed and started again at any time.

    python benchmarks/lab_ablation.py --study table1 --seeds 0 1 2 3 4  # GRPO, Clip-Higher, Ent-Adv, KL/Clip-Cov, AER
    python benchmarks/lab_ablation.py --study table2 --seeds 0 1 2 3 4  # GRPO, fixed coef., C1, C2&C3, AER
    python benchmarks/lab_ablation.py --study rho --seeds 0 1 2 3 4     # AER, ρ ∈ {0, 0.2, 0.5, 0.8, 1}
    python benchmarks/lab_ablation.py --study tau --seeds 0 1 2 3 4     # AER, τ ∈ {0.2, 0.4, 0.7, 1.0, 1.2}
    python benchmarks/lab_ablation.py --study all --seeds 0 1 2 3 4     # all four, each shared run trained once
    python benchmarks/lab_ablation.py --study table1 --aggregate_only   # tables and figure from finished cells
    ... --learning_rate 3e-4                                            # any other flag goes to every recipe

A cell is one training run plus its evaluation, stored under `<output_dir>/cells/<run>-<settings hash>/seed<k>/`.
The hash covers everything that decides the result (the method's recipe file, the study's and the command line's
recipe flags, the evaluation sizes), so the same run is shared by every study that contains it (GRPO and AER by
all four: the sweeps' default points are the AER recipe itself) and a run made with other settings is never mixed
into a table: change one flag and the affected cells are trained afresh, beside the old ones.

Per cell: held-out pass@1 and pass@16 per difficulty tier (the same held-out problems for every cell), the final
training entropy (mean of the last 3 logged values) and the median relative distance |H − H*| / H* over the second
half of training (H* = τ·H0, which GRPO runs log too as a reference). Per method: the mean over seeds and a 95%
Student-t interval (mean ± t₀.₉₇₅,ₙ₋₁ · s / √n). Writes `<output_dir>/<study>.md`, `<study>.json` and `<study>.png`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from aer_bench.stats import interval  # noqa: E402
from aer_trl.app.resources import recipes_dir  # noqa: E402

RECIPES = recipes_dir("lab", "aer_bench")
STUDIES = {
    "table1": [(m, m, []) for m in ("grpo", "clip_higher", "ent_adv", "kl_cov", "clip_cov", "aer")],
    # C1 twice: at the recipe's α = 0.1 (the most full AER's α may reach) and at the fixed coefficient's 0.02, so that
    # "fixed" and "C1" differ only in the difficulty weighting
    "table2": [(m, m, []) for m in ("grpo", "aer_fixed", "aer_c1")]
    + [("aer_c1_alpha0.02", "aer_c1", ["--aer_alpha_init", "0.02"])]
    + [(m, m, []) for m in ("aer_c2c3", "aer")],
    # the recipe's own value (ρ = 0.2, τ = 0.7) is the plain AER run, shared with the tables
    "rho": [(f"aer_rho{r}", "aer", [] if r == 0.2 else ["--aer_rho", str(r)]) for r in (0.0, 0.2, 0.5, 0.8, 1.0)],
    "tau": [(f"aer_tau{t}", "aer", [] if t == 0.7 else ["--aer_tau", str(t)]) for t in (0.2, 0.4, 0.7, 1.0, 1.2)],
}
# the row each study's paired differences are taken against
REFERENCE = {"table1": "grpo", "table2": "grpo", "rho": "aer_rho0.2", "tau": "aer_tau0.7"}


def entropy_summary(records: list[dict]) -> dict:
    logged = [r for r in records if r.get("aer/entropy") is not None and "train_runtime" not in r]
    entropies = [r["aer/entropy"] for r in logged]
    second = [r for r in logged[len(logged) // 2 :] if r.get("aer/target_entropy")]
    distance = [abs(r["aer/entropy"] - r["aer/target_entropy"]) / r["aer/target_entropy"] for r in second]
    return {
        "final_entropy": statistics.fmean(entropies[-3:]) if entropies else float("nan"),
        "target_distance": statistics.median(distance) if distance else float("nan"),
        "entropy_curve": [[r["step"], r["aer/entropy"]] for r in logged],
    }


def cell_settings(method: str, extra: list[str], args) -> dict:
    """Everything that decides a cell's result apart from its seed."""
    return {
        "method": method,
        "recipe": yaml.safe_load((RECIPES / f"{method}.yaml").read_text()),  # its values: comments may change
        "flags": [*args.recipe_overrides, *extra],
        "eval_per_tier": args.eval_per_tier,
        "eval_samples": args.eval_samples,
    }


def cell_dir(method: str, extra: list[str], seed: int, args) -> Path:
    settings = json.dumps(cell_settings(method, extra, args), sort_keys=True)
    run = "-".join([method, *(a.lstrip("-") for a in extra)])
    return Path(args.output_dir) / "cells" / f"{run}-{hashlib.sha1(settings.encode()).hexdigest()[:8]}" / f"seed{seed}"


def run_cell(study: str, name: str, method: str, extra: list[str], seed: int, args, held_out) -> dict:
    """Train and evaluate one cell unless its result is on disk; the result is written last, atomically."""
    from aer_bench.studies.report import evaluate_pass_at_k
    from aer_bench.training import train_recipe
    from aer_trl.atomic import atomic_write
    from aer_trl.metrics import read_metrics

    cell_dir_ = cell_dir(method, extra, seed, args)
    result_path = cell_dir_ / "cell.json"
    if result_path.exists():
        return {**json.loads(result_path.read_text()), "study": study, "name": name}
    start = time.perf_counter()
    train_recipe(
        RECIPES / f"{method}.yaml",
        [
            "--lab_cache_dir",
            args.lab_cache_dir,
            *args.recipe_overrides,
            *extra,  # last: the study's own value wins over a command-line flag
            "--output_dir",
            str(cell_dir_),
            "--seed",
            str(seed),
            "--disable_tqdm",
            "true",
        ],
    )
    passk = evaluate_pass_at_k(cell_dir_, held_out, n=args.eval_samples, seed=seed, disable_tqdm=True)
    result = {
        "study": study,
        "name": name,
        "method": method,
        "seed": seed,
        "passk": {group: {str(k): v for k, v in ks.items()} for group, ks in passk.items()},
        **entropy_summary(read_metrics(cell_dir_ / "metrics.jsonl")),
        "seconds": time.perf_counter() - start,
        "settings": cell_settings(method, extra, args),
    }
    atomic_write(result_path, json.dumps(result, indent=2))
    return result


def aggregate(study: str, cells: list[dict], out: Path, k_high: int, flags: list[str] = ()) -> dict:
    names = list(dict.fromkeys(c["name"] for c in cells))
    tiers = sorted(g for g in cells[0]["passk"] if g != "all")
    columns = [("pass@1", lambda c: 100 * c["passk"]["all"]["1"])]
    columns += [(f"pass@{k_high}", lambda c: 100 * c["passk"]["all"][str(k_high)])]
    columns += [(f"{t} pass@{k_high}", lambda c, t=t: 100 * c["passk"][t][str(k_high)]) for t in tiers]
    columns += [("final H", lambda c: c["final_entropy"]), ("|H−H*|/H*", lambda c: c["target_distance"])]
    rows = {}
    for name in names:
        mine = [c for c in cells if c["name"] == name]
        rows[name] = {"seeds": sorted(c["seed"] for c in mine)}
        rows[name].update({col: interval([f(c) for c in mine]) for col, f in columns})
    # the same seed gives every method the same first rollout batch: differences against the study's reference row,
    # paired by seed, remove the seed-to-seed spread that the per-method intervals carry
    reference = REFERENCE[study] if REFERENCE.get(study) in rows else names[0]
    paired = [c for c in columns if c[0] in ("pass@1", f"pass@{k_high}")]
    ref_cells = {c["seed"]: c for c in cells if c["name"] == reference}
    for name in names:
        mine = {c["seed"]: c for c in cells if c["name"] == name and c["seed"] in ref_cells}
        for col, f in paired:
            diffs = [f(c) - f(ref_cells[s]) for s, c in mine.items()]
            rows[name][f"Δ{col}"] = interval(diffs) if diffs else (float("nan"), float("nan"))
    columns = columns + [(f"Δ{col}", None) for col, _ in paired]
    head = "| method | seeds | " + " | ".join(col for col, _ in columns) + " |"
    lines = [head, "|---" * (len(columns) + 2) + "|"]
    for name, row in rows.items():
        cells_txt = [
            f"{m:.3g} ± {h:.2g}" if not math.isnan(h) else f"{m:.3g}" for m, h in (row[c] for c, _ in columns)
        ]
        lines.append(f"| {name} | {len(row['seeds'])} | " + " | ".join(cells_txt) + " |")
    table = "\n".join(lines) + (
        f"\n\nMean over seeds ± half-width of the 95% Student-t interval; pass@k in % on the held-out set, "
        f"pass@{k_high} per difficulty tier; Δ: the difference to `{reference}` paired by seed, with its own 95% "
        f"interval (an interval that excludes 0 is a difference this many seeds resolve). Recipe flags on top of "
        f"`recipes/lab/<method>.yaml`: `{' '.join(flags) or 'none'}`.\n"
    )
    (out / f"{study}.md").write_text(table)
    (out / f"{study}.json").write_text(json.dumps({"cells": cells, "rows": rows}, indent=2))
    plot(study, rows, [c for c, _ in columns], out / f"{study}.png", cells)
    return rows


def plot(study: str, rows: dict, columns: list[str], path: Path, cells: list[dict] = ()) -> None:
    """Bars with 95% intervals for the headline columns, then entropy over training: mean over seeds, min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in columns if "tier" not in c] + [c for c in columns if "tier" in c][-1:]
    curves = [c for c in cells if c.get("entropy_curve")]
    panels = len(shown) + bool(curves)
    ncols = min(3, panels)
    nrows = -(-panels // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.9 * nrows), squeeze=False)
    axes = list(axes.flat)
    for ax in axes[panels:]:
        ax.set_visible(False)
    axes = axes[:panels]  # the bars, then (last) the entropy curves
    names = list(rows)
    if curves:
        ax = axes[-1]
        for i, name in enumerate(names):
            mine = [dict(c["entropy_curve"]) for c in curves if c["name"] == name]
            steps = sorted(set.intersection(*(set(m) for m in mine))) if mine else []
            if not steps:
                continue
            values = [[m[s] for m in mine] for s in steps]
            ax.plot(steps, [statistics.fmean(v) for v in values], color=f"C{i}", label=name, lw=1.2)
            ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], color=f"C{i}", alpha=0.15)
        ax.set_xlabel("step")
        ax.set_title("entropy (nats/token): mean, min-max over seeds")
        ax.legend(fontsize=7)
    for ax, col in zip(axes, shown):
        means = [rows[n][col][0] for n in names]
        errs = [0 if math.isnan(rows[n][col][1]) else rows[n][col][1] for n in names]
        ax.bar(range(len(names)), means, yerr=errs, capsize=4, color=[f"C{i}" for i in range(len(names))])
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        ax.set_title(col)
    fig.suptitle(f"laptop lab, {study}: mean over seeds, 95% t-interval")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--study", choices=[*STUDIES, "all"], required=True)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--output_dir", default="runs/ablation")
    parser.add_argument("--lab_cache_dir", default="runs/lab")
    parser.add_argument("--eval_per_tier", type=int, default=64)
    parser.add_argument("--eval_samples", type=int, default=16)
    parser.add_argument("--aggregate_only", action="store_true", help="tables and figure from the finished cells")
    args, args.recipe_overrides = parser.parse_known_args(argv)
    unknown = [a for a in args.recipe_overrides if a in ("--output_dir", "--seed")]
    if unknown:
        parser.error(f"{unknown[0]} is set per cell by this script; use --output_dir/--seeds before the recipe flags")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    studies = list(STUDIES) if args.study == "all" else [args.study]

    from aer_bench.lab.tasks import make_arithmetic_dataset
    from aer_bench.studies.demo import held_out_set

    # every lab recipe trains on the same generated problems (lab_train_size 8192, lab_data_seed 0)
    train_prompts = set(make_arithmetic_dataset(8192, seed=0)["prompt"])
    held_out = held_out_set(args.eval_per_tier, train_prompts)
    cells: dict[str, list[dict]] = {study: [] for study in studies}
    for seed in args.seeds:  # seed-major: an interrupted study has every method at the same number of seeds
        for study in studies:
            for name, method, extra in STUDIES[study]:
                path = cell_dir(method, extra, seed, args) / "cell.json"
                if args.aggregate_only:
                    if path.exists():
                        cells[study].append({**json.loads(path.read_text()), "study": study, "name": name})
                    continue
                on_disk = path.exists()
                cells[study].append(run_cell(study, name, method, extra, seed, args, held_out))
                took = "on disk" if on_disk else f"{cells[study][-1]['seconds']:.0f} s"
                print(f"{study} {name} seed {seed}: done ({took})", flush=True)
    rows = {}
    for study in studies:
        if not cells[study]:
            raise SystemExit(
                f"no finished cell for study {study!r} with these settings under {out / 'cells'} "
                "(the recipe flags, evaluation sizes and recipe files must be those the cells were run with)"
            )
        k_high = max(int(k) for k in cells[study][0]["passk"]["all"])
        rows[study] = aggregate(study, cells[study], out, k_high, args.recipe_overrides)
        print((out / f"{study}.md").read_text())
    return rows if args.study == "all" else rows[args.study]


if __name__ == "__main__":
    main()
