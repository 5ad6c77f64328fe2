"""Evaluation: the pass@k estimator and the one scoring path (`passk`), sampling (`sampling`), the resumable harness
behind `recipes/evaluate.py` (`harness`, which names the file for each of its jobs) and checkpoint selection during
training (`validation`). Loaded lazily, as the top level: `aer_trl.app.evaluation.passk` imports no TRL or
transformers."""

from typing import TYPE_CHECKING

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "validation": ["PassAtKCallback"],
        "harness": ["EvalArguments", "evaluate"],
        "passk": ["k50", "mean_pass_at_k", "pass_at_k", "passk_summary"],
        "sampling": ["isolated_rng", "sample_chunk", "sample_completions"],
    },
)

if TYPE_CHECKING:
    from .harness import EvalArguments, evaluate
    from .passk import k50, mean_pass_at_k, pass_at_k, passk_summary
    from .sampling import isolated_rng, sample_chunk, sample_completions
    from .validation import PassAtKCallback
