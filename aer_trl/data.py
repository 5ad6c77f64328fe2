"""Training and evaluation data of the paper, from the Hub or from local JSON Lines / Parquet files.

Every loader returns a `datasets.Dataset` with a conversational `prompt` that asks for the final answer in
`\\boxed{}` and an `answer` column (the gold answer text). Rows whose gold answer is missing or cannot be parsed by
math-verify are dropped and counted in a warning, never kept silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset, load_dataset

from .rewards import parse_gold

logger = logging.getLogger(__name__)

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
QUESTION_COLUMNS = ("problem", "question", "prompt")
ANSWER_COLUMNS = ("answer", "solution")


@dataclass(frozen=True)
class MathSource:
    hub_id: str
    config: str | None = None
    split: str = "train"
    filter_year: int | None = None  # AI-MO/aimo-validation-amc holds several years: keep one


SOURCES: dict[str, MathSource] = {
    # training sets
    "deepscaler": MathSource("agentica-org/DeepScaleR-Preview-Dataset"),
    "dapo-math-17k": MathSource("open-r1/DAPO-Math-17k-Processed", config="en"),
    # evaluation sets
    "aime24": MathSource("HuggingFaceH4/aime_2024"),
    "aime25": MathSource("HuggingFaceH4/aime_2025"),
    "amc23": MathSource("math-ai/amc23", split="test"),
    "amc23-aimo": MathSource("AI-MO/aimo-validation-amc", filter_year=2023),
    "math500": MathSource("HuggingFaceH4/MATH-500", split="test"),
    "gsm8k": MathSource("openai/gsm8k", config="main", split="test"),
}

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def _question_text(value) -> str:
    if isinstance(value, list):  # already a conversation: take the user turns
        return "\n".join(m.get("content", "") for m in value if isinstance(m, dict) and m.get("role") == "user")
    return str(value)


def to_math_prompts(dataset: Dataset, source: str = "dataset") -> Dataset:
    """Normalise any question/answer table into `prompt` (conversational, asks for \\boxed{}) and `answer`."""
    question_col = next((c for c in QUESTION_COLUMNS if c in dataset.column_names), None)
    answer_col = next((c for c in ANSWER_COLUMNS if c in dataset.column_names), None)
    if question_col is None or answer_col is None:
        raise ValueError(
            f"{source}: expected a question column ({' / '.join(QUESTION_COLUMNS)}) and an answer column "
            f"({' / '.join(ANSWER_COLUMNS)}); found {dataset.column_names}"
        )

    def convert(row):
        gold = row[answer_col]
        gold = None if gold is None else str(gold).strip()
        return {
            "prompt": [{"role": "user", "content": f"{_question_text(row[question_col]).strip()}\n\n{INSTRUCTION}"}],
            "answer": gold,
            "_valid": bool(gold) and bool(parse_gold(gold)),
        }

    keep = [c for c in dataset.column_names if c not in {"prompt", "answer", question_col, answer_col}]
    converted = dataset.map(convert, remove_columns=[c for c in dataset.column_names if c not in keep])
    if len(converted) == 0:
        raise ValueError(f"{source}: the data set has no rows")
    valid = converted.filter(lambda row: row["_valid"]).remove_columns("_valid")
    dropped = len(converted) - len(valid)
    if len(valid) == 0:
        raise ValueError(
            f"{source}: none of its {len(converted)} rows has a gold answer math-verify can parse (column "
            f"{answer_col!r}); nothing to train or evaluate on"
        )
    if dropped:
        logger.warning(
            "%s: dropped %d of %d rows whose gold answer is missing or unparseable", source, dropped, len(converted)
        )
    return valid


def hub_dataset_id(name: str | None) -> str | None:
    """The Hub id of a training data set name, for links; None for the lab, local files and unknown names."""
    if not name:
        return None
    if name.lower() in SOURCES:
        return SOURCES[name.lower()].hub_id
    if Path(name).suffix in LOCAL_FORMATS or Path(name).exists() or name.count("/") != 1:
        return None
    return name


def load_math_dataset(name_or_path: str, config: str | None = None, split: str | None = None) -> Dataset:
    """A known name (see `SOURCES`), a Hub id, or a local .jsonl/.json/.parquet file, normalised for training."""
    path = Path(name_or_path)
    if path.suffix in LOCAL_FORMATS:
        if not path.exists():
            raise FileNotFoundError(f"dataset_name: local file {path} does not exist")
        if path.stat().st_size == 0:
            raise ValueError(f"dataset_name: local file {path} is empty")
        raw = load_dataset(LOCAL_FORMATS[path.suffix], data_files=str(path), split="train")
        return to_math_prompts(raw, source=str(path))
    source = SOURCES.get(name_or_path.lower(), MathSource(name_or_path))
    raw = load_dataset(source.hub_id, name=config or source.config, split=split or source.split)
    if source.filter_year is not None and "url" in raw.column_names:
        raw = raw.filter(lambda row: str(source.filter_year) in str(row["url"]))
    return to_math_prompts(raw, source=source.hub_id)
