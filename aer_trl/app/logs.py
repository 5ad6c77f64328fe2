"""Logging at the entry points, as transformers' example scripts set it up: one stderr handler and format, and the
package's loggers at the run's level (INFO on the process that logs, WARNING on the others, or `--log_level` when
given). Without it the package's `logger.info` lines (save alignment, anchors, probes) are dropped. Deprecation
warnings that only another library's own calls raise (`LIBRARY_DEPRECATIONS`) are not shown at the command line: a
user of `aer-train` cannot act on them (docs/upstream.md lists them)."""

from __future__ import annotations

import logging
import os
import warnings

# (message, module) of FutureWarnings raised by another library's own code, not the user's or this package's:
# TRL 1.16 reads `model.is_gradient_checkpointing` (trl/models/utils.py) where transformers 5 wants
# `is_activation_checkpointing`
LIBRARY_DEPRECATIONS = (("`is_gradient_checkpointing` is deprecated", "transformers.modeling_utils"),)


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
    if not os.environ.get("PYTHONWARNINGS"):  # a user who asks for warnings gets them all
        for message, module in LIBRARY_DEPRECATIONS:
            warnings.filterwarnings("ignore", message=message, category=FutureWarning, module=module)
    return level
