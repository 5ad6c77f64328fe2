"""The study's figure: training curves, held-out pass@k and per-tier accuracy, mean over seeds (matplotlib)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from ...stats import interval
from .spec import TIER_NAMES


def seed_count(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def tier_curve(curves: list[dict[int, float]], window: int = 5) -> tuple[list[int], list[float]]:
    """One tier's training accuracy over steps, mean over seeds. A step's few prompts rarely cover every tier, so
    each seed's value at step s is the mean of its own observations in steps s-window+1..s, and a step is drawn
    where every seed has one (a seed that skips a tier at some step does not end the curve there)."""
    if not curves:
        return [], []
    steps, values = [], []
    for s in sorted(set().union(*curves)):
        per_seed = [[v for step, v in cv.items() if s - window < step <= s] for cv in curves]
        if all(per_seed):
            steps.append(s)
            values.append(statistics.fmean(statistics.fmean(v) for v in per_seed))
    return steps, values


def percent_errors(stats: list[tuple[float, float]]) -> list[list[float]]:
    """Error bars of (mean, half-width) percentages, cut at 0 and 100: an interval over few seeds can reach past what
    a share can be, and the bar shows only the part that can happen. NaN half-widths (one seed) draw none."""
    lower = [0.0 if math.isnan(h) else min(h, m) for m, h in stats]
    upper = [0.0 if math.isnan(h) else min(h, 100.0 - m) for m, h in stats]
    return [lower, upper]


def _unrecorded(ax) -> None:
    ax.text(0.5, 0.5, "not in these runs' logs", transform=ax.transAxes, ha="center", va="center", color="gray")


def plot(cells: list[dict], base: dict | None, path: Path, ks, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(c["method"] for c in cells))
    color = {m: f"C{i}" for i, m in enumerate(methods)}
    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    panels = [
        (axes[0, 0], "reward", "training reward (accuracy)"),
        (axes[0, 1], "entropy", "policy entropy (nats/token)"),
        (axes[0, 2], "alpha", "entropy coefficient: AER's α (TRL's entropy_coef)"),
        (axes[0, 3], "hard_share", "share of completions in groups with g < ρ"),
        (axes[1, 0], "length", "mean completion length (tokens)"),
    ]
    for ax, key, panel_title in panels:
        if not any(c["curves"].get(key) for c in cells):
            _unrecorded(ax)
        for m in methods:
            curves = [dict(c["curves"][key]) for c in cells if c["method"] == m and c["curves"].get(key)]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(cv) for cv in curves)))
            values = [[cv[s] for cv in curves] for s in steps]
            ax.plot(
                steps, [statistics.fmean(v) for v in values], color=color[m], label=f"{m} ({seed_count(len(curves))})"
            )
            ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], color=color[m], alpha=0.15)
        ax.set_title(panel_title)
        ax.set_xlabel("step")
    targets = {}
    for c in cells:
        if c["target"] == c["target"]:
            targets.setdefault(round(c["target"] / c["h0"], 3) if c["h0"] else None, []).append(c["target"])
    for tau, values in targets.items():  # one dashed line per τ, at the mean of the seeds' targets
        axes[0, 1].axhline(statistics.fmean(values), color="k", ls="--", lw=1, label=f"H* = {tau}·H0 (mean)")
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
                yerr=percent_errors(stats),
                marker="o",
                capsize=3,
                color=color[m],
                label=m,
            )
    ax.set_xscale("log", base=2)
    ax.set_title("held-out pass@k (%), 95% interval over seeds")
    ax.set_xlabel("k")
    if ax.get_legend_handles_labels()[0]:  # empty until a model is evaluated
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
            means, errs = [s[0] for s in stats], percent_errors(stats)
            c = color[name]
        ax.bar(
            [j + i * width for j in range(len(TIER_NAMES))], means, width, yerr=errs, capsize=3, color=c, label=name
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(TIER_NAMES))], list(TIER_NAMES.values()), fontsize=8)
    ax.set_title("held-out pass@1 per tier (%)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax = axes[1, 3]
    if not any(c["curves"].get(f"tier{t}") for c in cells for t in TIER_NAMES):
        _unrecorded(ax)
    styles = dict(zip(TIER_NAMES, ["-", "--", ":", "-."]))
    for m in methods:
        for t, style in styles.items():
            curves = [dict(c["curves"][f"tier{t}"]) for c in cells if c["method"] == m and c["curves"].get(f"tier{t}")]
            steps, values = tier_curve(curves)
            ax.plot(steps, values, color=color[m], ls=style)
    ax.set_title("training accuracy per tier (each seed's last 5 steps)")
    ax.set_xlabel("step")
    from matplotlib.lines import Line2D

    # colour = arm, line style = tier: two short legends instead of one entry per (arm, tier)
    arms = ax.legend([Line2D([], [], color=color[m]) for m in methods], methods, fontsize=6, loc="lower left")
    ax.add_artist(arms)
    tiers = [Line2D([], [], color="k", ls=st) for st in styles.values()]
    ax.legend(tiers, list(TIER_NAMES.values()), fontsize=6, loc="lower right")
    fig.suptitle(
        f"{title or 'SmolLM2-135M-Instruct'}: arithmetic tiers, 2-shot chat prompts; mean over seeds, min–max band"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
