"""Logging at the entry points, as transformers' example scripts set it up: one stderr handler and format, and the
package's loggers at the run's level (INFO on the process that logs, WARNING on the others, or `--log_level` when
given). Without it the package's `logger.info` lines (save alignment, anchors, probes) are dropped."""

from __future__ import annotations

import logging


def configure_logging(training_args=None) -> int:
    """Configure the root handler once and set the `aer_trl` loggers' level; returns that level."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
            datefmt="%m/%d/%Y %H:%M:%S",
        )  # on stderr, beside transformers' and TRL's own warnings
    if training_args is None:
        level = logging.INFO
    elif getattr(training_args, "log_level", "passive") != "passive":
        level = training_args.get_process_log_level()
    else:
        level = logging.INFO if training_args.should_log else logging.WARNING
    logging.getLogger("aer_trl").setLevel(level)
    return level
