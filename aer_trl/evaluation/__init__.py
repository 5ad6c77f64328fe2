"""Evaluation: the pass@k estimator and the one scoring path (`passk`), sampling (`sampling`), the resumable harness
behind `recipes/evaluate.py` (`harness`, which names the file for each of its jobs) and checkpoint selection during
training (`callback`)."""

from .callback import PassAtKCallback
from .harness import EvalArguments, evaluate
from .passk import k50, mean_pass_at_k, pass_at_k, passk_summary
from .sampling import isolated_rng, sample_chunk, sample_completions

__all__ = [
    "EvalArguments",
    "PassAtKCallback",
    "evaluate",
    "isolated_rng",
    "k50",
    "mean_pass_at_k",
    "pass_at_k",
    "passk_summary",
    "sample_chunk",
    "sample_completions",
]
