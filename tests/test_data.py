"""aer_trl.app.data: question/answer tables from local files (and the Hub, by name), normalised into prompts."""

import json
import logging

import pytest
from datasets import Dataset

from aer_trl.app.data import load_math_dataset
from aer_trl.app.prompts import PromptFormat


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_local_data_loader_normalises_and_drops_bad_gold(tmp_path, caplog):
    rows = [
        {"problem": "What is 1+1?", "answer": "2"},
        {"problem": "Half of one?", "answer": "\\frac{1}{2}"},
        {"problem": "No gold", "answer": None},
        {"problem": "Bad gold", "answer": "???"},
    ]
    with caplog.at_level(logging.WARNING):
        ds = load_math_dataset(str(write_jsonl(tmp_path / "train.jsonl", rows)))
    assert len(ds) == 2 and "dropped 2 of 4 rows" in caplog.text
    assert ds[0]["prompt"][0]["role"] == "user" and "\\boxed{}" in ds[0]["prompt"][0]["content"]
    assert ds["answer"] == ["2", "\\frac{1}{2}"]
    gsm = Dataset.from_dict({"question": ["Q?"], "answer": ["work...\n#### 1,234"]})
    gsm.to_parquet(tmp_path / "gsm.parquet")
    assert load_math_dataset(str(tmp_path / "gsm.parquet"))["answer"] == ["work...\n#### 1,234"]


def test_data_loader_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_math_dataset(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="expected a question column"):
        load_math_dataset(str(write_jsonl(tmp_path / "x.jsonl", [{"text": "a", "label": 1}])))
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty.jsonl is empty"):
        load_math_dataset(str(tmp_path / "empty.jsonl"))
    torn = tmp_path / "torn.jsonl"  # a file whose writer was killed mid-line
    torn.write_text('{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "ans')
    with pytest.raises(ValueError, match=r"dataset_name: local file .*torn.jsonl is not valid jsonl: .*row 1"):
        load_math_dataset(str(torn))
    (tmp_path / "torn.parquet").write_bytes(b"PAR1\x00\x01")
    with pytest.raises(ValueError, match=r"local file .*torn.parquet is not valid parquet"):
        load_math_dataset(str(tmp_path / "torn.parquet"))
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": "???"}, {"question": "r", "answer": ""}])
    with pytest.raises(ValueError, match="none of its 2 rows has a gold answer"):
        load_math_dataset(str(bad))


def test_a_conversational_prompt_column_keeps_every_turn(tmp_path):
    turns = [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "\\boxed{2}"},
        {"role": "user", "content": "2+2?"},
    ]
    path = write_jsonl(tmp_path / "conv.jsonl", [{"prompt": turns, "answer": "4"}])
    kept = load_math_dataset(str(path), prompt_format=PromptFormat(instruction=None))
    assert kept[0]["prompt"] == turns
    asked = load_math_dataset(str(path))  # the default format appends the boxed instruction to the last user turn
    assert asked[0]["prompt"][:3] == turns[:3] and asked[0]["prompt"][3]["content"].startswith("2+2?\n\n")


def test_the_packaged_gsm8k_sample_loads_by_name_without_the_repository_or_the_hub():
    """`dataset_name: gsm8k-sample` (the CPU recipe's data): 12 real GSM8K test rows shipped in the package."""
    from aer_trl.app.data import load_math_dataset

    data = load_math_dataset("gsm8k-sample")
    assert len(data) == 12 and {"prompt", "answer"} <= set(data.column_names)
    assert data[0]["answer"].endswith("#### 70")  # the worked solution, gold after its "####", as from the Hub
