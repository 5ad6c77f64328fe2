"""`share_prompt_generation`: rollouts with each distinct prompt prefilled once sample from the states TRL's generate
samples from: with the same seed, the same tokens (up to float rounding of the prefill), and TRL's path wherever it
does not apply. Same seed, same draws is a coupling of the two samplers: the share of rows that differ bounds the
total variation distance between their distributions, so the first test is also the distribution test."""

import bench_helpers
import pytest
import torch
from trl import GRPOTrainer

from tests import helpers


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    tokenizer = helpers.make_tokenizer()
    args = bench_helpers.make_bench_config(
        tmp_path_factory.mktemp("gen"), share_prompt_generation=True, max_completion_length=6, num_generations=4
    )
    return bench_helpers.make_trainer(tokenizer, args, seed=3)


def _prompt_ids(tokenizer, texts, group):
    # as TRL's RepeatSampler lays them out: each prompt `group` times in a row; two lengths, so left padding shows
    return [tokenizer(t)["input_ids"] for t in texts for _ in range(group)]


def _both(trainer, prompt_ids, seed):
    torch.manual_seed(seed)
    ours, logprobs = trainer._generate_single_turn(prompt_ids, None, {}, 4)
    torch.manual_seed(seed)
    theirs, _ = GRPOTrainer._generate_single_turn(trainer, prompt_ids, None, {}, 4)
    return ours, theirs, logprobs


def test_same_seed_same_tokens_as_trls_generate(trainer, monkeypatch):
    from aer_bench import shared_prompt

    prompt_ids = _prompt_ids(trainer.processing_class, ["12+3=", "7+5=", "101+9="], 4)
    prefilled, prefill = [], shared_prompt.prefill
    monkeypatch.setattr(
        shared_prompt, "prefill", lambda m, ids, *a: prefilled.append(ids.size(0)) or prefill(m, ids, *a)
    )
    same = total = 0
    for seed in range(10):
        ours, theirs, logprobs = _both(trainer, prompt_ids, seed)
        assert logprobs is None and len(ours) == len(theirs) == 12
        same += sum(a == b for a, b in zip(ours, theirs))
        total += len(ours)
    # float rounding of a 3-row prefill against a 12-row one may flip a rare draw; nearly every row must agree
    # (total variation between the two samplers' distributions <= the share of rows that differ)
    assert same / total >= 0.95, f"{same}/{total} rows equal"
    assert prefilled == [3] * 10  # TRL's rollout ran with the 3 distinct prompts prefilled once each
    assert "generate" not in trainer.accelerator.unwrap_model(trainer.model_wrapped).__dict__  # the wrapper is gone


def test_trls_path_where_it_does_not_apply(trainer, monkeypatch):
    calls = []
    monkeypatch.setattr(trainer, "_with_shared_prefill", lambda rollout, ids, *a: calls.append(ids) or ([[1]], None))
    distinct = [trainer.processing_class(t)["input_ids"] for t in ["1+1=", "2+2="]]
    trainer._generate_single_turn(distinct, None, {}, 1)  # no prompt repeated: nothing to share
    trainer.args.share_prompt_generation = False
    try:
        trainer._generate_single_turn(distinct * 2, None, {}, 2)  # switched off
    finally:
        trainer.args.share_prompt_generation = True
    assert calls == []
    trainer._generate_single_turn(distinct * 2, None, {}, 2)
    assert len(calls) == 1


def test_trains_with_shared_generation(tmp_path):
    tokenizer = helpers.make_tokenizer()
    args = bench_helpers.make_bench_config(tmp_path, share_prompt_generation=True, aer_alpha_init=0.05, max_steps=2)
    trainer = bench_helpers.make_trainer(tokenizer, args)
    trainer.train()
    assert trainer.state.global_step == 2
