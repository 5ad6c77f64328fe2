"""`python -m aer_trl.app.evaluation --models ... --benchmarks ...`: the evaluation harness from the command line (any
`EvalArguments` key as a flag, or a YAML file with `--config`)."""

from __future__ import annotations

from pathlib import Path


def main(argv=None) -> dict:
    from trl import TrlParser

    from aer_trl.app.evaluation.args import EvalArguments  # absolute: `python -m aer_trl.evaluation` runs this too
    from aer_trl.app.evaluation.harness import evaluate
    from aer_trl.app.logs import configure_logging

    (args,) = TrlParser((EvalArguments,)).parse_args_and_config(args=argv)
    configure_logging()
    metrics = evaluate(args)
    print((Path(args.output_dir) / "table.md").read_text())
    return metrics


def cli() -> None:
    """The console script `aer-evaluate`: main's return value is for Python callers, not an exit status."""
    main()


if __name__ == "__main__":
    cli()
