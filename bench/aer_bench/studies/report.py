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


def plot_runs(runs: dict[str, list[dict]], passk: dict[str, dict] | None, path, tau: float | None = None) -> Path:
    """One PNG: entropy (with H*), α, reward, accuracy per tier, response length, held-out pass@k, and per
    difficulty bucket of g (g = 0 / 0 < g < ρ / ρ ≤ g < 1 / g = 1): entropy, share of completions and λ."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 3, figsize=(15, 12.5))
    colors = {name: f"C{i}" for i, name in enumerate(runs)}
    panels = [
        (axes[0, 0], "aer/entropy", "policy entropy (nats/token)"),
        (axes[0, 1], "aer/alpha", "AER global coefficient α"),
        (axes[0, 2], "reward", "training reward (accuracy)"),
        (axes[1, 1], "completions/mean_length", "mean response length (tokens)"),
    ]
    for ax, key, title in panels:
        for name, records in runs.items():
            ax.plot(*_series(records, key), color=colors[name], label=name)
        ax.set_title(title)
        ax.set_xlabel("step")
    ax = axes[0, 0]
    for name, records in runs.items():
        xs, ys = _series(records, "aer/target_entropy")
        if ys and name.lower().startswith("aer"):
            ax.axhline(ys[-1], color=colors[name], ls="--", lw=1, label=f"H* = τ·H0 ({name})")
    ax.legend()
    ax = axes[1, 0]
    styles = ["-", "--", ":", "-."]
    for i, (name, records) in enumerate(runs.items()):
        tiers = sorted({k for r in records for k in r if k.startswith("lab/accuracy_tier")})
        for j, key in enumerate(tiers):
            ax.plot(
                *_series(records, key),
                color=f"C{j + 2}",
                ls=styles[i % len(styles)],
                label=f"{name} {key.split('_')[-1]}",
            )
    ax.set_title("training accuracy per difficulty tier")
    ax.set_xlabel("step")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[1, 2]
    if passk:
        for name, result in passk.items():
            ks = sorted(result["all"])
            ax.plot(ks, [100 * result["all"][k] for k in ks], marker="o", color=colors.get(name), label=name)
        ax.set_xscale("log", base=2)
        ax.legend()
    ax.set_title("held-out pass@k (%)")
    ax.set_xlabel("k")
    axes[0, 1].legend()
    # where the entropy budget goes: per difficulty bucket of the group accuracy g (aer/bucket/<name>/*)
    from aer_trl.core_algos import BUCKETS

    for ax, metric, title in (
        (axes[2, 0], "entropy", "entropy per difficulty bucket of g"),
        (axes[2, 1], "share", "share of completions per bucket"),
        (axes[2, 2], "lambda", "mean λ per bucket (the bonus)"),
    ):
        for i, (name, records) in enumerate(runs.items()):
            for j, bucket in enumerate(BUCKETS):
                xs, ys = _series(records, f"aer/bucket/{bucket}/{metric}")
                if ys:
                    ax.plot(xs, ys, color=f"C{j + 4}", ls=styles[i % len(styles)], label=f"{name} {bucket}")
        ax.set_title(title)
        ax.set_xlabel("step")
        if ax.lines:
            ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary_markdown(results: dict[str, list[dict]], runs: dict[str, list[dict]], timings: dict[str, float]) -> str:
    """One row per method: held-out pass@1 and pass@8 per tier (mean over seeds), final entropy, training time."""
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
        ents = [r["aer/entropy"] for r in runs.get(method, []) if r.get("aer/entropy") is not None]
        secs = [v for k, v in timings.items() if k.rsplit("-seed", 1)[0] == method]
        final = f"{ents[-1]:.3f}" if ents else "–"
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {final} | {sum(secs) / max(1, len(secs)):.0f} |")
    return "\n".join(lines)


def plot_entropy(runs: dict[str, list[dict]], path) -> Path:
    """Entropy over steps for every method in one panel, with the AER target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    firsts = sorted(ys[0] for ys in (_series(r, "aer/entropy")[1] for r in runs.values()) if ys)
    top = 2.5 * firsts[len(firsts) // 2] if firsts else None  # a run that explodes must not flatten the others
    for i, (name, records) in enumerate(runs.items()):
        xs, ys = _series(records, "aer/entropy")
        label = f"{name} (off scale: max {max(ys):.2f})" if top and ys and max(ys) > top else name
        ax.plot(xs, ys, color=f"C{i % 10}", ls="-" if i < 10 else "--", label=label)
    if top:
        ax.set_ylim(0, top)
    targets = [r["aer/target_entropy"] for rs in runs.values() for r in rs if r.get("aer/target_entropy")]
    if targets:
        ax.axhline(targets[-1], color="k", ls=":", lw=1, label="AER target H*")
    ax.set_xlabel("step")
    ax.set_ylabel("policy entropy (nats/token)")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
