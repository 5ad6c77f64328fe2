"""Scoring: verdicts of completions, and pass@k per (model, benchmark) over exactly the planned problems."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

from ..files import file_sha256
from ..rewards import JUDGE_VERSION, judge_completions
from .passk import passk_summary
from .store import load_store

logger = logging.getLogger(__name__)


def judge(completions: list[str], gold: str, prompt: str) -> tuple[list[bool], dict]:
    """Verdicts of one problem's completions and the reward's counts (timeouts, unparsed, unmarked), in the answer
    format that `prompt` (the text the model saw) asks for, as in training."""
    n = len(completions)
    verdicts, stats = judge_completions(completions, answer=[gold] * n, prompts=[prompt] * n)
    return [v == 1.0 for v in verdicts], {k: stats.get(k, 0) for k in ("timeouts", "unparsed", "unmarked")}


def score(args, plans) -> dict:
    """pass@k per (model, benchmark) over exactly the planned problems (and per group, e.g. difficulty tier, where
    the benchmark has one); an incomplete set is an error. Writes the reports."""
    from .reports import write_reports

    out = Path(args.output_dir)
    done = load_store(out)
    by_problem: dict[tuple[str, str], list[dict]] = {}
    if args.reuse_other_settings:
        for r in done.values():
            by_problem.setdefault((r["model"], r["problem"]), []).append(r)
    metrics: dict = {}
    outdated_problems = 0
    for plan in plans:
        records, used = [], Counter()
        for chunk in plan.chunks:
            for p in chunk.problems:
                r = done.get((plan.fp, p.hash, chunk.key))
                if r is None and args.reuse_other_settings:
                    r = next(iter(by_problem.get((plan.model, p.hash), [])), None)
                if r is not None:
                    records.append((p, r))
                    used[r["fp"]] += 1
        missing = len(plan.problems) - len(records)
        if missing:
            raise RuntimeError(
                f"{plan.model} on {plan.bench}: {missing} of {len(plan.problems)} problems have no stored samples for "
                f"these arguments (fingerprint {plan.fp}); run the same command again to generate them"
            )
        stats, counts, groups = Counter(), [], {}
        for problem, r in records:
            outdated = r.get("judge") != JUDGE_VERSION  # judged by another version of the answer checker
            if args.rescore or outdated:
                outdated_problems += outdated and not args.rescore
                r["correct"], r["reward_stats"] = judge(r["completions"], r["answer"], problem.text)
                r["judge"] = JUDGE_VERSION
            stats.update(r.get("reward_stats", {}))
            counts.append((len(r["correct"]), sum(r["correct"])))
            if problem.group is not None:
                groups.setdefault(problem.group, []).append(counts[-1])
        entry = passk_summary(counts, args.k_list)
        entry["correct"] = [c for _, c in counts]  # per problem, in the benchmark's order: any k, any per-problem view
        if groups:
            entry["per_group"] = {
                g: {**passk_summary(c, args.k_list), "correct": [k for _, k in c]} for g, c in sorted(groups.items())
            }
        entry["fingerprint"] = {"id": plan.fp, **plan.fingerprint}
        if len(used) > 1 or plan.fp not in used:
            entry["reused_fingerprints"] = dict(used)
        bench_path = Path(plan.bench)
        if bench_path.is_file():
            entry["benchmark_sha256"] = file_sha256(bench_path)
        entry["reward_stats"] = {k: stats.get(k, 0) for k in ("timeouts", "unparsed", "unmarked")}
        metrics.setdefault(plan.model, {})[plan.bench] = entry
    if outdated_problems:
        logger.warning(
            "judged the stored samples of %d problems again: their verdicts came from another version of the answer "
            "checker (this one: aer_trl.app.rewards.JUDGE_VERSION %d)",
            outdated_problems,
            JUDGE_VERSION,
        )
    write_reports(args, metrics)
    return metrics
