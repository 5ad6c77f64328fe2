"""The command line (`python -m aer_bench.studies.real_study`, `aer-real-study`): parse, queue, tables, docs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .queue import run_queue
from .spec import RECIPES, load_study, study_from_flags
from .tables import tables, update_docs


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m aer_bench.studies.real_study" if sys.argv[0].endswith("__main__.py") else None,
        description=sys.modules[__package__].__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--study", nargs="+", default=None, help="study files (YAML): their cells in one queue")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="without --study: the recipes to compare (default grpo aer); with --study: only these arms are trained",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=None,
        help="without --study: the seeds (default 0); with --study: only these of the study's seeds are trained",
    )
    parser.add_argument("--output_dir", default=None, help="where cells train (default runs/real, or runs/real_llm)")
    parser.add_argument("--recipes_dir", default=str(RECIPES), help="one <method>.yaml per method")
    parser.add_argument("--eval_per_tier", type=int, default=16, help="held-out problems per tier")
    parser.add_argument("--eval_samples", type=int, default=16, help="samples per held-out problem (n of pass@k)")
    parser.add_argument("--no_eval", action="store_true", help="train only (evaluate later)")
    parser.add_argument("--aggregate_only", action="store_true", help="tables and figure from the records alone")
    parser.add_argument("--docs", default=None, help="a page whose <!-- study:<folder> --> blocks get the tables")
    args, args.recipe_overrides = parser.parse_known_args(argv)
    clash = [a for a in args.recipe_overrides if a.split("=")[0] in ("--output_dir", "--seed", "--config")]
    if clash:
        parser.error(f"{clash[0]} is set per cell by this script")
    try:
        if args.study:
            if args.recipe_overrides:
                parser.error(f"with --study, settings go in the study file, not {args.recipe_overrides[0]}")
            studies = [load_study(p) for p in args.study]
            queue_seeds, queue_arms = args.seeds, args.methods
            foreign = [s for s in (args.seeds or []) if not any(s in study.seeds for study in studies)]
            if foreign:
                parser.error(f"--seeds {foreign} are in none of the studies' seeds")
            known = {arm.name for study in studies for arm in study.arms}
            if args.methods and set(args.methods) - known:
                unknown = sorted(set(args.methods) - known)
                parser.error(f"--methods {unknown} are no arm of the studies: {sorted(known)}")
        else:
            args.output_dir = args.output_dir or "runs/real"
            args.methods = args.methods or ["grpo", "aer"]
            studies, queue_seeds, queue_arms = [study_from_flags(args)], None, None
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    output_dir = Path(args.output_dir or "runs/real_llm")
    if not args.aggregate_only:
        output_dir.mkdir(parents=True, exist_ok=True)
        run_queue(studies, output_dir, evaluate_models=not args.no_eval, seeds=queue_seeds, arms=queue_arms)
    results = {}
    for study in studies:
        rows = tables(study)
        if not rows:
            if args.aggregate_only and not args.study:
                raise SystemExit(f"no recorded cell under {study.records / 'cells'} for this study")
            print(f"{study.title}: no recorded cell yet under {study.records / 'cells'}", flush=True)
            continue
        print((study.records / "study.md").read_text(), flush=True)
        if args.docs:
            update_docs(Path(args.docs), study)
        results[study.title] = rows
    return results if args.study else next(iter(results.values()), {})


def cli() -> None:
    """The console script `aer-real-study`: main's return value is for Python callers, not an exit status."""
    main()
