"""Does any setting hold H* without costing the answer format? Every recorded cell of every study, one point each
(docs/real_llm.md §3.7), made from the committed records alone.

    python -m aer_bench.studies.tradeoff results/real_llm/*/study.yaml [--docs docs/real_llm.md] [--figure F]
        [--confirm results/real_llm/confirm/study.yaml]   # that study's pre-registered bar, read by rule (`verdict`)

Each cell is placed by its median |H − H*|/H* over the second half of training (`target_distance`) and by its
share of held-out completions without a parseable answer minus that of its study's reference arm (GRPO) on the same
seed. The bar of the study of record is the box: distance ≤ 0.25 and a no-answer share within 1 point of GRPO's.
Arms of different studies that train with the same settings (the same cell identity, `real_study.settings_hash`)
are one arm, each seed counted once. Reads each study's `study.json` (`make real-results` writes them first).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..stats import batch_noise, sign_test
from .real_study import Study, load_study, replace_block, settings_hash

DISTANCE_BAR = 0.25  # median |H − H*|/H* over the second half
FORMAT_BAR = 1.0  # points of held-out completions without an answer, over the reference's
CONFIRM_SHARE = 0.8  # the confirmation's bar (results/real_llm/confirm/study.yaml): on target on 8 seeds of 10


@dataclass
class Point:
    arm: str  # "study/arm" of the first study that names these settings (others: `also`)
    seed: int
    distance: float
    floor: float  # the same statistic around the run's own median entropy: batch-to-batch noise AND drift
    no_answer_excess: float  # points over the reference arm on the same seed
    pass1_diff: float  # points of held-out pass@1 over the reference arm on the same seed
    source: str = ""  # "study/arm" whose record this seed's cell is (the first study holding it)
    noise: float = float("nan")  # batch-to-batch noise alone, drift excluded (stats.batch_noise, second half)

    @property
    def on_target(self) -> bool:
        return self.distance <= DISTANCE_BAR

    @property
    def within_floor(self) -> bool:
        """At H* as nearly as the run's own spread lets a controller be: distance ≤ max(bar, floor)."""
        return self.distance <= max(DISTANCE_BAR, self.floor)

    @property
    def within_noise(self) -> bool:
        """At H* within what the measurement's own noise allows: distance ≤ max(bar, noise). The yardstick; the floor
        above also counts a run's drift, so a drifting run would pass it for drifting."""
        return self.distance <= max(DISTANCE_BAR, self.noise if self.noise == self.noise else 0.0)

    @property
    def format_kept(self) -> bool:
        return self.no_answer_excess <= FORMAT_BAR


def points(studies: list[Study]) -> tuple[list[Point], dict[str, list[str]], list[float]]:
    """The non-reference cells of every study (one per settings and seed), the other names of each arm, and the
    reference cells' distances (GRPO: how far from H* no entropy control at all lands)."""
    found: dict[tuple[str, int], Point] = {}
    names: dict[str, str] = {}  # settings hash → the arm's label
    also: dict[str, list[str]] = {}
    reference: dict[tuple[str, int], float] = {}
    for study in studies:
        summary = json.loads((study.records / "study.json").read_text())
        cells = {(c["method"], c["seed"]): c for c in summary["cells"]}
        for arm in study.arms:
            key = settings_hash(study.merged(arm))
            label = f"{study.records.name}/{arm.name}"
            if key not in names:
                names[key] = label
            elif label not in also.setdefault(names[key], []):
                also[names[key]].append(label)
            for seed in study.seeds:
                cell, ref = cells.get((arm.name, seed)), cells.get((study.reference, seed))
                if cell is None or ref is None:
                    continue
                if arm.name == study.reference:
                    reference.setdefault((key, seed), cell["target_distance"])
                    continue
                found.setdefault(
                    (key, seed),
                    Point(
                        names[key],
                        seed,
                        cell["target_distance"],
                        cell["entropy_spread"],
                        100 * (cell["no_answer_share"] - ref["no_answer_share"]),
                        100 * (cell["passk"]["pass@1"] - ref["passk"]["pass@1"]),
                        label,
                        noise(cell),
                    ),
                )
    return list(found.values()), {k: v for k, v in also.items() if v}, list(reference.values())


def noise(cell: dict) -> float:
    """The cell's batch-to-batch entropy noise over the second half of training (where its distance is measured)."""
    entropy = [h for _, h in cell["curves"]["entropy"]]
    return batch_noise(entropy, start=len(entropy) // 2)


def table(found: list[Point], also: dict[str, list[str]], reference: list[float]) -> str:
    arms = list(dict.fromkeys(p.arm for p in found))
    lines = [
        f"| arm | cells | distance to H* ≤ {DISTANCE_BAR} | no answer within {FORMAT_BAR:g} point of GRPO | both | "
        f"distance ≤ max({DISTANCE_BAR}, its noise) | that and the format kept | distance, min–max | noise, min–max | "
        "floor (noise and drift), min–max | no answer − GRPO (points), min–max | pass@1 − GRPO (points), mean |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in arms:
        mine = [p for p in found if p.arm == arm]
        name = " = ".join([arm, *also.get(arm, [])])
        lines.append(
            f"| {name} | {len(mine)} | {sum(p.on_target for p in mine)} | {sum(p.format_kept for p in mine)} | "
            f"{sum(p.on_target and p.format_kept for p in mine)} | {sum(p.within_noise for p in mine)} | "
            f"{sum(p.within_noise and p.format_kept for p in mine)} | {_range([p.distance for p in mine], '.2f')} | "
            f"{_range([p.noise for p in mine], '.2f')} | {_range([p.floor for p in mine], '.2f')} | "
            f"{_range([p.no_answer_excess for p in mine], '+.1f')} | "
            f"{statistics.fmean(p.pass1_diff for p in mine):+.1f} |"
        )
    near = [p for p in found if p.on_target]
    both = [p for p in found if p.on_target and p.format_kept]
    quiet = [p for p in found if p.within_noise]
    quiet_both = [p for p in quiet if p.format_kept]
    floor = [p for p in found if p.within_floor]

    def which(cells: list[Point]) -> str:
        return ": " + ", ".join(f"{p.source} seed {p.seed}" for p in cells) if cells else ""

    lines += [
        "",
        f"{len(found)} cells (arm × seed) in {len(arms)} arms. {len(near)} hold H* by the bar (distance ≤ "
        f"{DISTANCE_BAR}), {len(both)} of them with the answer format kept (no answer within {FORMAT_BAR:g} point of "
        f"GRPO's on the same seed){which(both)}. {len(quiet)} are at H* within their own batch-to-batch noise "
        f"(distance ≤ max({DISTANCE_BAR}, noise); the noise from residuals around a centred 5-step moving average, "
        f"drift excluded), {len(quiet_both)} of them with the format kept{which(quiet_both)}. By the older floor "
        f"(the spread around the run's own median, which counts drift as noise) {len(floor)} would be. GRPO's own "
        f"{len(reference)} cells: distance {_range(reference, '.2f')}.",
    ]
    return "\n".join(lines) + "\n"


def verdict(study: Study, share: float = CONFIRM_SHARE) -> str:
    """A pre-registered confirmation read by its own rule, from its own cells only: its one AER arm within
    DISTANCE_BAR of H* on at least `share` of the seeds, and its no-answer share within FORMAT_BAR points of the
    reference's on average over the same seeds. Nothing is read before every seed of both arms is recorded."""
    arms = [a.name for a in study.arms if a.name != study.reference]
    if len(arms) != 1:
        raise ValueError(f"{study.source}: a confirmation names one arm beside {study.reference!r}, not {arms}")
    found = points([study])[0] if (study.records / "study.json").is_file() else []
    seeds, need = len(study.seeds), math.ceil(share * len(study.seeds) - 1e-9)
    head = f"Pre-registered bar for `{arms[0]}` against `{study.reference}`"
    if len(found) < seeds:
        return f"{head}: {len(found)} of {seeds} seed pairs recorded; it is read when all are.\n"
    near = sum(p.on_target for p in found)
    excess = statistics.fmean(p.no_answer_excess for p in found)
    above = sum(p.no_answer_excess > 0 for p in found)
    held, kept = near >= need, excess <= FORMAT_BAR
    failed = [why for ok, why in ((held, "the target"), (kept, "the answer format")) if not ok]
    return (
        f"{head}, all {seeds} seed pairs recorded: within {DISTANCE_BAR} of H* (median over the second half) on "
        f"{near} of {seeds} seeds (the bar: at least {need}; within max({DISTANCE_BAR}, the run's batch-to-batch "
        f"noise), which is not the bar: {sum(p.within_noise for p in found)}); held-out completions without an answer "
        f"{excess:+.2f} points against {study.reference}'s on average (the bar: at most {FORMAT_BAR:+g}; above it on "
        f"{above} of {seeds} seeds); held-out pass@1 {statistics.fmean(p.pass1_diff for p in found):+.1f} points. "
        + ("**The bar is met.**" if not failed else f"**The bar is not met** ({' and '.join(failed)}).")
        + "\n\n"
        + _per_seed(study, arms[0], found)
    )


def _per_seed(study: Study, arm: str, found: list[Point]) -> str:
    """A confirmation seed by seed: its points (`found`), and from its study.json what they do not hold (where the
    entropy sat against H*, what α did, pass@16, the reference's distance); sign tests over the pairs."""
    cells = {(c["method"], c["seed"]): c for c in json.loads((study.records / "study.json").read_text())["cells"]}
    by_seed = {p.seed: p for p in found}
    lines = [
        f"| seed | distance to H* (2nd half) | {study.reference}'s | batches below H* (2nd half) | α at the end | "
        f"no answer − {study.reference} (points) | pass@1 − {study.reference} | pass@16 − {study.reference} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    diffs: dict[str, list[float]] = {"no answer": [], "pass@1": [], "pass@16": []}
    for seed in study.seeds:
        point, mine, ref = by_seed[seed], cells[(arm, seed)], cells[(study.reference, seed)]
        entropy = [h for _, h in mine["curves"]["entropy"]]
        half = entropy[len(entropy) // 2 :]
        below = sum(h < mine["target"] for h in half) / len(half)
        row = {
            "no answer": point.no_answer_excess,
            "pass@1": point.pass1_diff,
            "pass@16": 100 * (mine["passk"]["pass@16"] - ref["passk"]["pass@16"]),
        }
        for key, value in row.items():
            diffs[key].append(value)
        lines.append(
            f"| {seed} | {point.distance:.2f} | {ref['target_distance']:.2f} | {below:.0%} | "
            f"{mine['curves']['alpha'][-1][1]:.2f} | {row['no answer']:+.1f} | {row['pass@1']:+.1f} | "
            f"{row['pass@16']:+.1f} |"
        )
    tests = []
    for key, values in diffs.items():
        above, below, p = sign_test(values)
        tests.append(f"{key} above {study.reference}'s on {above}, below on {below} (p = {p:.3g})")
    return (
        "\n".join(lines)
        + f"\n\nSign tests over the {len(study.seeds)} seed pairs (two-sided, ties dropped): "
        + "; ".join(tests)
        + ".\n"
    )


def _range(values: list[float], fmt: str) -> str:
    if not values:
        return "–"
    low, high = min(values), max(values)
    return f"{low:{fmt}}" if f"{low:{fmt}}" == f"{high:{fmt}}" else f"{low:{fmt}} – {high:{fmt}}"


def plot(found: list[Point], reference: list[float], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    low = min([*reference, *(p.distance for p in found), DISTANCE_BAR]) / 1.5
    ax.fill_between([low, DISTANCE_BAR], -1, FORMAT_BAR, color="0.85", zorder=0, label="the bar: at H*, format kept")
    ax.scatter(reference, [0.0] * len(reference), marker="|", s=200, color="0.4", label="GRPO (the reference)")
    markers = "os^Dv<>Ph*Xp"
    for i, arm in enumerate(dict.fromkeys(p.arm for p in found)):
        mine = [p for p in found if p.arm == arm]
        ax.scatter(
            [p.distance for p in mine],
            [p.no_answer_excess for p in mine],
            marker=markers[i % len(markers)],
            color=plt.get_cmap("tab20")((2 * i) % 20 + (2 * i // 20) % 2),  # the dark shades first
            label=f"{arm} ({len(mine)})",
        )
    ax.axhline(FORMAT_BAR, color="k", ls="--", lw=1)
    ax.axvline(DISTANCE_BAR, color="k", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlim(left=low)
    ax.set_ylim(-1, 150)
    ax.set_xlabel("distance to the target: median |H − H*| / H* over the second half of training (log)")
    ax.set_ylabel("no answer, minus GRPO's on the same seed\n(points of held-out completions, symlog)")
    ax.set_title("Every recorded cell: distance to the entropy target against the answer format")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="+", help="study files (their study.json holds the cells)")
    parser.add_argument("--docs", default=None, help="a page whose <!-- study:tradeoff --> block gets the table")
    parser.add_argument("--figure", type=Path, default=None, help="where to draw the cells (PNG)")
    parser.add_argument(
        "--confirm", default=None, help="a pre-registered confirmation study: its bar read into <!-- study:verdict -->"
    )
    args = parser.parse_args(argv)
    studies = [load_study(p) for p in args.studies]
    found, also, reference = points([s for s in studies if (s.records / "study.json").is_file()])
    text = table(found, also, reference)
    print(text)
    if args.figure:
        plot(found, reference, args.figure)
    if args.docs:
        replace_block(Path(args.docs), "tradeoff", text)
    if args.confirm:
        read = verdict(load_study(args.confirm))
        print(read)
        if args.docs:
            replace_block(Path(args.docs), "verdict", read)
    return text


if __name__ == "__main__":
    main()
