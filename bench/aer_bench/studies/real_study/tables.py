"""The study's statistics and tables from its records alone: each cell's training summary, means with 95% Student-t
intervals over seeds, differences paired by seed (`study.md`, `study.json`), and their blocks in the docs."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from aer_trl.atomic import atomic_write

from ...analysis import tokens_table
from ...stats import interval, sign_test
from .figures import plot
from .records import evaluation_mismatch, no_answer_share, read_record
from .spec import KS, TIER_NAMES, Arm, Study, sizes_text


def training_summary(records: list[dict]) -> dict:
    steps = [r for r in records if "train_runtime" not in r and r.get("reward") is not None]

    def series(key):
        return [(r["step"], r[key]) for r in steps if r.get(key) is not None]

    def mean_of(key, part):
        values = [v for _, v in series(key)]
        return statistics.fmean(part(values)) if values and part(values) else float("nan")

    first, last = (lambda v: v[:5]), (lambda v: v[-5:])
    # the entropy bonus's coefficient: AER's α, or TRL's own `entropy_coef` where TRL's bonus trains (it logs the
    # coefficient only then; AER's α is 0 in those runs)
    coefficient = [(r["step"], r.get("entropy_coef") or r.get("aer/alpha")) for r in steps]
    coefficient = [(s, v) for s, v in coefficient if v is not None]
    entropy = series("aer/entropy")
    targets = [r.get("aer/target_entropy") for r in steps]
    target = next((t for t in reversed(targets) if t), float("nan"))
    h0 = next((r["aer/initial_entropy"] for r in steps if r.get("aer/initial_entropy")), float("nan"))
    second = [(s, h) for s, h in entropy[len(entropy) // 2 :]]
    distance = [abs(h - target) / target for _, h in second] if target == target and target else []
    # the same statistic around the run's own median: what a controller that put the median exactly at H* would
    # score, given how much the entropy of one rollout batch moves from batch to batch
    centre = statistics.median(h for _, h in second) if second else float("nan")
    spread = [abs(h - centre) / centre for _, h in second] if centre == centre and centre else []
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
        "entropy_spread": statistics.median(spread) if spread else float("nan"),
        "alpha_last": statistics.fmean(last([v for _, v in coefficient])) if coefficient else float("nan"),
        "length_last": mean_of("completions/mean_length", last),
        "curves": {
            "reward": series("reward"),
            "entropy": entropy,
            "alpha": coefficient,
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
    ("median \\|H−H*\\|/H* (2nd half)", lambda c: c["target_distance"]),
    ("its floor: median \\|H−med H\\|/med H", lambda c: c["entropy_spread"]),
    ("α, last 5 steps", lambda c: c["alpha_last"]),
    ("length, last 5", lambda c: c["length_last"]),
]


def passk_columns(ks, long_tokens: int | None = None) -> list:
    cols = [(f"held-out pass@{k}", lambda c, k=k: 100 * c["passk"][f"pass@{k}"]) for k in ks]
    cols += [
        (f"{TIER_NAMES[t]} pass@1", lambda c, t=t: 100 * c["passk"]["per_group"][t]["pass@1"]) for t in TIER_NAMES
    ]
    cols.append(("no answer (%)", lambda c: 100 * no_answer_share(c["passk"])))
    if long_tokens:  # the same samples continued to a longer budget: what was cut off, what is never answered
        cols.append((f"no answer at {long_tokens} tokens (%)", lambda c: 100 * no_answer_share(c["passk"]["longer"])))
        cols.append((f"pass@1 at {long_tokens} tokens", lambda c: 100 * c["passk"]["longer"]["pass@1"]))
    return cols


def primary_endpoint(cells: list[dict], study: Study, reference: str) -> dict:
    """The pre-registered endpoint (`study.primary`: held-out pass@k of one tier), each arm minus the reference,
    paired by seed: mean and 95% t-interval in points, the two-sided paired t-test and the exact sign test, and the
    verdict by rule (p < 0.05 on the t-test: higher or lower; else no difference shown)."""
    from scipy import stats as scipy_stats

    tier, k = study.primary["tier"], study.primary["k"]

    def value(c):
        return 100 * c["passk"]["per_group"][tier][f"pass@{k}"]

    ref = {c["seed"]: value(c) for c in cells if c["method"] == reference}
    out = {"tier": tier, "k": k, "reference": reference, "arms": {}}
    for arm in dict.fromkeys(c["method"] for c in cells if c["method"] != reference):
        diffs = [value(c) - ref[c["seed"]] for c in cells if c["method"] == arm and c["seed"] in ref]
        mean, half = interval(diffs)
        if len(diffs) < 2 or not any(diffs):
            t_p = math.nan  # one pair, or every pair tied: no test
        elif len(set(diffs)) == 1:
            t_p = 0.0  # every pair moved by the same amount: no spread, t is infinite
        else:
            t_p = float(scipy_stats.ttest_1samp(diffs, 0.0).pvalue)
        up, down, sign_p = sign_test(diffs)
        verdict = (
            "too few seeds" if len(diffs) < 2
            else "higher" if t_p < 0.05 and mean > 0
            else "lower" if t_p < 0.05 and mean < 0
            else "no difference shown"
        )  # fmt: skip
        out["arms"][arm] = {
            "seeds": len(diffs),
            "mean": mean,
            "half_width": half,
            "t_p": t_p,
            "sign": {"up": up, "down": down, "ties": len(diffs) - up - down, "p": sign_p},
            "verdict": verdict,
        }
    return out


def primary_lines(primary: dict, planned: int, label: str = "", beside: tuple = ()) -> list[str]:
    """The primary endpoint's table. With a deviation (`Deviation`): `label` says which pairs the verdict is read over,
    and `beside` holds (label, primary_endpoint) rows over other pairs, shown without a verdict of their own (what the
    rule would say on them alone in brackets, so a disagreement shows)."""
    tier, k, reference = primary["tier"], primary["k"], primary["reference"]
    which = bool(label or beside)
    lines = [
        "",
        f"Primary endpoint (pre-registered): {TIER_NAMES[tier]} held-out pass@{k}, arm − {reference}, paired by seed.",
        "",
        "| arm |" + (" pairs |" if which else "")
        + " seeds (of planned) | difference (points) | paired t p | sign test: up / down / ties, p | verdict |",
        "|---|" + ("---|" if which else "") + "---|---|---|---|---|",
    ]  # fmt: skip
    rows = [(label, primary, planned)] + [(text, other, None) for text, other in beside]
    for text, result, planned_here in rows:
        for arm, r in result["arms"].items():
            s = r["sign"]
            if planned_here is None:
                verdict = f"none: beside the verdict (by the rule alone: {r['verdict']})"
            else:
                interim = r["seeds"] < planned_here
                verdict = r["verdict"] + (" (interim: the study is not finished)" if interim else "")
            lines.append(
                f"| {arm} − {reference} |" + (f" {text} |" if which else "")
                + f" {r['seeds']}" + ("" if planned_here is None else f" of {planned_here}")
                + f" | {_fmt(r['mean'], r['half_width'])} | {r['t_p']:.3g} | {s['up']} / {s['down']} / {s['ties']}, "
                f"{s['p']:.3g} | {verdict} |"
            )  # fmt: skip
    return lines


def deviation_sets(cells: list[dict], deviation_cells: list[dict], study: Study) -> list[tuple[str, list[dict]]]:
    """The cells whose pairs the endpoints are read over, each with a label: the study's own cells when it has no
    deviation; with one, first all its seeds, the deviation's seeds from the deviation's study (the verdict), then
    the registered pairs alone and the deviation's alone. A registered cell of a deviation seed (trained before the
    deviation) stays out of every pair."""
    dev = study.deviation
    if dev is None:
        return [("", cells)]
    here = [s for s in study.seeds if s not in dev.seeds]
    kept = [c for c in cells if c["seed"] in here]
    mine = [c for c in deviation_cells if c["seed"] in dev.seeds]
    name = dev.study.records.name
    return [
        (f"{seed_runs(study.seeds)}: {seed_runs(here)} here, {seed_runs(dev.seeds)} from {name}", kept + mine),
        (f"{seed_runs(here)} here alone", kept),
        (f"{seed_runs(dev.seeds)} from {name} alone", mine),
    ]


def solve_profile(cells: list[dict], tier: str, reference: str) -> dict:
    """How the primary tier's problems were solved, per model: the number of problems (mean over seeds, 95% t
    interval) solved in none, one, some (2 to n − 1) and all of their n samples, and each arm's difference to the
    reference paired by seed. Descriptive (not pre-registered): it shows where a pass@n difference comes from —
    'none' is (1 − pass@n) × problems — and whether a policy keeps rare solutions or turns them into certainties."""
    bins = ("none", "once", "some", "all")

    def correct(cell):
        return cell["passk"]["per_group"][tier]["correct"]

    def counts(cell):
        n = cell["passk"]["num_samples"]
        names = ["none" if c == 0 else "all" if c == n else "once" if c == 1 else "some" for c in correct(cell)]
        return {b: names.count(b) for b in bins}

    per_cell = {(c["method"], c["seed"]): counts(c) for c in cells}
    arms = list(dict.fromkeys(c["method"] for c in cells))
    out = {"tier": tier, "problems": len(correct(cells[0])), "samples": cells[0]["passk"]["num_samples"]}
    out.update(rows={}, paired={})
    for arm in arms:
        mine = {s: v for (m, s), v in per_cell.items() if m == arm}
        out["rows"][arm] = {"seeds": len(mine), **{b: interval([v[b] for v in mine.values()]) for b in bins}}
        if arm == reference:
            continue
        pairs = [(v, per_cell[reference, s]) for s, v in mine.items() if (reference, s) in per_cell]
        if pairs:
            out["paired"][arm] = {"seeds": len(pairs), **{b: interval([a[b] - r[b] for a, r in pairs]) for b in bins}}
    return out


def solve_profile_lines(profile: dict, reference: str, label: str = "") -> list[str]:
    problems, samples = profile["problems"], profile["samples"]
    head = f"solved in none / one / 2–{samples - 1} / all {samples} samples"
    lines = [
        "",
        f"Descriptive, not pre-registered: the {TIER_NAMES[profile['tier']]} tier's {problems} held-out problems by "
        f"how many of their {samples} samples solved them, per seed (mean ± 95% half-width)"
        + (f"; seeds {label}." if label else "."),
        "",
        f"| model | seeds | {head.replace(' / ', ' | ')} |",
        "|---|---|---|---|---|---|",
    ]
    names = ("none", "once", "some", "all")  # solve_profile's bins
    for arm, row in profile["rows"].items():
        lines.append(f"| {arm} | {row['seeds']} | " + " | ".join(_fmt(*row[b]) for b in names) + " |")
    for arm, row in profile["paired"].items():
        lines.append(f"| {arm} − {reference} | {row['seeds']} | " + " | ".join(_fmt(*row[b]) for b in names) + " |")
    return lines


ENVIRONMENT_FIELDS = (
    ("commit", "commit {}"),
    ("cpu", "{}"),
    ("cpu_bf16_kernels", "bf16 kernels {}"),
    ("gpu", "{}"),
    ("threads", "{} threads"),
    ("python", "Python {}"),
    ("torch", "torch {}"),
    ("transformers", "transformers {}"),
    ("trl", "TRL {}"),
    ("accelerate", "accelerate {}"),
    ("vllm", "vLLM {}"),
)


def seed_runs(seeds: list[int]) -> str:
    """[20, 21, 22, 25, 27, 28] -> "20–22, 25, 27–28"."""
    runs: list[list[int]] = []
    for seed in sorted(seeds):
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


def environment_lines(cells: list[dict]) -> list[str]:
    """Where the cells trained, from each run.json's `environment`: one line per distinct environment with the cells
    it holds, so that a study whose cells trained on two kinds of machine says so in its tables (another CPU, or the
    same CPU without bf16 kernels, takes other float paths from the first step: docs/real_llm.md §3.11). A record
    made before cells recorded their environment counts as "not recorded"."""
    groups: dict[str, dict[str, list[int]]] = {}
    for c in cells:
        env = c.get("environment")
        if env:
            parts = []
            for key, text in ENVIRONMENT_FIELDS:
                value = env.get(key)
                if value is None:
                    continue
                value = value[:7] if key == "commit" else value
                parts.append(text.format("yes" if value is True else "no" if value is False else value))
            if env.get("tracked_changes"):
                parts.append("with uncommitted changes to tracked files")
            label = ", ".join(parts)
        else:
            label = "environment not recorded (trained before cells recorded it)"
        groups.setdefault(label, {}).setdefault(c["method"], []).append(c["seed"])
    if not groups:
        return []
    head = "Trained in one environment:" if len(groups) == 1 else f"**Trained in {len(groups)} environments:**"
    lines = ["", head, ""]
    for label, arms in groups.items():
        n = sum(len(seeds) for seeds in arms.values())
        which = "; ".join(f"{arm} seeds {seed_runs(seeds)}" for arm, seeds in arms.items())
        lines.append(f"- {n} cell{'s' if n != 1 else ''} ({which}): {label}")
    return lines


def _fmt(mean: float, half: float) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.3g}" if math.isnan(half) else f"{mean:.3g} ± {half:.2g}"


def paired_differences(cells: list[dict], reference: str, cols: list) -> dict:
    """Each arm minus the reference, paired by seed: {arm: {column: (mean, half-width), "seeds": [...]}}."""
    ref = {c["seed"]: c for c in cells if c["method"] == reference}
    paired = {}
    for m in dict.fromkeys(c["method"] for c in cells):
        if m == reference or not ref:
            continue
        mine = {c["seed"]: c for c in cells if c["method"] == m and c["seed"] in ref}
        paired[m] = {name: interval([f(c) - f(ref[s]) for s, c in sorted(mine.items())]) for name, f in cols}
        paired[m]["seeds"] = sorted(mine)
    return paired


def aggregate(
    cells: list[dict],
    base: dict | None,
    study: Study,
    figure: Path | None = None,
    deviation_cells: list[dict] | None = None,
) -> dict:
    """Tables (`study.md`, `study.json` in the records folder) and the figure, from the cells' records alone; with a
    deviation (`Deviation`), its study's cells (`deviation_cells`) give the pairs of its seeds (`deviation_sets`)."""
    arms = list(dict.fromkeys(c["method"] for c in cells))
    ks = [k for k in KS if k <= study.eval_samples]
    train_cols, eval_cols = COLUMNS, passk_columns(ks, study.eval_long_tokens)
    rows = {}
    for m in arms:
        mine = [c for c in cells if c["method"] == m]
        rows[m] = {"seeds": sorted(c["seed"] for c in mine)}
        rows[m].update({name: interval([f(c) for c in mine]) for name, f in train_cols + eval_cols})
    reference = study.reference or ("grpo" if "grpo" in arms else arms[0])
    ref = {c["seed"]: c for c in cells if c["method"] == reference}
    sets = deviation_sets(cells, deviation_cells or [], study)
    answers = eval_cols[len(ks) + len(TIER_NAMES) :]  # the no-answer shares (and pass@1 at the longer budget)
    compared = eval_cols[:1] + eval_cols[len(ks) - 1 : len(ks)] + answers + train_cols[3:6]
    top = max(ks)
    tier_cols = [
        (f"{TIER_NAMES[t]} pass@{k}", lambda c, t=t, k=k: 100 * c["passk"]["per_group"][t].get(f"pass@{k}", math.nan))
        for t in TIER_NAMES
        for k in (1, top)
    ]
    paired = paired_differences(cells, reference, compared + tier_cols)
    paired_sets = (
        [(label, paired_differences(chosen, reference, compared + tier_cols)) for label, chosen in sets]
        if study.deviation
        else [("", paired)]
    )
    lines = [f"### {study.title}", ""]
    lines += ["| arm | seeds | " + " | ".join(n for n, _ in train_cols) + " |", "|---" * (len(train_cols) + 2) + "|"]
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
    blocks = [
        (f"difference to {reference}, paired by seed", compared),
        (f"per tier, difference to {reference}", tier_cols),
    ]
    for title, cols in blocks if paired else []:
        names = [n for n, _ in cols]
        lines += ["", f"| {title} | seeds | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
        for label, diffs_by_arm in paired_sets:
            for m, diffs in diffs_by_arm.items():
                lines.append(
                    f"| {m} − {reference}{f', {label}' if label else ''} | {len(diffs['seeds'])} | "
                    + " | ".join(_fmt(*diffs[n]) for n in names) + " |"
                )  # fmt: skip
    primary = None
    if study.primary and ref:
        (label, chosen), beside = sets[0], sets[1:]
        primary = primary_endpoint(chosen, study, reference)
        others = [(text, primary_endpoint(more, study, reference)) for text, more in beside if more]
        lines += primary_lines(primary, len(study.seeds), label, others)
        profile = solve_profile(chosen, primary["tier"], reference)
        lines += solve_profile_lines(profile, reference, label)
        if others:
            primary = {**primary, "beside": dict(others), "pairs": label}
    if study.deviation:
        dev = study.deviation
        lines += [
            "",
            f"Deviation, written before its cells ({dev.source.parent.name}/{dev.source.name}): the pairs of seeds "
            f"{seed_runs(dev.seeds)} come from {dev.study.records.name} (its study file says why and what changed); "
            "a cell of this study on those seeds stays out of every pair.",
        ]
    lines += environment_lines(cells)
    settings = {a.name: {"recipe": a.recipe, **study.settings, **a.settings} for a in study.arms}
    sizes = study.tier_sizes()
    per_tier = sizes_text(sizes) + ("" if len(set(sizes)) == 1 else " (by tier)")
    longer = (
        f" and again at {study.eval_long_tokens} tokens (the same samples continued: an answer given only there was "
        "cut off at the trained budget)"
        if study.eval_long_tokens
        else ""
    )
    lines += [
        "",
        f"Mean over seeds ± half-width of the 95% Student-t interval. Training columns from metrics.jsonl (reward = "
        f"accuracy; H = token-weighted policy entropy in nats; α = AER's global coefficient, or TRL's entropy_coef "
        f"for a method with TRL's own entropy bonus; median |H−H*|/H* over the second half of training; its floor: "
        f"the same statistic around the run's own median entropy, i.e. what a controller holding the median exactly "
        f"at H* would score given the batch-to-batch spread). Held-out: "
        f"{per_tier} problems per tier, n = {study.eval_samples} samples each, temperature 1, the "
        f"training prompt format{longer}, the same sampling seeds for every model; no answer "
        "= completions with no final-answer marker or one that does not parse. Arms (recipe and settings over it): "
        + "; ".join(
            f"`{name}`: {s['recipe']}"
            + (f" {json.dumps({k: v for k, v in s.items() if k != 'recipe'})}" if len(s) > 1 else "")
            for name, s in settings.items()
        )
        + ".",
    ]
    table = "\n".join(lines) + "\n"
    out = study.records
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "study.md", table)
    summary = {
        "title": study.title,
        "seeds": study.seeds,
        "reference": reference,
        "arms": settings,
        "cells": cells,
        "base": None if base is None else {**base, "no_answer_share": no_answer_share(base)},
        "rows": rows,
        "paired": paired,
        **({"paired_sets": dict(paired_sets)} if study.deviation else {}),
        **({"primary": primary, "solve_profile": profile} if primary is not None else {}),
    }
    atomic_write(out / "study.json", json.dumps(summary, indent=1, sort_keys=True, allow_nan=True) + "\n")
    if figure is not None:
        figure.parent.mkdir(parents=True, exist_ok=True)
        plot(cells, base, figure, ks, study.title)
    return rows


def cell_summary(arm: Arm, seed: int, record: dict) -> dict:
    return {
        "method": arm.name,
        "recipe": arm.recipe,
        "seed": seed,
        **training_summary(record["metrics"]),
        "no_answer_share": no_answer_share(record["passk"]),
        "passk": record["passk"],
        "environment": record["run"].get("environment"),
    }


def tables(study: Study) -> dict:
    """The study's tables and figure from its records alone; {} when no cell has a record yet."""
    cells = []
    for seed in study.seeds:
        for arm in study.arms:
            record = read_record(study, arm, seed)
            if record is not None:
                cells.append(cell_summary(arm, seed, record))
    if not cells:
        return {}
    deviation_cells = []
    if study.deviation is not None:
        dev = study.deviation
        for seed in dev.seeds:
            for arm in dev.study.arms:
                record = read_record(dev.study, arm, seed)
                if record is not None:
                    deviation_cells.append(cell_summary(arm, seed, record))
    base_path = study.records / "base_passk.json"
    base = json.loads(base_path.read_text()) if base_path.is_file() else None
    if base is not None and (mismatch := evaluation_mismatch(study, base)):
        raise ValueError(f"{base_path}: the untrained model was {mismatch}; run the study's queue to evaluate it anew")
    for path in sorted(study.records.glob("tokens_seed*.json")):  # studies.tokens' records: which tokens carry H
        order = ["untrained", *(arm.name for arm in study.arms)]  # the study's order (the JSON's keys are sorted)
        atomic_write(study.records / f"{path.stem}.md", tokens_table(json.loads(path.read_text()), order))
    return aggregate(cells, base, study, study.figure, deviation_cells)


def replace_block(docs: Path, name: str, body: str) -> bool:
    """Put `body` between `<!-- study:<name> -->` and `<!-- /study:<name> -->` in `docs`; False when the page has no
    such markers."""
    start, end = f"<!-- study:{name} -->", f"<!-- /study:{name} -->"
    text = docs.read_text()
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    atomic_write(docs, f"{head}{start}\n{body}{end}{tail}")
    return True


def update_docs(docs: Path, study: Study) -> bool:
    """The study's `study.md` (and its token tables) in its `<!-- study:<folder> -->` block of `docs`."""
    body = (study.records / "study.md").read_text()
    for path in sorted(study.records.glob("tokens_seed*.md")):
        body += "\n" + path.read_text()
    return replace_block(docs, study.records.name, body)
