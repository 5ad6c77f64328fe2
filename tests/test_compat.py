"""aer_trl.compat: aer_trl's own calls use the names the installed transformers wants, so a run prints no
deprecation warning of ours (`past_key_values` → `cache`, `gradient_checkpointing` → `activation_checkpointing`)."""

import warnings

import pytest

from aer_trl import AERGRPOConfig
from aer_trl.app.evaluation import sample_completions
from aer_trl.compat import cache_kwarg, has_activation_checkpointing
from tests import helpers

RENAMED = ("past_key_values", "`gradient_checkpointing`", "gradient_checkpointing_kwargs")


def _ours(caught) -> list[str]:
    """Deprecation warnings about the renamed names (TRL's own `is_gradient_checkpointing` call is TRL's)."""
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, (FutureWarning, DeprecationWarning)) and any(n in str(w.message) for n in RENAMED)
    ]


@pytest.mark.parametrize("given", [{}, {"gradient_checkpointing": False}, {"gradient_checkpointing": True}])
def test_checkpointing_set_by_either_name_without_a_warning(tmp_path, given):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = AERGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", **given)
    assert _ours(caught) == []
    expected = given.get("gradient_checkpointing", True)  # TRL's default: on
    assert config.gradient_checkpointing is expected
    if has_activation_checkpointing():
        assert config.activation_checkpointing is expected


def test_a_training_step_and_sampling_warn_of_no_renamed_name(tmp_path):
    tokenizer = helpers.make_tokenizer()
    args = helpers.make_config(tmp_path, max_steps=1)
    trainer = helpers.make_trainer(tokenizer, args)
    assert cache_kwarg(trainer.model) in ("cache", "past_key_values")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
        sample_completions(trainer.model, tokenizer, ["1+2=", "3+4="], n=2, max_new_tokens=4, disable_tqdm=True)
    assert _ours(caught) == []


def test_the_local_rollout_worker_samples_without_a_renamed_name(tmp_path):
    """aer_trl.upstream.local_rollout's token loop hands its KV cache under the name the installed transformers
    wants."""
    from aer_trl.upstream.local_rollout import LocalRolloutWorker

    tokenizer = helpers.make_tokenizer()
    worker = LocalRolloutWorker(
        helpers.make_model(tokenizer), tokenizer, helpers.make_dataset(), [helpers.even_length_reward],
        num_generations=2, max_completion_length=4,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tokens, logps = worker.sample(tokenizer("1+2=", add_special_tokens=False)["input_ids"])
    assert _ours(caught) == []
    assert [len(t) for t in tokens] == [len(p) for p in logps] and all(tokens)
