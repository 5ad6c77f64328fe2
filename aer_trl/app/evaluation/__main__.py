"""`python -m aer_trl.app.evaluation --models ... --benchmarks ...`: the evaluation harness from the command line (any
`EvalArguments` key as a flag, or a YAML file with `--config`)."""

from __future__ import annotations

from pathlib import Path

# absolute imports: `python -m aer_trl.evaluation` (the old path) runs this file too; nothing that imports TRL at the
# top: `aer-evaluate --list` answers at once
from aer_trl.app.cli import check_keys, front_door, run_friendly


def main(argv=None) -> dict | None:
    """Evaluate as `argv` says (default: the process's arguments) and print the table and where the outputs are;
    `--list` prints the shipped evaluation recipes instead (and returns None)."""
    import sys

    argv = front_door("aer-evaluate", list(sys.argv[1:] if argv is None else argv), "eval")
    if argv is None:  # --list
        return None

    from trl import TrlParser

    from aer_trl.app.evaluation.args import EvalArguments
    from aer_trl.app.evaluation.harness import evaluate
    from aer_trl.app.logs import configure_logging
    from aer_trl.app.trainers import recipe_keys

    check_keys(recipe_keys(argv), (EvalArguments,), "an evaluation recipe (EvalArguments)")
    (args,) = TrlParser((EvalArguments,)).parse_args_and_config(args=argv)
    configure_logging()
    metrics = evaluate(args)
    out = Path(args.output_dir)
    print((out / "table.md").read_text())
    written = [p for p in ("table.md", "metrics.json", "passk.png", "generations.jsonl") if (out / p).exists()]
    print(f"Outputs in {out}: " + ", ".join(written))
    return metrics


def cli() -> None:
    """The console script `aer-evaluate`: main's return value is for Python callers, not an exit status; a user's
    mistake is one paragraph, exit status 2."""
    run_friendly("aer-evaluate", main)


if __name__ == "__main__":
    cli()
