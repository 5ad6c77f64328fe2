"""Held-out pass@k for lab runs, and the demo's figure and tables."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from aer_trl.app.evaluation import passk_summary, sample_completions
from aer_trl.app.rewards import math_accuracy_reward
from aer_trl.methods import method_title

KS = (1, 2, 4, 8, 16)


def evaluate_pass_at_k(
    model_path,
    dataset,
    n: int = 16,
    ks=KS,
    max_new_tokens: int = 12,
    seed: int = 0,
    batch_size: int = 32,
    disable_tqdm: bool = False,
) -> dict:
    """Sample n completions per held-out problem; pass@k overall and per difficulty tier."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    prompts, answers, tiers = list(dataset["prompt"]), list(dataset["answer"]), list(dataset["difficulty"])
    samples = sample_completions(
        model,
        tokenizer,
        prompts,
        n=n,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=batch_size,
        desc=f"pass@k {Path(model_path).name}",
        disable_tqdm=disable_tqdm,
    )
    counts = defaultdict(list)
    for completions, answer, tier in zip(samples, answers, tiers):
        correct = int(sum(r == 1.0 for r in math_accuracy_reward(completions, answer=[answer] * n)))
        counts["all"].append((n, correct))
        counts[f"tier{tier}"].append((n, correct))
    ks = [k for k in ks if k <= n]
    summaries = {group: passk_summary(c, ks) for group, c in counts.items()}  # the harness's scoring path
    return {group: {k: s[f"pass@{k}"] for k in ks} for group, s in summaries.items()}


def passk_markdown(results: dict[str, list[dict]], group: str = "all") -> str:
    """Rows: methods by their registry title (mean over seeds; another label as it is); columns: pass@k in %."""
    first = next(iter(results.values()))[0][group]
    ks = sorted(first)
    lines = ["| method | seeds | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|---|" + "---|" * len(ks)]
    for method, per_seed in results.items():
        means = [sum(r[group][k] for r in per_seed) / len(per_seed) for k in ks]
        label = f"{method_title(method)} (`{method}`)" if method_title(method) != method else method
        lines.append(f"| {label} | {len(per_seed)} | " + " | ".join(f"{100 * m:.1f}" for m in means) + " |")
    return "\n".join(lines)


def _series(records: list[dict], key: str):
    pts = [(r["step"], r[key]) for r in records if r.get(key) is not None and "train_runtime" not in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def _band(seeds: list[list[dict]], key: str):
    """Steps, the mean over seeds and the seeds' min and max, at the steps every seed logged `key`."""
    series = [dict(zip(*_series(records, key))) for records in seeds]
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    values = [[s[x] for s in series] for x in steps]
    return steps, [sum(v) / len(v) for v in values], [min(v) for v in values], [max(v) for v in values]


STYLES = ["-", "--", ":", "-."]  # a tier / a difficulty bucket; the colour is always the method


def plot_runs(
    runs: dict[str, list[list[dict]]], passk: dict[str, list[dict]] | None, path, tau: float | None = None
) -> Path:
    """One PNG that explains itself: entropy (with H*), α, reward, accuracy per tier, response length, held-out
    pass@k, and per difficulty bucket of g (g = 0 / 0 < g < ρ / ρ ≤ g < 1 / g = 1): entropy, share of completions
    and λ. `runs`: each method's metrics records, one list per seed; `passk`: each method's held-out results, one
    per seed. One colour per method in every panel (tiers and buckets are line styles); the mean over seeds with
    the seeds' range shaded where there are several; bounded quantities on their whole range from 0, so run-to-run
    noise is not drawn as an effect; the steps where α = 0 (AER trains exactly as GRPO, so same-seed curves
    coincide) shaded and labelled; the number of seeds in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aer_trl.core_algos import BUCKETS

    fig, axes = plt.subplots(3, 3, figsize=(15, 13))
    colors = {name: f"C{i}" for i, name in enumerate(runs)}
    n_seeds = min(len(seeds) for seeds in runs.values())

    def draw(ax, key, name, seeds, ls="-", label=None):
        xs, mean, low, high = _band(seeds, key)
        if not xs:
            return
        ax.plot(xs, mean, color=colors[name], ls=ls, lw=1.2, label=label if label is not None else name)
        if len(seeds) > 1:
            ax.fill_between(xs, low, high, color=colors[name], alpha=0.15, lw=0)

    # where AER's α is still 0 in every seed, AER's loss is GRPO's: the same seed gives the same curves
    aer_runs = [seeds for name, seeds in runs.items() if name.lower().startswith("aer")]
    first_on = None
    for seeds in aer_runs:
        for records in seeds:
            # the first step with α > 0 or a bonus in a rollout batch (λ uses α at the rollout, between two logs)
            on = min(
                (x for key in ("aer/alpha", "aer/lambda_mean") for x, v in zip(*_series(records, key)) if v > 0),
                default=None,
            )
            if on is not None:
                first_on = on if first_on is None else min(first_on, on)
    panels = [
        (axes[0, 0], "aer/entropy", "policy entropy (nats/token)", None),
        (axes[0, 1], "aer/alpha", "AER global coefficient α", None),
        (axes[0, 2], "reward", "training reward (accuracy)", (0, 1)),
        (axes[1, 1], "completions/mean_length", "mean response length (tokens)", (0, None)),
    ]
    for ax, key, title, ylim in panels:
        for name, seeds in runs.items():
            draw(ax, key, name, seeds)
        ax.set_title(title)
        ax.set_xlabel("step")
        if ylim is not None:
            top = ylim[1] if ylim[1] is not None else 1.3 * max((max(ln.get_ydata()) for ln in ax.lines), default=1)
            ax.set_ylim(ylim[0], top)
    ax = axes[0, 0]
    ax.set_ylim(0, 1.3 * max((max(ln.get_ydata()) for ln in ax.lines), default=1))
    for name, seeds in runs.items():
        targets = [_series(records, "aer/target_entropy")[1] for records in seeds]
        if name.lower().startswith("aer") and all(targets):
            mean = sum(t[-1] for t in targets) / len(targets)
            ax.axhline(mean, color=colors[name], ls="--", lw=1, label=f"H* = τ·H0 ({name})")
    if first_on is not None:
        for ax in (axes[0, 0], axes[0, 1], axes[0, 2], axes[1, 1], axes[1, 0]):
            ax.axvspan(0, first_on, color="0.85", alpha=0.5, lw=0)
        why = "α = 0 until the entropy\nfalls below H*: AER\ntrains exactly as GRPO\n(same seed, same curves)"
        axes[0, 1].text(first_on / 2, 0.5, why, transform=axes[0, 1].get_xaxis_transform(), ha="center", fontsize=8)
    axes[0, 0].legend(fontsize=8)
    axes[0, 1].legend(fontsize=8)
    ax = axes[1, 0]
    for name, seeds in runs.items():
        tiers = sorted({k for records in seeds for r in records for k in r if k.startswith("lab/accuracy_tier")})
        for j, key in enumerate(tiers):
            draw(ax, key, name, seeds, ls=STYLES[j % len(STYLES)], label=f"{name} {key.split('_')[-1]}")
    ax.set_title("training accuracy per difficulty tier (style: tier)")
    ax.set_xlabel("step")
    ax.set_ylim(0, 1)
    if ax.lines:
        ax.legend(fontsize=7, ncol=2)
    ax = axes[1, 2]
    if passk:
        for name, per_seed in passk.items():
            ks = sorted(per_seed[0]["all"])
            values = [[100 * r["all"][k] for r in per_seed] for k in ks]
            mean = [sum(v) / len(v) for v in values]
            if len(per_seed) > 1:
                errors = [[m - min(v) for m, v in zip(mean, values)], [max(v) - m for m, v in zip(mean, values)]]
                ax.errorbar(ks, mean, yerr=errors, marker="o", color=colors.get(name), label=name, capsize=3)
            else:
                ax.plot(ks, mean, marker="o", color=colors.get(name), label=name)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 100)
        ax.legend()
    note = "one seed: a difference here may be noise" if n_seeds == 1 else f"mean over {n_seeds} seeds, bars: range"
    ax.set_title(f"held-out pass@k (%)\n({note})", fontsize=10)
    ax.set_xlabel("k")
    # where the entropy budget goes: per difficulty bucket of the group accuracy g (aer/bucket/<name>/*)
    for ax, metric, title in (
        (axes[2, 0], "entropy", "entropy per difficulty bucket (style: bucket)"),
        (axes[2, 1], "share", "share of completions per bucket"),
        (axes[2, 2], "lambda", "mean λ per bucket (the bonus)"),
    ):
        for name, seeds in runs.items():
            for j, bucket in enumerate(BUCKETS):
                draw(ax, f"aer/bucket/{bucket}/{metric}", name, seeds, ls=STYLES[j], label=f"{name} {bucket}")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylim(bottom=0)
        if ax.lines:
            ax.legend(fontsize=7, ncol=2)
    fig.suptitle(
        " vs ".join(runs) + f" on the laptop lab: {n_seeds} seed{'s' if n_seeds > 1 else ''}. Buckets of the group "
        "accuracy g: unsolved g = 0, hard 0 < g < ρ, learning ρ ≤ g < 1, solved g = 1 (AER's bonus goes to the "
        "first two)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary_markdown(
    results: dict[str, list[dict]], runs: dict[str, list[list[dict]]], timings: dict[str, float]
) -> str:
    """One row per method: held-out pass@1 and pass@8 per tier, the final entropy (means over seeds), training
    time."""
    tiers = sorted(k for k in next(iter(results.values()))[0] if k != "all")
    head = (
        "| method | " + " | ".join(f"{t} p@1 | {t} p@8" for t in tiers) + " | all p@1 | all p@8 | final H | time (s) |"
    )
    lines = [head, "|---" * (2 * len(tiers) + 5) + "|"]
    for method, per_seed in results.items():
        cells = []
        for group in [*tiers, "all"]:
            for k in (1, 8):
                vals = [r[group].get(k) for r in per_seed if k in r[group]]
                cells.append(f"{100 * sum(vals) / len(vals):.1f}" if vals else "–")
        finals = []  # each seed's last measured entropy
        for records in runs.get(method, []):
            ents = [r["aer/entropy"] for r in records if r.get("aer/entropy") is not None]
            finals += ents[-1:]
        secs = [v for k, v in timings.items() if k.rsplit("-seed", 1)[0] == method]
        final = f"{sum(finals) / len(finals):.3f}" if finals else "–"
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {final} | {sum(secs) / max(1, len(secs)):.0f} |")
    return "\n".join(lines)


def plot_entropy(runs: dict[str, list[list[dict]]], path) -> Path:
    """Entropy over steps for every method in one panel (the mean over seeds), with the AER target; the axis spans
    the runs' own range (a run that explodes is drawn off scale, named in the legend, not allowed to flatten the
    others)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    curves = {name: _band(seeds, "aer/entropy")[:2] for name, seeds in runs.items()}
    firsts = sorted(ys[0] for _, ys in curves.values() if ys)
    limit = 2.5 * firsts[len(firsts) // 2] if firsts else None
    on_scale = [max(ys) for _, ys in curves.values() if ys and (limit is None or max(ys) <= limit)]
    top = 1.1 * max(on_scale) if on_scale else None
    bottom = 0.9 * min(min(ys) for _, ys in curves.values() if ys) if on_scale else None
    for i, (name, (xs, ys)) in enumerate(curves.items()):
        label = f"{name} (off scale: max {max(ys):.2f})" if top and ys and max(ys) > top else name
        ax.plot(xs, ys, color=f"C{i % 10}", ls="-" if i < 10 else "--", label=label)
    if top:
        ax.set_ylim(bottom, top)
    targets = [r["aer/target_entropy"] for seeds in runs.values() for rs in seeds[:1] for r in rs
               if r.get("aer/target_entropy")]  # fmt: skip
    if targets:
        ax.axhline(targets[-1], color="k", ls=":", lw=1, label="AER target H*")
    ax.set_xlabel("step")
    ax.set_ylabel("policy entropy (nats/token)")
    n = min(len(seeds) for seeds in runs.values())
    ax.set_title(f"policy entropy ({'mean over ' + str(n) + ' seeds' if n > 1 else 'one seed'})")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
