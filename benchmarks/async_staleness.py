"""AER under stale rollouts, a pilot on this CPU: the CPU recipe `smollm2_135m_instruct/gsm8k/aer_async` (SmolLM2-135M-
Instruct on GSM8K through TRL's asynchronous GRPO, the local rollout worker sampling while the trainer trains) run as
async GRPO (`method: async_grpo`, AER's measurements on, no bonus) and as AER, one after the other, same seed and
budget. Printed and written as JSON: per lag (policy versions between sampling and training) the samples trained and
their mean entropy under the current policy, against lag 0's (on-policy) at the same steps; α and H*; and each run's
trained tokens per second (the same worker, so AER's cost over async GRPO in one run).

    python benchmarks/async_staleness.py --max_steps 20 --json results/async_staleness/pilot.json

A pilot, one seed: it measures the gap the controller sees, it is not the study (docs/design.md §5b). The cost of
AER's bonus against async GRPO, one pair of runs per seed, the order alternating (docs/benchmarks.md):

    python benchmarks/async_staleness.py --recipe recipes/smollm2_135m_instruct/arithmetic/aer_async.yaml \
        --seeds 0 1 --max_steps 10 --aer_alpha_init 0.01 --json results/async_staleness/throughput.json

    python benchmarks/async_staleness.py --records results/async_staleness/study

reads the pre-registered study's records instead (no training): per arm the samples trained at each lag, at every
step that trained several lags how far each older lag's entropy (under the current policy) sits from the freshest
lag's, and each cell's trainer throughput with AER's over async GRPO's, paired by seed and staleness. Written to
`<records>/staleness.json` and printed as the markdown tables docs/design.md §5b shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

RECIPE = "smollm2_135m_instruct/gsm8k/aer_async"


def run(method: str, recipe: str, out: Path, max_steps: int, seed: int, extra: list[str]) -> dict:
    from aer_bench.run import main  # the library's command line, with the bench's sources (the arithmetic task)
    from aer_trl.metrics import read_metrics

    start = time.perf_counter()
    argv = ["--config", recipe, "--method", method, "--output_dir", str(out), "--max_steps", str(max_steps),
            "--seed", str(seed), "--aer_measurements", "true", *extra]  # fmt: skip
    if method == "async_grpo":  # the recipe's AER switches are refused by a method without AER's bonus
        argv += ["--aer_alpha_init", "0"]
    trainer = main(argv)
    trainer.rollout_worker.stop()
    wall = time.perf_counter() - start
    logs = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    lags: dict[int, dict] = {}
    for r in logs:
        for key, value in r.items():
            parts = key.split("/")
            if len(parts) == 4 and parts[:2] == ["aer", "lag"] and value is not None:
                lags.setdefault(int(parts[2]), {}).setdefault(parts[3], []).append((r["step"], value))
    on_policy = dict(lags.get(0, {}).get("entropy", []))
    by_lag = {}
    for lag, series in sorted(lags.items()):
        ent = dict(series.get("entropy", []))
        shared = sorted(set(ent) & set(on_policy))
        by_lag[lag] = {
            "samples": sum(v for _, v in series.get("samples", [])),
            "entropy_mean": statistics.fmean(ent.values()) if ent else None,
            "gap_to_lag0_same_steps": statistics.fmean(ent[s] - on_policy[s] for s in shared)
            if shared and lag
            else None,
            "steps_with_lag0": len(shared),
        }
    tok_s = [r["perf/trained_tok_s_wall_clock"] for r in logs if r.get("perf/trained_tok_s_wall_clock")]
    fwd_bwd = [r["perf/forwarded_tok_s_fwd_bwd"] for r in logs if r.get("perf/forwarded_tok_s_fwd_bwd")]
    return {
        "method": method,
        "steps": len(logs),
        "wall_s": wall,
        "trained_tok_s_median": statistics.median(tok_s) if tok_s else None,
        "fwd_bwd_tok_s_median": statistics.median(fwd_bwd) if fwd_bwd else None,
        "entropy": [r.get("aer/entropy") for r in logs],
        "alpha": [r.get("aer/alpha") for r in logs],
        "target": logs[-1].get("aer/target_entropy") if logs else None,
        "reward": [r.get("reward") for r in logs],
        "staleness_mean": statistics.fmean(r["sample/staleness_mean"] for r in logs if "sample/staleness_mean" in r),
        "by_lag": by_lag,
    }


def yaml_method(recipe: str) -> str:
    """The `method:` of a recipe (a path, or a shipped name)."""
    import yaml

    from aer_trl.app.resources import resolve_recipe

    path = Path(recipe) if Path(recipe).is_file() else resolve_recipe(recipe)
    return yaml.safe_load(Path(path).read_text())["method"]


def lag_series(rows: list[dict]) -> dict[int, dict[int, tuple[float, float]]]:
    """step -> lag -> (samples, entropy under the current policy) from a run's logged `aer/lag/<k>/*`."""
    steps: dict[int, dict[int, tuple[float, float]]] = {}
    for r in rows:
        for key, value in r.items():
            parts = key.split("/")
            if len(parts) == 4 and parts[:2] == ["aer", "lag"] and parts[3] == "samples" and value:
                lag = int(parts[2])
                steps.setdefault(r["step"], {})[lag] = (value, r[f"aer/lag/{lag}/entropy"])
    return steps


def study_records(records: Path) -> dict:
    """The study's lag and throughput figures from its records (`<records>/cells/<arm>/seed<k>/metrics.jsonl`)."""
    from aer_bench.stats import interval
    from aer_trl.metrics import read_metrics

    cells = {}
    for path in sorted(records.glob("cells/*/seed*/metrics.jsonl")):
        rows = [r for r in read_metrics(path) if "loss" in r]
        cells[(path.parent.parent.name, int(path.parent.name.removeprefix("seed")))] = rows
    arms: dict[str, dict] = {}
    for (arm, seed), rows in sorted(cells.items()):
        out = arms.setdefault(arm, {"samples_by_lag": {}, "gaps": {}, "mixed_steps": 0, "cells": {}})
        series = lag_series(rows)
        for by_lag in series.values():
            for lag, (n, _) in by_lag.items():
                out["samples_by_lag"][lag] = out["samples_by_lag"].get(lag, 0) + n
            if len(by_lag) > 1:
                out["mixed_steps"] += 1
                fresh = min(by_lag)
                for lag, (_, entropy) in by_lag.items():
                    if lag != fresh:
                        out["gaps"].setdefault(f"{lag}-{fresh}", []).append(entropy - by_lag[fresh][1])
        later = rows[1:]  # step 1 waits for the first rollouts and warms up
        out["cells"][seed] = {
            key: statistics.median(r[key] for r in later if r.get(key))
            for key in ("perf/forwarded_tok_s_fwd_bwd", "perf/trained_tok_s_wall_clock", "perf/step_s")
        }
    for out in arms.values():
        out["gaps"] = {
            k: {"mean": interval(v)[0], "ci95": interval(v)[1], "steps": len(v), "relative_to": "fresher lag"}
            for k, v in sorted(out["gaps"].items())
        }
    ratios = {}
    for arm in arms:
        if not arm.startswith("async-aer-"):
            continue
        base = arm.replace("async-aer-", "async-grpo-")
        for key in ("perf/forwarded_tok_s_fwd_bwd", "perf/trained_tok_s_wall_clock"):
            pairs = [arms[arm]["cells"][s][key] / arms[base]["cells"][s][key] for s in arms[arm]["cells"]
                     if s in arms.get(base, {}).get("cells", {})]  # fmt: skip
            if pairs:
                mean, half = interval(pairs)
                ratios.setdefault(arm.removeprefix("async-aer-"), {})[key] = {
                    "mean": mean,
                    "ci95": half,
                    "n": len(pairs),
                }
    return {"arms": arms, "aer_over_async_grpo": ratios}


def print_study(result: dict) -> None:
    head = ("arm", "samples by lag (versions behind the trainer)", "steps with several lags",
            "entropy, older minus fresher lag at the same step (nats, 95% CI, steps)")  # fmt: skip
    print("| " + " | ".join(head) + " |\n" + "|---" * len(head) + "|")
    for arm, out in result["arms"].items():
        lags = ", ".join(f"{lag}: {n:.0f}" for lag, n in sorted(out["samples_by_lag"].items()))
        gaps = "; ".join(f"lag {k}: {g['mean']:+.3f} ± {g['ci95']:.3f} ({g['steps']})" for k, g in out["gaps"].items())
        print(f"| {arm} | {lags} | {out['mixed_steps']} | {gaps or '–'} |")
    head = ("max_staleness", "AER / async GRPO, forward+backward tokens/s", "trained tokens/s (wall clock)")
    print("\n| " + " | ".join(head) + " |\n" + "|---" * len(head) + "|")
    for staleness, r in result["aer_over_async_grpo"].items():
        keys = ("perf/forwarded_tok_s_fwd_bwd", "perf/trained_tok_s_wall_clock")
        cells = [f"{r[k]['mean']:.3f} ± {r[k]['ci95']:.3f} (n={r[k]['n']})" for k in keys]
        print(f"| {staleness} | {cells[0]} | {cells[1]} |")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default=None, help="a study's records folder: analyse them, train nothing")
    parser.add_argument("--max_steps", type=int, default=20)
    parser.add_argument("--recipe", default=RECIPE, help="an async recipe: a shipped name or a path")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one pair of runs per seed")
    parser.add_argument("--aer_method", default=None, help="AER's method (default: the recipe's)")
    parser.add_argument("--output_dir", default="runs/async_staleness")
    parser.add_argument("--json", default=None)
    args, extra = parser.parse_known_args(argv)
    if args.records:
        result = study_records(Path(args.records))
        Path(args.records, "staleness.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print_study(result)
        return result
    import torch
    import transformers
    import trl

    env = {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
           "cpu_threads": torch.get_num_threads(), "cpus": os.cpu_count()}  # fmt: skip
    results = {"recipe": args.recipe, "max_steps": args.max_steps, "seeds": args.seeds, "overrides": extra, "env": env}
    for i, seed in enumerate(args.seeds):
        # one pair per seed, the order alternating so that a drift of the machine's speed falls on both methods
        order = [("async_grpo", "async_grpo"), ("aer", args.aer_method)]
        for label, method in order if i % 2 == 0 else order[::-1]:
            method = method or yaml_method(args.recipe)
            out = Path(args.output_dir) / f"{label}-seed{seed}"
            r = results.setdefault(label, {})[seed] = run(method, args.recipe, out, args.max_steps, seed, extra)
            print(f"\n{label} ({method}), seed {seed}: {r['steps']} steps, {r['wall_s']:.0f} s, trained tokens/s "
                  f"(median) {r['trained_tok_s_median']}, forward+backward tokens/s (median) "
                  f"{r['fwd_bwd_tok_s_median']}, mean staleness at the queue {r['staleness_mean']:.2f}")  # fmt: skip
            print("  lag | samples | entropy (current policy) | minus lag 0 at the same steps (steps)")
            for lag, row in r["by_lag"].items():
                gap = row["gap_to_lag0_same_steps"]
                print(f"  {lag:>3} | {row['samples']:>7.0f} | {row['entropy_mean']:.4f} | "
                      + ("–" if gap is None else f"{gap:+.4f} ({row['steps_with_lag0']})"))  # fmt: skip
    for key in ("trained_tok_s_median", "fwd_bwd_tok_s_median"):
        ratios = [results["aer"][s][key] / results["async_grpo"][s][key] for s in args.seeds
                  if results["aer"][s][key] and results["async_grpo"][s][key]]  # fmt: skip
        results[f"aer_over_async_grpo_{key}"] = ratios
        print(f"AER / async GRPO, {key}: {', '.join(f'{r:.3f}' for r in ratios)} (one ratio per seed)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
