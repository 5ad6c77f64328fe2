"""The real-LLM study: GRPO against AER (and any other method) on SmolLM2-135M-Instruct, the arithmetic tiers as
2-shot chat questions, over seeds, with held-out pass@k per tier before and after training (docs/real_llm.md).

    python -m aer_trl.studies.real_study --seeds 0                  # `make real`: one seed of GRPO and AER + figure
    python -m aer_trl.studies.real_study --seeds 0 1 2              # the study at 3 seeds (CPU: ~15 min per run)
    python -m aer_trl.studies.real_study --methods grpo aer clip_cov --seeds 0 1 2
    python -m aer_trl.studies.real_study --seeds 0 1 2 --aggregate_only
    ... --max_steps 20                                          # any other flag goes to every recipe

Resumable at every level: a cell (method × seed) is one training run in its own process under
`<output_dir>/cells/<method>-<settings hash>/seed<k>/` (the hash covers the recipe's values, the recipe flags; a
changed flag trains new cells beside the old ones); a killed run resumes from its newest complete checkpoint; a
finished run (`run.json`, written last) is never rerun. Held-out sampling goes through the evaluation harness into
`<output_dir>/eval/` (fingerprinted store: a killed evaluation resumes exactly). Every model, the untrained one
included, is evaluated on the same held-out problems with the same sampling seeds.

Writes `<output_dir>/study.md` (table with 95% Student-t intervals over seeds and AER − GRPO differences paired by
seed), `study.json` and `figure.png` (training reward, entropy with H*, α, hard-prompt share, completion length,
held-out pass@k and pass@1 per tier).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ..io import atomic_write
from ..metrics import read_metrics
from ..prompts import prompt_settings
from ..resources import recipes_dir
from ..stats import interval

RECIPES = recipes_dir("smollm2_135m_instruct/arithmetic")  # shipped inside the package
KS = (1, 2, 4, 8, 16)
TIER_NAMES = {"0": "1-digit +", "1": "2-digit +", "2": "1-digit ×", "3": "2-digit × 1-digit"}


def cell_dir(method: str, seed: int, args) -> Path:
    recipe = yaml.safe_load((Path(args.recipes_dir) / f"{method}.yaml").read_text())
    settings = json.dumps({"recipe": recipe, "flags": args.recipe_overrides}, sort_keys=True)
    return (
        Path(args.output_dir) / "cells" / f"{method}-{hashlib.sha1(settings.encode()).hexdigest()[:8]}" / f"seed{seed}"
    )


def train_cell(method: str, seed: int, args) -> dict:
    """Train one cell in its own process unless it is finished; resume a killed one from its newest checkpoint."""
    folder = cell_dir(method, seed, args)
    done = folder / "run.json"
    if done.exists():
        return json.loads(done.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    resume = any((p / "trainer_state.json").is_file() for p in folder.glob("checkpoint-*"))
    command = [
        sys.executable,
        "-m",
        "aer_trl.run",  # the training command line, as `aer-train`
        "--config",
        str(Path(args.recipes_dir) / f"{method}.yaml"),
        *args.recipe_overrides,
        "--output_dir",
        str(folder),
        "--seed",
        str(seed),
        "--disable_tqdm",
        "true",
        *(["--resume_from_checkpoint", "latest"] if resume else []),
    ]
    start = time.perf_counter()
    with open(folder / "train.log", "a") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    if code != 0:
        raise RuntimeError(f"training {method} seed {seed} failed (exit {code}); see {folder / 'train.log'}")
    run = {"method": method, "seed": seed, "seconds": time.perf_counter() - start, "resumed": resume}
    atomic_write(done, json.dumps(run, indent=2))
    return run


def eval_arguments(args, models: list[str]):
    """Held-out sampling in the format and token budget the cells were trained with: the first method's recipe with
    the study's recipe flags (a `--max_completion_length 48` or `--prompt_system ...` given to the study reaches the
    evaluation too), parsed as the training command parses it."""
    from ..evaluation import EvalArguments
    from ..training import parse_recipe

    recipe = Path(args.recipes_dir) / f"{args.methods[0]}.yaml"
    script_args, training_args, _ = parse_recipe(
        ["--config", str(recipe), *args.recipe_overrides, "--output_dir", str(Path(args.output_dir) / "eval")]
    )
    return EvalArguments(
        models=models,
        benchmarks=["arithmetic"],
        output_dir=str(Path(args.output_dir) / "eval"),
        num_samples=args.eval_samples,
        k_list=[k for k in KS if k <= args.eval_samples],
        max_new_tokens=training_args.max_completion_length,
        temperature=1.0,
        seed=0,
        batch_size=8,
        arithmetic_test_per_tier=args.eval_per_tier,
        **prompt_settings(script_args),
    )


def held_out(args, model: str) -> dict:
    """pass@k overall and per tier of one model on the held-out split (resumable through the harness's store)."""
    from ..evaluation import evaluate

    metrics = evaluate(eval_arguments(args, [model]))
    return next(iter(metrics.values()))["arithmetic"]


def training_summary(records: list[dict]) -> dict:
    steps = [r for r in records if "train_runtime" not in r and r.get("reward") is not None]

    def series(key):
        return [(r["step"], r[key]) for r in steps if r.get(key) is not None]

    def mean_of(key, part):
        values = [v for _, v in series(key)]
        return statistics.fmean(part(values)) if values and part(values) else float("nan")

    first, last = (lambda v: v[:5]), (lambda v: v[-5:])
    entropy = series("aer/entropy")
    targets = [r.get("aer/target_entropy") for r in steps]
    target = next((t for t in reversed(targets) if t), float("nan"))
    h0 = next((r["aer/initial_entropy"] for r in steps if r.get("aer/initial_entropy")), float("nan"))
    second = [(s, h) for s, h in entropy[len(entropy) // 2 :]]
    distance = [abs(h - target) / target for _, h in second] if target == target and target else []
    hard = [
        (s, (r.get("aer/bucket/unsolved/share") or 0) + (r.get("aer/bucket/hard/share") or 0))
        for s, r in ((r["step"], r) for r in steps)
    ]
    return {
        "reward_first": mean_of("reward", first),
        "reward_last": mean_of("reward", last),
        "entropy_first": mean_of("aer/entropy", first),
        "entropy_last": mean_of("aer/entropy", last),
        "h0": h0,
        "target": target,
        "entropy_ratio": mean_of("aer/entropy", last) / h0 if h0 == h0 and h0 else float("nan"),
        "target_distance": statistics.median(distance) if distance else float("nan"),
        "alpha_last": mean_of("aer/alpha", last),
        "length_last": mean_of("completions/mean_length", last),
        "curves": {
            "reward": series("reward"),
            "entropy": entropy,
            "alpha": series("aer/alpha"),
            "length": series("completions/mean_length"),
            "hard_share": hard,
            **{f"tier{t}": series(f"lab/accuracy_tier{t}") for t in TIER_NAMES},
        },
    }


COLUMNS = [
    ("reward, first 5 steps", lambda c: c["reward_first"]),
    ("reward, last 5 steps", lambda c: c["reward_last"]),
    ("H0", lambda c: c["h0"]),
    ("H, last 5 steps", lambda c: c["entropy_last"]),
    ("H last / H0", lambda c: c["entropy_ratio"]),
    ("median |H−H*|/H* (2nd half)", lambda c: c["target_distance"]),
    ("α, last 5 steps", lambda c: c["alpha_last"]),
    ("length, last 5", lambda c: c["length_last"]),
]


def passk_columns(ks) -> list:
    cols = [(f"held-out pass@{k}", lambda c, k=k: 100 * c["passk"][f"pass@{k}"]) for k in ks]
    cols += [
        (f"{TIER_NAMES[t]} pass@1", lambda c, t=t: 100 * c["passk"]["per_group"][t]["pass@1"]) for t in TIER_NAMES
    ]
    return cols


def _fmt(mean: float, half: float) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.3g}" if math.isnan(half) else f"{mean:.3g} ± {half:.2g}"


def aggregate(cells: list[dict], base: dict | None, args) -> dict:
    methods = list(dict.fromkeys(c["method"] for c in cells))
    ks = [k for k in KS if k <= args.eval_samples]
    train_cols, eval_cols = COLUMNS, passk_columns(ks)
    rows = {}
    for m in methods:
        mine = [c for c in cells if c["method"] == m]
        rows[m] = {"seeds": sorted(c["seed"] for c in mine)}
        rows[m].update({name: interval([f(c) for c in mine]) for name, f in train_cols + eval_cols})
    paired = {}
    reference = "grpo" if "grpo" in methods else methods[0]
    ref = {c["seed"]: c for c in cells if c["method"] == reference}
    for m in methods:
        if m == reference:
            continue
        mine = {c["seed"]: c for c in cells if c["method"] == m and c["seed"] in ref}
        paired[m] = {
            name: interval([f(c) - f(ref[s]) for s, c in mine.items()])
            for name, f in eval_cols[:1] + eval_cols[len(ks) - 1 : len(ks)] + train_cols[3:5]
        }
    lines = ["| method | seeds | " + " | ".join(n for n, _ in train_cols) + " |", "|---" * (len(train_cols) + 2) + "|"]
    for m, row in rows.items():
        lines.append(f"| {m} | {len(row['seeds'])} | " + " | ".join(_fmt(*row[n]) for n, _ in train_cols) + " |")
    lines += [
        "",
        "| model | seeds | " + " | ".join(n for n, _ in eval_cols) + " |",
        "|---" * (len(eval_cols) + 2) + "|",
    ]
    if base is not None:
        base_cell = {"passk": base}
        lines.append("| untrained | – | " + " | ".join(f"{f(base_cell):.3g}" for _, f in eval_cols) + " |")
    for m, row in rows.items():
        lines.append(f"| {m} | {len(row['seeds'])} | " + " | ".join(_fmt(*row[n]) for n, _ in eval_cols) + " |")
    if paired:
        names = list(next(iter(paired.values())))
        lines += ["", f"| difference to {reference}, paired by seed | " + " | ".join(names) + " |"]
        lines.append("|---" * (len(names) + 1) + "|")
        for m, diffs in paired.items():
            lines.append(f"| {m} − {reference} | " + " | ".join(_fmt(*diffs[n]) for n in names) + " |")
    lines += [
        "",
        f"Mean over seeds ± half-width of the 95% Student-t interval. Training columns from metrics.jsonl (reward = "
        f"accuracy; H = token-weighted policy entropy in nats; α = AER's global coefficient). Held-out: "
        f"{args.eval_per_tier} problems per tier, n = {args.eval_samples} samples each, temperature 1, the training "
        "prompt format, the same sampling seeds for every model. Recipe flags: "
        f"`{' '.join(args.recipe_overrides) or 'none'}`.",
    ]
    table = "\n".join(lines) + "\n"
    out = Path(args.output_dir)
    atomic_write(out / "study.md", table)
    atomic_write(out / "study.json", json.dumps({"cells": cells, "base": base, "rows": rows, "paired": paired}))
    plot(cells, base, out / "figure.png", ks)
    return rows


def plot(cells: list[dict], base: dict | None, path: Path, ks) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(c["method"] for c in cells))
    color = {m: f"C{i}" for i, m in enumerate(methods)}
    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    panels = [
        (axes[0, 0], "reward", "training reward (accuracy)"),
        (axes[0, 1], "entropy", "policy entropy (nats/token)"),
        (axes[0, 2], "alpha", "AER global coefficient α"),
        (axes[0, 3], "hard_share", "share of completions in groups with g < ρ"),
        (axes[1, 0], "length", "mean completion length (tokens)"),
    ]
    for ax, key, title in panels:
        for m in methods:
            curves = [dict(c["curves"][key]) for c in cells if c["method"] == m and c["curves"][key]]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(cv) for cv in curves)))
            values = [[cv[s] for cv in curves] for s in steps]
            ax.plot(steps, [statistics.fmean(v) for v in values], color=color[m], label=f"{m} ({len(curves)} seeds)")
            ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], color=color[m], alpha=0.15)
        ax.set_title(title)
        ax.set_xlabel("step")
    for m in methods:
        targets = [c["target"] for c in cells if c["method"] == m and c["target"] == c["target"]]
        if targets and m.startswith("aer"):
            axes[0, 1].axhline(statistics.fmean(targets), color=color[m], ls="--", lw=1, label=f"H* = τ·H0 ({m})")
    for ax in (axes[0, 0], axes[0, 1], axes[0, 2]):
        ax.legend(fontsize=8)
    ax = axes[1, 1]
    if base is not None:
        ax.plot(ks, [100 * base[f"pass@{k}"] for k in ks], marker="o", color="gray", label="untrained")
    for m in methods:
        mine = [c for c in cells if c["method"] == m and c.get("passk")]
        if mine:
            stats = [interval([100 * c["passk"][f"pass@{k}"] for c in mine]) for k in ks]
            ax.errorbar(
                ks,
                [s[0] for s in stats],
                yerr=[0 if math.isnan(s[1]) else s[1] for s in stats],
                marker="o",
                capsize=3,
                color=color[m],
                label=m,
            )
    ax.set_xscale("log", base=2)
    ax.set_title("held-out pass@k (%), 95% interval over seeds")
    ax.set_xlabel("k")
    ax.legend(fontsize=8)
    ax = axes[1, 2]
    names = (["untrained"] if base is not None else []) + methods
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        if name == "untrained":
            means, errs, c = [100 * base["per_group"][t]["pass@1"] for t in TIER_NAMES], None, "gray"
        else:
            mine = [cell for cell in cells if cell["method"] == name and cell.get("passk")]
            if not mine:
                continue
            stats = [interval([100 * cell["passk"]["per_group"][t]["pass@1"] for cell in mine]) for t in TIER_NAMES]
            means, errs = [s[0] for s in stats], [0 if math.isnan(s[1]) else s[1] for s in stats]
            c = color[name]
        ax.bar(
            [j + i * width for j in range(len(TIER_NAMES))], means, width, yerr=errs, capsize=3, color=c, label=name
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(TIER_NAMES))], list(TIER_NAMES.values()), fontsize=8)
    ax.set_title("held-out pass@1 per tier (%)")
    ax.legend(fontsize=8)
    ax = axes[1, 3]
    for m in methods:
        for t, style in zip(TIER_NAMES, ["-", "--", ":", "-."]):
            curves = [dict(c["curves"][f"tier{t}"]) for c in cells if c["method"] == m and c["curves"][f"tier{t}"]]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(cv) for cv in curves)))
            # a step's 4 prompts rarely cover every tier: a 5-step running mean over the seeds' mean
            values = [statistics.fmean(cv[s] for cv in curves) for s in steps]
            smooth = [statistics.fmean(values[max(0, i - 4) : i + 1]) for i in range(len(values))]
            ax.plot(steps, smooth, color=color[m], ls=style, label=f"{m} {TIER_NAMES[t]}")
    ax.set_title("training accuracy per tier (5-step running mean)")
    ax.set_xlabel("step")
    ax.legend(fontsize=6, ncol=2)
    fig.suptitle("SmolLM2-135M-Instruct on the arithmetic tiers (2-shot chat prompts): mean over seeds, min–max band")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--methods", nargs="+", default=["grpo", "aer"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--output_dir", default="runs/real")
    parser.add_argument("--recipes_dir", default=str(RECIPES), help="one <method>.yaml per method")
    parser.add_argument("--eval_per_tier", type=int, default=16, help="held-out problems per tier")
    parser.add_argument("--eval_samples", type=int, default=16, help="samples per held-out problem (n of pass@k)")
    parser.add_argument("--no_eval", action="store_true", help="train only (evaluate later)")
    parser.add_argument("--aggregate_only", action="store_true", help="table and figure from finished cells")
    args, args.recipe_overrides = parser.parse_known_args(argv)
    clash = [a for a in args.recipe_overrides if a.split("=")[0] in ("--output_dir", "--seed", "--config")]
    if clash:
        parser.error(f"{clash[0]} is set per cell by this script")
    missing = [m for m in args.methods if not (Path(args.recipes_dir) / f"{m}.yaml").is_file()]
    if missing:
        parser.error(f"no recipe for {missing} in {args.recipes_dir}")
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)

    evaluate_models = not args.no_eval and not args.aggregate_only
    base = None
    if evaluate_models:
        from ..gguf import convert_gguf

        base = held_out(args, str(convert_gguf()))
        print(f"untrained: held-out pass@1 {100 * base['pass@1']:.1f}%", flush=True)
    cells = []
    for seed in args.seeds:  # seed-major: an interrupted study has every method at the same number of seeds
        for method in args.methods:
            folder = cell_dir(method, seed, args)
            if args.aggregate_only:
                if not (folder / "run.json").exists():
                    continue
            else:
                run = train_cell(method, seed, args)
                print(f"{method} seed {seed}: trained ({run['seconds']:.0f} s)", flush=True)
            cell = {"method": method, "seed": seed, **training_summary(read_metrics(folder / "metrics.jsonl"))}
            if evaluate_models:
                cell["passk"] = held_out(args, str(folder))
            elif (folder / "passk.json").exists():
                cell["passk"] = json.loads((folder / "passk.json").read_text())
            if "passk" in cell:
                atomic_write(folder / "passk.json", json.dumps(cell["passk"]))
                print(f"{method} seed {seed}: held-out pass@1 {100 * cell['passk']['pass@1']:.1f}%", flush=True)
            cells.append(cell)
    if args.aggregate_only:
        base_path = Path(args.output_dir) / "base_passk.json"
        base = json.loads(base_path.read_text()) if base_path.exists() else None
    elif base is not None:
        atomic_write(Path(args.output_dir) / "base_passk.json", json.dumps(base))
    if not cells:
        raise SystemExit(f"no finished cell under {Path(args.output_dir) / 'cells'} for these settings")
    if any("passk" not in c for c in cells):
        cells_eval = [c for c in cells if "passk" in c]
        print(f"{len(cells) - len(cells_eval)} cells without held-out results are left out of the table", flush=True)
        cells = cells_eval or cells
    rows = aggregate(cells, base, args) if all("passk" in c for c in cells) else {}
    if rows:
        print((Path(args.output_dir) / "study.md").read_text())
    return rows


def cli() -> None:
    """The console script `aer-real-study`: main's return value is for Python callers, not an exit status."""
    main()


if __name__ == "__main__":
    cli()
