"""Evaluation: the pass@k estimator (`passk`), sampling (`sampling`), the fingerprinted generations store (`store`),
the resumable harness behind `recipes/evaluate.py` (`harness`) and checkpoint selection during training
(`callback`)."""

from .callback import PassAtKCallback
from .harness import EvalArguments, evaluate
from .passk import k50, mean_pass_at_k, pass_at_k
from .sampling import isolated_rng, sample_completions

__all__ = [
    "EvalArguments",
    "PassAtKCallback",
    "evaluate",
    "isolated_rng",
    "k50",
    "mean_pass_at_k",
    "pass_at_k",
    "sample_completions",
]
