"""Reports of an evaluation folder: `metrics.json` (merged over runs), `table.md` (the paper's Table 1 layout) and
`passk.png`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ...atomic import atomic_write
from ..extras import available, missing_message, require
from .args import EvalArguments

logger = logging.getLogger(__name__)


def write_reports(args: EvalArguments, metrics: dict) -> dict:
    """Merge this run's entries into `metrics.json` (other models and benchmarks stay), then table and plot."""
    out = Path(args.output_dir)
    merged: dict = {}
    path = out / "metrics.json"
    if path.exists():
        try:
            merged = json.loads(path.read_text())
        except json.JSONDecodeError:
            logger.warning("%s is not valid JSON; it is rewritten from this run's results", path)
    for model, per_bench in metrics.items():
        merged.setdefault(model, {}).update(per_bench)
    atomic_write(path, json.dumps(merged, indent=2))
    atomic_write(out / "table.md", markdown_table(merged, args) + "\n")
    if available("matplotlib"):
        plot_pass_at_k(merged, out / "passk.png")
    else:  # the numbers are all in metrics.json and table.md; the figure needs the plots extra
        logger.warning("passk.png not drawn: %s", missing_message("matplotlib"))
    return merged


def _stem(bench: str) -> str:
    return Path(bench).stem


def _label(model_name: str, args: EvalArguments) -> str:
    """A model's row name: its `model_labels` entry (by its place in `models`), else its folder's name."""
    if args.model_labels and model_name in args.models:
        return args.model_labels[args.models.index(model_name)]
    return Path(model_name).name


def appendix_table(metrics: dict, args: EvalArguments) -> str:
    """The paper's appendix table: rows the models (Base, GRPO, Clip-Higher, AER); for each benchmark mean@n and
    pass@n in %, n that benchmark's number of samples (32 on AIME, 8 on MATH500 and AMC23), then the cells' sources."""
    benches = list(dict.fromkeys(b for per_bench in metrics.values() for b in per_bench))
    n_of = {b: next(per[b]["num_samples"] for per in metrics.values() if b in per) for b in benches}
    head = "| Method | " + " | ".join(f"{_stem(b)} mean@{n_of[b]} | {_stem(b)} pass@{n_of[b]}" for b in benches) + " |"
    lines, notes = [head, "|---" * (2 * len(benches) + 1) + "|"], []
    for model_name, per_bench in metrics.items():
        cells = []
        for b in benches:
            m = per_bench.get(b)
            if m is None or m["num_samples"] != n_of[b] or f"pass@{n_of[b]}" not in m:
                cells += ["–", "–"]  # missing, or scored from another number of samples: not this column's
                continue
            cells += [f"{100 * m['mean@n']:.1f}", f"{100 * m[f'pass@{n_of[b]}']:.1f}"]
            fp = m["fingerprint"]
            notes.append(
                f"| {_label(model_name, args)} | {_stem(b)} | {m['num_problems']} | {m['num_samples']} | "
                f"{fp['temperature']} | {fp['max_new_tokens']} | {fp['id']} |"
            )
        lines.append(f"| {_label(model_name, args)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "mean@n: the mean accuracy over the n samples of each problem; pass@n: the share of problems solved by at "
        "least one of them; in %.",
        "",
        "| Method | benchmark | problems | n | temperature | max new tokens | fingerprint |",
        "|---|---|---|---|---|---|---|",
        *notes,
    ]
    return "\n".join(lines)


def markdown_table(metrics: dict, args: EvalArguments) -> str:
    """Rows: models; for each benchmark and their average, pass@k in % for every k of `k_list` (or pass@1 and
    pass@report_k where `report_k` is set: the paper's Table 1), then what each cell was computed from (n, problems).
    `table: appendix`: `appendix_table`."""
    if args.table == "appendix":
        return appendix_table(metrics, args)
    ks = sorted({1, args.report_k}) if args.report_k else sorted(set(args.k_list))
    benches = list(dict.fromkeys(b for per_bench in metrics.values() for b in per_bench))
    head = "| Method | " + " | ".join(f"{_stem(b)} pass@{j}" for b in benches for j in ks)
    lines = [head + "".join(f" | Avg. pass@{j}" for j in ks) + " |", "|---" * ((len(benches) + 1) * len(ks) + 1) + "|"]
    notes = []
    for model_name, per_bench in metrics.items():
        cells, per_k = [], {j: [] for j in ks}
        for b in benches:
            m = per_bench.get(b)
            if m is None:
                cells += ["–"] * len(ks)
                continue
            for j in ks:
                if f"pass@{j}" in m:
                    per_k[j].append(m[f"pass@{j}"])
                    cells.append(f"{100 * per_k[j][-1]:.1f}")
                else:
                    cells.append("–")
            fp = m["fingerprint"]
            notes.append(
                f"| {_label(model_name, args)} | {_stem(b)} | {m['num_problems']} | {m.get('num_samples', '?')} | "
                f"{fp['temperature']} | {fp['max_new_tokens']} | {fp['id']} |"
            )
        avg = [f"{100 * sum(x) / len(x):.1f}" if len(x) == len(benches) else "–" for x in per_k.values()]
        lines.append(f"| {_label(model_name, args)} | " + " | ".join(cells + avg) + " |")
    lines += [
        "",
        f"pass@k in %, unbiased estimator over n samples per problem; averages only over rows with every benchmark "
        f"(k = {', '.join(map(str, ks))}).",
        "",
        "| Method | benchmark | problems | n | temperature | max new tokens | fingerprint |",
        "|---|---|---|---|---|---|---|",
        *notes,
    ]
    return "\n".join(lines)


def plot_pass_at_k(metrics: dict, path: Path) -> Path:
    """pass@k against k (log2 axis), one panel per benchmark; needs the `plots` extra (matplotlib)."""
    matplotlib = require("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = list(dict.fromkeys(b for per_bench in metrics.values() for b in per_bench))
    fig, axes = plt.subplots(1, max(1, len(benches)), figsize=(4.5 * max(1, len(benches)), 3.8), squeeze=False)
    for ax, bench in zip(axes[0], benches):
        for model_name, per_bench in metrics.items():
            m = per_bench.get(bench)
            if m:
                ks = m.get("k_list") or sorted(int(key[5:]) for key in m if key.startswith("pass@"))
                label = f"{Path(model_name).name} (n={m.get('num_samples', '?')}, {m['num_problems']} problems)"
                ax.plot(ks, [100 * m[f"pass@{k}"] for k in ks], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(_stem(bench))
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
