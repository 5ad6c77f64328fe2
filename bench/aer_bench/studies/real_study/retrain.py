"""Train a recorded cell again and say whether it reproduces its record.

    python -m aer_bench.studies.real_study.retrain --study results/real_llm/confirm/study.yaml --arm grpo --seed 17 \
        --steps 20 --output_dir runs/retrain

The cell's settings (the study's recipe and settings for the arm, checked against the record's settings hash) train for
`--steps` steps with its seed, through the bench's command line as the queue trains it, and its per-step log is set
beside the record's: **bit for bit** when every compared value at every step is equal; **within the seed band** when
each lies between the lowest and the highest of the same arm's other recorded seeds at that step; **within the seed
spread** when the share of its values outside that band is no larger than a recorded seed's own share against the
others (with k other seeds a genuine seed falls outside their range 2/(k+1) of the time: `seed_spread`); otherwise
**outside**, naming the first step and value outside. The answer also lists what differs between the record's
environment (its run.json, `cells.environment`) and this machine's (code commit, package versions, CPU, threads), which
is where an unequal run looks first; a record made before environments were recorded says so. Writes `retrain.json` in
the retrained cell's folder. Flags after the command's own are training flags changed on purpose (`--bf16 true`): the
answer then says whether the changed run still moves within its arm's seed band. `--held_out` also samples the
retrained model on the study's held-out problems and sets pass@k and the no-answer share beside the recorded seeds'.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from aer_trl.atomic import atomic_write
from aer_trl.metrics import read_metrics

from .cells import environment
from .records import no_answer_share
from .spec import Arm, Study, load_study, record_dir, settings_hash

# what the comparison reads at each step: the reward, the entropy AER controls, α, the loss, the completions' length
KEYS = ("reward", "aer/entropy", "aer/alpha", "loss", "completions/mean_length")
# schedules that do not depend on max_steps: a shorter run follows the recorded one step for step
STEP_FREE_SCHEDULES = ("constant", "constant_with_warmup")


def outside_band(value: float, others: list[float]) -> bool:
    """Whether `value` lies outside the range of the other seeds' values (fewer than two seeds make no band)."""
    return len(others) < 2 or not min(others) <= value <= max(others)


def steps_of(rows: list[dict], keys=KEYS) -> dict[int, dict]:
    """step -> {key: value} of a metrics.jsonl's training rows (the end-of-training summary left out)."""
    out = {}
    for row in rows:
        if "step" in row and "train_runtime" not in row:
            out.setdefault(int(row["step"]), {}).update({k: row[k] for k in keys if row.get(k) is not None})
    return out


def compare(record: dict[int, dict], new: dict[int, dict], band: list[dict[int, dict]], steps: int) -> dict:
    """The verdict of a retrained run (`new`) against its record, step by step over the first `steps` steps, with
    `band` the same arm's other seeds (each step -> values). Pure: the numbers in, the verdict and where it breaks
    out."""
    first_unequal = first_outside = None
    compared = outside = 0
    for step in range(1, steps + 1):
        if step not in new or step not in record:
            raise ValueError(f"step {step} is missing from the {'retrained run' if step not in new else 'record'}")
        for key in sorted(record[step].keys() & new[step].keys()):
            compared += 1
            old, value = record[step][key], new[step][key]
            if value == old:
                continue
            first_unequal = first_unequal or {"step": step, "key": key, "record": old, "retrained": value}
            others = [seed[step][key] for seed in band if key in seed.get(step, {})]
            if outside_band(value, others):
                outside += 1
                span = [min(others), max(others)] if others else None
                first_outside = first_outside or {"step": step, "key": key, "retrained": value, "band": span}
    if compared == 0:
        raise ValueError("no value to compare: the record and the retrained run share no logged key")
    verdict = (
        "bit for bit" if first_unequal is None else "within the seed band" if first_outside is None else "outside"
    )
    return {
        "verdict": verdict,
        "compared": compared,
        "outside_band": outside,
        "outside_share": outside / compared,
        "first_unequal": first_unequal,
        "first_outside": first_outside,
    }


def seed_spread(seeds: list[dict[int, dict]], steps: int) -> list[float]:
    """Each recorded seed's share of values outside the band of the others (leave one out): how unusual a genuine
    seed of the arm is. With k other seeds a seed's value lies outside their range with chance 2/(k+1) at every step,
    so "outside" alone says little; a run as unusual as the recorded seeds are is within their spread."""
    return [
        _outside_share(seed, [other for j, other in enumerate(seeds) if j != i], steps) for i, seed in enumerate(seeds)
    ]


def _outside_share(run: dict[int, dict], band: list[dict[int, dict]], steps: int) -> float:
    values = outside = 0
    for step in range(1, steps + 1):
        for key, value in run.get(step, {}).items():
            others = [seed[step][key] for seed in band if key in seed.get(step, {})]
            values += 1
            outside += outside_band(value, others)
    return outside / values if values else 0.0


def behaviour(rows: list[dict], steps: int) -> dict:
    """What a study reads from a run, over its first `steps` steps: the mean reward, the last quarter's entropy and its
    ratio to H*, α at the end, the last quarter's share of completions without a marked answer, the mean step time."""
    keys = ("reward", "aer/entropy", "aer/target_entropy", "aer/alpha", "rewards/math_accuracy/unmarked", "step_time")
    by_step = steps_of(rows, keys)
    run = [by_step.get(step, {}) for step in range(1, steps + 1)]
    last = run[-max(1, steps // 4) :]

    def mean(values):
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    return {
        "reward_mean": mean(r.get("reward") for r in run),
        "entropy_last_quarter": mean(r.get("aer/entropy") for r in last),
        "entropy_over_target_last_quarter": mean(
            r["aer/entropy"] / r["aer/target_entropy"] for r in last if r.get("aer/target_entropy")
        ),
        "alpha_end": run[-1].get("aer/alpha"),
        "unmarked_last_quarter": mean(r.get("rewards/math_accuracy/unmarked") for r in last),
        "step_time": mean(r.get("step_time") for r in run),
    }


def held_out_summary(passk: dict) -> dict:
    """What the studies read from a held-out evaluation, in points: pass@1 and pass@16 overall and per tier, and the
    share of completions without an answer."""
    top = f"pass@{passk['num_samples']}"
    out = {"pass@1": 100 * passk["pass@1"], top: 100 * passk[top], "no_answer": 100 * no_answer_share(passk)}
    for tier, group in sorted((passk.get("per_group") or {}).items()):
        out[f"tier{tier} pass@1"], out[f"tier{tier} {top}"] = 100 * group["pass@1"], 100 * group[top]
    return out


def held_out_beside_seeds(study: Study, arm: Arm, seed: int, passk: dict) -> dict:
    """The retrained model's held-out figures beside its record's and the range of the arm's recorded seeds (each
    figure: inside the range or not)."""
    recorded = {
        other: held_out_summary(json.loads((record_dir(study, arm, other) / "passk.json").read_text()))
        for other in study.seeds
        if (record_dir(study, arm, other) / "passk.json").is_file()
    }
    mine = held_out_summary(passk)
    ranges = {k: [min(r[k] for r in recorded.values()), max(r[k] for r in recorded.values())] for k in mine}
    return {
        "retrained": mine,
        "record": recorded.get(seed),
        "seed_range": ranges,
        "seeds": sorted(recorded),
        "outside_range": sorted(k for k, v in mine.items() if not ranges[k][0] <= v <= ranges[k][1]),
    }


def load_note(load_average: list[float], cores: int) -> str | None:
    """Why an unequal retrain may be unequal on an unchanged environment: on this project's CPU, a run sharing the
    cores with other work takes other float paths from the first steps (docs/real_llm.md §3), so a record trained on
    an idle machine is reproduced bit for bit only on an idle one. None where the machine was not loaded."""
    if load_average[2] <= cores + 0.5:
        return None
    return (
        f"the machine was loaded while this ran (15-minute load average {load_average[2]:.1f} on {cores} cores): "
        "a run sharing the cores with other work can take other float paths: retrain on an idle machine"
    )


def environment_changes(recorded: dict | None, now: dict) -> dict | str:
    """field -> [recorded, now] for each environment field that differs; a string where the record has none."""
    if not recorded:
        return "the record does not say (trained before cells recorded their environment)"
    return {
        k: [recorded.get(k), now.get(k)] for k in sorted(recorded.keys() | now.keys()) if recorded.get(k) != now.get(k)
    }


def train_again(settings: dict, seed: int, steps: int, folder: Path, overrides=()) -> None:
    """The cell's settings trained for `steps` steps in `folder`, through the bench's command line."""
    if (folder / "metrics.jsonl").exists():
        raise FileExistsError(f"{folder} holds an earlier retrain: give another --output_dir or delete it")
    folder.mkdir(parents=True, exist_ok=True)
    recipe = folder / "recipe.yaml"  # what the queue trains the cell with (the record's, under today's key names)
    atomic_write(recipe, yaml.safe_dump(settings, sort_keys=True, allow_unicode=True))
    command = [
        sys.executable, "-m", "aer_bench.run", "--config", str(recipe), "--output_dir", str(folder),
        "--seed", str(seed), "--max_steps", str(steps), "--save_strategy", "no", "--disable_tqdm", "true", *overrides,
    ]  # fmt: skip
    with open(folder / "train.log", "a") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    if code != 0:
        raise RuntimeError(f"retraining seed {seed} failed (exit {code}); see {folder / 'train.log'}")


def retrain(
    study: Study,
    arm: Arm,
    seed: int,
    steps: int,
    output_dir: str | Path,
    overrides=(),
    judge_only: bool = False,
    evaluate: bool = False,
) -> dict:
    """Train the recorded cell (`study`, `arm`, `seed`) for `steps` steps in `output_dir` and compare (module
    docstring). `overrides`: training flags changed on purpose (`--bf16 true`: does the cell still behave as its
    seeds do?); they are named in the answer. `judge_only`: judge the run an earlier retrain left in the folder again,
    without training. `evaluate`: also sample the retrained model on the study's held-out problems (its budgets and
    sizes, `cells.held_out`) and set its figures beside the recorded seeds' (`held_out_beside_seeds`). The run's own
    log is `<output_dir>/<arm>-seed<seed>/train.log`."""
    record = record_dir(study, arm, seed)
    if not (record / "run.json").is_file():
        raise FileNotFoundError(f"{record}: no finished record of arm {arm.name!r} seed {seed} to compare with")
    settings, run = study.merged(arm), json.loads((record / "run.json").read_text())
    if run.get("settings_hash") != settings_hash(settings):
        raise ValueError(
            f"{record}: recorded with settings {run.get('settings_hash')}, and the study now trains {arm.name!r} with "
            f"{settings_hash(settings)}: the record cannot be reproduced from this study file"
        )
    recorded_steps = int(settings.get("max_steps", 0))
    if not 0 < steps <= recorded_steps:
        raise ValueError(f"--steps {steps}: the record has {recorded_steps} steps; give 1..{recorded_steps}")
    schedule = settings.get("lr_scheduler_type", "linear")
    if steps < recorded_steps and schedule not in STEP_FREE_SCHEDULES:
        raise ValueError(
            f"lr_scheduler_type {schedule!r} depends on max_steps: a {steps}-step run would follow another schedule "
            f"than the record's {recorded_steps} steps; retrain all {recorded_steps}"
        )
    folder = Path(output_dir) / f"{arm.name}-seed{seed}"
    if judge_only:
        if not (folder / "metrics.jsonl").is_file():
            raise FileNotFoundError(f"{folder}: no earlier retrain to judge (no metrics.jsonl)")
    else:
        train_again(settings, seed, steps, folder, overrides)
    band_rows = [
        read_metrics(record_dir(study, arm, other) / "metrics.jsonl")
        for other in study.seeds
        if other != seed and (record_dir(study, arm, other) / "metrics.jsonl").is_file()
    ]
    band = [steps_of(rows) for rows in band_rows]
    recorded_rows, new_rows = read_metrics(record / "metrics.jsonl"), read_metrics(folder / "metrics.jsonl")
    recorded = steps_of(recorded_rows)
    result = compare(recorded, steps_of(new_rows), band, steps)
    spread = seed_spread([recorded, *band], steps)
    result["seed_spread"] = {"min": min(spread), "mean": sum(spread) / len(spread), "max": max(spread)}
    if result["verdict"] == "outside" and len(band) >= 2 and result["outside_share"] <= max(spread):
        result["verdict"] = "within the seed spread"  # no more unusual than a recorded seed against the others
    seeds_behaviour = [behaviour(rows, steps) for rows in (recorded_rows, *band_rows)]
    result["behaviour"] = {
        "retrained": behaviour(new_rows, steps),
        "record": seeds_behaviour[0],
        "seed_range": {
            k: [min(vals), max(vals)] if vals else None
            for k in seeds_behaviour[0]
            for vals in [[b[k] for b in seeds_behaviour if b[k] is not None]]
        },
    }
    result.update(
        arm=arm.name,
        seed=seed,
        steps=steps,
        overrides=list(overrides),
        band_seeds=len(band),
        environment=environment(),
        environment_changes=environment_changes(run.get("environment"), environment()),
        load_average=list(os.getloadavg()),
    )
    if result["verdict"] != "bit for bit" and not judge_only:
        result["load_note"] = load_note(result["load_average"], os.cpu_count() or 1)
    if evaluate:
        from .cells import held_out

        result["held_out"] = held_out_beside_seeds(study, arm, seed, held_out(study, arm, str(folder), output_dir))
    atomic_write(folder / "retrain.json", json.dumps(result, indent=2))
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, help="the study file whose record is retrained")
    parser.add_argument("--arm", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True, help="steps to train (at most the record's)")
    parser.add_argument("--output_dir", default="runs/retrain")
    parser.add_argument("--judge_only", action="store_true", help="judge an earlier retrain's run again, no training")
    parser.add_argument(
        "--held_out", action="store_true", help="also evaluate the retrained model on the study's held-out problems"
    )
    args, overrides = parser.parse_known_args(argv)  # the rest: training flags changed on purpose (--bf16 true)
    clash = [a for a in overrides if a.split("=")[0] in ("--config", "--output_dir", "--seed", "--max_steps")]
    if clash:
        parser.error(f"{clash[0]} is set by this command")
    study = load_study(args.study)
    arms = {arm.name: arm for arm in study.arms}
    if args.arm not in arms:
        parser.error(f"--arm {args.arm!r} is no arm of {args.study}: {sorted(arms)}")
    result = retrain(
        study, arms[args.arm], args.seed, args.steps, args.output_dir, overrides, args.judge_only, args.held_out
    )
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
