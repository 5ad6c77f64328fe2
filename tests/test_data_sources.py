"""aer_trl.app.data: data asked for by name, prompt formats resolved once, a source registered by name."""

import json

import pytest

from aer_trl.app.data import DataSource, get_source, register_source, resolve_format
from aer_trl.app.training import AERScriptArguments


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


def test_an_unknown_name_falls_back_to_a_question_answer_table():
    assert get_source("my-org/my-data").name == "my-org/my-data"


def test_a_registered_source_is_found_by_name():
    from datasets import Dataset

    source = register_source(
        DataSource(name="tiny-test-source", about="two rows", load=lambda split, args, fmt: Dataset.from_dict({}))
    )
    assert get_source("tiny-test-source") is source
