"""`make demo`: GRPO and AER on the laptop lab from the same warm start, seed and budget.

Writes, under --output_dir: one folder per run (model, metrics.jsonl), `figure.png` (entropy with H*, α, reward,
accuracy per tier, response length, held-out pass@k), `passk.md` / `results.json`, and prints the table and timings.

    python -m aer_bench.studies.demo --output_dir runs/demo          # ~3 minutes on 2 CPU cores (warm start included)
    python -m aer_bench.studies.demo --seeds 0 1 2                       # several seeds (intervals: lab_ablation.py)
    python -m aer_bench.studies.demo --quick                             # the whole pipeline in seconds (tests)
    python -m aer_bench.studies.demo --methods grpo clip_higher ent_adv aer --output_dir runs/methods   # any methods
    python -m aer_bench.studies.demo --learning_rate 1e-4 --max_steps 600   # any other flag goes to every recipe
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from transformers.trainer_callback import ProgressCallback

from aer_bench.lab.tasks import make_arithmetic_dataset
from aer_bench.training import train_recipe
from aer_trl.app.resources import recipes_dir
from aer_trl.methods import method_title
from aer_trl.metrics import read_metrics

from .report import evaluate_pass_at_k, passk_markdown, plot_entropy, plot_runs, summary_markdown

RECIPES = recipes_dir("lab", "aer_bench")  # shipped inside the package: the demo runs from a wheel too
# a lab run in seconds (the tiny warm start, 64 problems, 16 completions a step): checks a pipeline, proves nothing
QUICK_OVERRIDES = [
    "--lab_warm_start",
    "tiny",
    "--lab_train_size",
    "64",
    "--per_device_train_batch_size",
    "16",
    "--num_generations",
    "4",
    "--disable_tqdm",
    "true",
    "--logging_steps",
    "1",
]


class PhaseProgress(ProgressCallback):
    """transformers' progress bar, named for the demo's phase, with a few readable numbers (reward, entropy, α) in
    place of every log's ~60-key dict."""

    KEYS = (("reward", "reward"), ("aer/entropy", "H"), ("aer/alpha", "α"), ("loss", "loss"))

    def __init__(self, phase: str):
        super().__init__()
        self.phase = phase

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        if self.training_bar is not None:
            self.training_bar.set_description(self.phase)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.training_bar is not None and logs:
            shown = {short: logs[key] for key, short in self.KEYS if isinstance(logs.get(key), (int, float))}
            self.training_bar.set_postfix({k: f"{v:.3g}" for k, v in shown.items()}, refresh=False)


def busy_cores_advice() -> str | None:
    """Advice when the cores are busy (the 1-minute load above half the cores): the demo's times assume idle cores,
    and two jobs that each take every core slow both ~10x (docs/lab.md)."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    if load <= cores / 2 or os.environ.get("AER_CPU_THREADS"):
        return None
    return (
        f"note: the machine is busy (load {load:.1f} on {cores} cores). The demo takes ~3 minutes on idle cores; "
        "beside another job, whose threads and this one's spin against each other, it can take 10x longer. Let the "
        "other job finish, or give each job a share: AER_CPU_THREADS=1 make demo (docs/lab.md, 'Where a step's time "
        "goes')."
    )


def held_out_set(per_tier: int, train_prompts: set[str]):
    """The same problems for every run: per tier, unseen in training where the tier has unseen problems left
    (the 1-digit tiers have only 100 and 64 distinct problems, all seen in training: there, a fresh draw)."""
    from datasets import concatenate_datasets

    from aer_bench.lab.tasks import TIERS

    parts = []
    for tier in TIERS:
        try:
            parts.append(make_arithmetic_dataset(per_tier, seed=10_000 + tier, tiers=[tier], exclude=train_prompts))
        except ValueError:
            parts.append(make_arithmetic_dataset(per_tier, seed=10_000 + tier, tiers=[tier]))
    return concatenate_datasets(parts)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--output_dir", default="runs/demo")
    parser.add_argument("--methods", nargs="+", default=["grpo", "aer"], help="methods: <recipes_dir>/<method>.yaml")
    parser.add_argument("--recipes_dir", default=str(RECIPES), help="the lab recipes (one per method)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--max_steps", type=int, default=None, help="override the recipes' budget")
    parser.add_argument("--eval_per_tier", type=int, default=64, help="held-out problems per difficulty tier")
    parser.add_argument("--eval_samples", type=int, default=16, help="samples per problem (n of pass@k)")
    parser.add_argument("--lab_cache_dir", default="runs/lab")
    parser.add_argument("--quick", action="store_true", help="tiny model and budget: checks the pipeline only")
    args, recipe_overrides = parser.parse_known_args(argv)  # any other flag goes to every recipe (e.g. --lr ...)

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    overrides_common = ["--lab_cache_dir", args.lab_cache_dir, *recipe_overrides]
    if args.quick:
        overrides_common += QUICK_OVERRIDES
        args.max_steps = args.max_steps or 8  # two rollout batches of 4 steps: α is updated once
        args.eval_per_tier, args.eval_samples = min(args.eval_per_tier, 2), min(args.eval_samples, 4)
    if args.max_steps:
        overrides_common += ["--max_steps", str(args.max_steps)]

    advice = busy_cores_advice()
    if advice:
        print(advice, flush=True)
    phases = 2 + len(args.seeds) * len(args.methods)
    phase = iter(range(1, phases + 1))

    # the warm start is built (or found in the cache) first and timed on its own, not charged to the first method
    from aer_bench.lab.warmstart import WARM_START_PRESETS, build_warm_start

    print(f"\n== {next(phase)}/{phases} warm start: the lab's tiny model fine-tuned (SFT) on arithmetic, once; "
          f"cached in {args.lab_cache_dir} ==", flush=True)  # fmt: skip
    start = time.perf_counter()
    preset = (
        overrides_common[overrides_common.index("--lab_warm_start") + 1]
        if "--lab_warm_start" in overrides_common
        else "default"
    )
    build_warm_start(WARM_START_PRESETS[preset], cache_dir=args.lab_cache_dir, callbacks=[PhaseProgress("SFT")])
    timings["warm start"] = time.perf_counter() - start

    runs: dict[str, list[list[dict]]] = {m: [] for m in args.methods}
    model_dirs: dict[str, list[Path]] = {m: [] for m in args.methods}
    train_prompts: set[str] = set()
    for seed in args.seeds:
        for method in args.methods:
            recipe = Path(args.recipes_dir) / f"{method}.yaml"
            if not recipe.exists():
                raise FileNotFoundError(f"--methods: no recipe {recipe} for method {method!r}")
            run_dir = out / f"{method}-seed{seed}"
            label = f"{method_title(method)} (seed {seed})"
            print(f"\n== {next(phase)}/{phases} {label}: training into {run_dir} ==", flush=True)
            start = time.perf_counter()
            script_args, training_args, _ = train_recipe(
                recipe,
                [*overrides_common, "--output_dir", str(run_dir), "--seed", str(seed)],
                callbacks=[PhaseProgress(label)],
            )
            timings[f"{method}-seed{seed}"] = time.perf_counter() - start
            model_dirs[method].append(run_dir)
            runs[method].append(read_metrics(run_dir / "metrics.jsonl"))
            train_prompts |= set(
                make_arithmetic_dataset(script_args.lab_train_size, seed=script_args.lab_data_seed)["prompt"]
            )

    held_out = held_out_set(args.eval_per_tier, train_prompts)
    print(f"\n== {next(phase)}/{phases} evaluation: held-out pass@k, {len(held_out)} problems x {args.eval_samples} "
          "samples per model ==", flush=True)  # fmt: skip
    start = time.perf_counter()
    results: dict[str, list[dict]] = {m: [] for m in args.methods}
    for method, dirs in model_dirs.items():
        for seed, run_dir in zip(args.seeds, dirs):
            results[method].append(
                evaluate_pass_at_k(run_dir, held_out, n=args.eval_samples, seed=seed, disable_tqdm=args.quick)
            )
    timings["evaluation"] = time.perf_counter() - start

    figure = plot_runs(runs, results, out / "figure.png")
    tiers = sorted(k for k in next(iter(results.values()))[0] if k != "all")
    table = "\n\n".join(
        [f"### held-out pass@k (%), all tiers\n\n{passk_markdown(results)}"]
        + [f"### {t}\n\n{passk_markdown(results, t)}" for t in tiers]
    )
    (out / "passk.md").write_text(table + "\n")
    summary_table = summary_markdown(results, runs, timings)
    (out / "summary.md").write_text(summary_table + "\n")
    plot_entropy(runs, out / "entropy.png")
    summary = {"seeds": args.seeds, "timings_s": timings, "passk": results, "figure": str(figure)}
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    print(table)
    print("\n### summary (held-out pass@k %, final training entropy, training seconds)\n\n" + summary_table)
    print("timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    written = ["figure.png", "entropy.png", "passk.md", "summary.md", "results.json"]
    written += [f"{m}-seed{seed}/ (model, metrics.jsonl)" for seed in args.seeds for m in args.methods]
    print(f"\nwritten to {out}/: " + ", ".join(written))
    print(f"figure: {figure} (what it shows: docs/lab.md)")
    return summary


def cli() -> None:
    """The console script `aer-lab-demo`: main's return value is for Python callers, not an exit status."""
    main()


if __name__ == "__main__":
    cli()
