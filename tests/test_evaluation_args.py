"""`EvalArguments`: bad settings refused by name."""

import pytest

from aer_trl.app.evaluation import EvalArguments


def test_invalid_eval_arguments():
    with pytest.raises(ValueError, match="k_list"):
        EvalArguments(models=["m"], num_samples=4, k_list=[1, 8])
    with pytest.raises(ValueError, match="backend"):
        EvalArguments(models=["m"], backend="tgi")
    with pytest.raises(ValueError, match="report_k"):
        EvalArguments(models=["m"], num_samples=4, k_list=[1, 4], report_k=2)
