"""Deprecated alias of `aer_trl.evaluation` (the harness moved to `aer_trl.evaluation.harness`); removed in 0.3."""

import warnings

from .evaluation import EvalArguments, PassAtKCallback, evaluate  # noqa: F401
from .evaluation.harness import TransformersGenerator, markdown_table, plot_pass_at_k  # noqa: F401

warnings.warn(
    "aer_trl.evaluate is deprecated: import from aer_trl.evaluation instead", DeprecationWarning, stacklevel=2
)
