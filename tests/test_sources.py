"""aer_trl.sources: data asked for by name, prompt formats resolved once, the arithmetic splits disjoint."""

import json

import pytest

from aer_trl.lab.tasks import arithmetic_splits
from aer_trl.sources import DataSource, get_source, register_source, resolve_format
from aer_trl.training import AERScriptArguments


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


def test_math_tables_take_shots_from_a_named_pool_and_drop_rows_that_are_shots(tmp_path):
    rows = [{"question": f"Q{i}?", "answer": f"work\n#### {i}"} for i in range(6)]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = AERScriptArguments(
        dataset_name=str(data), prompt_num_shots=2, prompt_shots_pool=str(data), prompt_instruction="none"
    )
    source = get_source(str(data))
    fmt = resolve_format(source, args)
    assert all(s.endswith(f"\\boxed{{{q[1:-1]}}}.") for q, s in fmt.shots)
    loaded = source.load("train", args, fmt)
    assert len(loaded) == 4  # the two shot questions are not trained on
    assert {m["content"] for m in loaded[0]["prompt"] if m["role"] == "user"} >= {q for q, _ in fmt.shots}
    with pytest.raises(ValueError, match="prompt_num_shots=1: the .* source has no pool"):
        resolve_format(source, AERScriptArguments(dataset_name=str(data), prompt_num_shots=1))


def test_lab_source_refuses_a_prompt_format_and_unknown_names_fall_back_to_tables():
    with pytest.raises(ValueError, match="raw text prompts"):
        resolve_format(get_source("lab"), AERScriptArguments(prompt_num_shots=2))
    assert get_source("my-org/my-data").name == "my-org/my-data"


def test_a_registered_source_is_found_by_name():
    from datasets import Dataset

    source = register_source(
        DataSource(name="tiny-test-source", about="two rows", load=lambda split, args, fmt: Dataset.from_dict({}))
    )
    assert get_source("tiny-test-source") is source
