"""aer_bench.lab.sources: the `lab` and `arithmetic` sources, registered with the library's registry by name."""

import pytest

from aer_bench.lab.tasks import arithmetic_splits
from aer_bench.training import BenchScriptArguments as AERScriptArguments
from aer_trl.sources import get_source, resolve_format


def test_arithmetic_splits_are_disjoint_on_every_tier_and_fixed():
    splits = arithmetic_splits(train_size=2000, test_per_tier=32, seed=3)
    train, test = set(splits["train"]["question"]), set(splits["test"]["question"])
    shots = {q for q, _ in splits["shots"]}
    assert not train & test and not train & shots and not test & shots
    assert sorted(set(splits["test"]["difficulty"])) == [0, 1, 2, 3] and len(test) == 128
    # the held-out split does not depend on the training seed; the training problems do
    other = arithmetic_splits(train_size=2000, test_per_tier=32, seed=4)
    assert other["test"]["question"] == splits["test"]["question"]
    assert other["train"]["question"] != splits["train"]["question"]
    with pytest.raises(ValueError, match="tier 0 has fewer than"):
        arithmetic_splits(train_size=10, test_per_tier=100, tiers=[0])


def test_arithmetic_source_defaults_to_the_chosen_2_shot_format():
    source = get_source("arithmetic")
    args = AERScriptArguments(dataset_name="arithmetic", lab_train_size=64)
    fmt = resolve_format(source, args)
    assert len(fmt.shots) == 2 and fmt.instruction is None and "\\boxed{}" in fmt.system
    data = source.load("train", args, fmt)
    roles = [m["role"] for m in data[0]["prompt"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert set(data.column_names) >= {"prompt", "answer", "difficulty"}
    # every training seed sees the same shots; another shots seed, other shots
    again = resolve_format(source, AERScriptArguments(dataset_name="arithmetic", lab_data_seed=5))
    assert again.shots == fmt.shots
    assert resolve_format(source, AERScriptArguments(prompt_shots_seed=1)).shots != fmt.shots


def test_lab_source_refuses_a_prompt_format():
    with pytest.raises(ValueError, match="raw text prompts"):
        resolve_format(get_source("lab"), AERScriptArguments(prompt_num_shots=2))
