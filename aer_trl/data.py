"""Training and evaluation data of the paper, from the Hub or from local JSON Lines / Parquet files.

Every loader returns a `datasets.Dataset` with a conversational `prompt` built by `aer_trl.prompts.format_prompt`
(by default: the question and an instruction to put the final answer in `\\boxed{}`; a conversational question keeps
every turn) and an `answer` column (the gold answer text). Rows whose gold answer is missing or cannot be parsed by
math-verify are dropped and counted in a warning, never kept silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset, load_dataset
from datasets.exceptions import DatasetGenerationError
from pyarrow import ArrowInvalid

from .prompts import PromptFormat, format_prompt, solved_text
from .rewards import parse_gold

logger = logging.getLogger(__name__)

QUESTION_COLUMNS = ("problem", "question", "prompt")
ANSWER_COLUMNS = ("answer", "solution")


@dataclass(frozen=True)
class MathSource:
    hub_id: str
    config: str | None = None
    split: str = "train"
    filter_year: int | None = None  # AI-MO/aimo-validation-amc holds several years: keep one
    packaged: str | None = None  # a file shipped in aer_trl/data_files/ (read instead of the Hub)


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
    # 12 rows of GSM8K's test split (from rows 1200-1318, MIT license), shipped with the package: the CPU recipe's
    # data, found without the repository or the Hub
    "gsm8k-sample": MathSource("openai/gsm8k", config="main", split="test", packaged="gsm8k_sample.jsonl"),
}

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def _columns(dataset: Dataset, source: str) -> tuple[str, str]:
    question_col = next((c for c in QUESTION_COLUMNS if c in dataset.column_names), None)
    answer_col = next((c for c in ANSWER_COLUMNS if c in dataset.column_names), None)
    if question_col is None or answer_col is None:
        raise ValueError(
            f"{source}: expected a question column ({' / '.join(QUESTION_COLUMNS)}) and an answer column "
            f"({' / '.join(ANSWER_COLUMNS)}); found {dataset.column_names}"
        )
    return question_col, answer_col


def shot_key(question) -> str:
    """What makes a row 'the same question' as a shot: its last user turn (or its text), stripped."""
    if isinstance(question, list):
        users = [m.get("content", "") for m in question if isinstance(m, dict) and m.get("role") == "user"]
        question = users[-1] if users else ""
    return str(question).strip()


def solved_examples(dataset: Dataset, source: str = "dataset") -> list[tuple[str, str]]:
    """A shot pool from any question/answer table: (question, solution ending in `The answer is \\boxed{..}.`)."""
    question_col, answer_col = _columns(dataset, source)
    pool = []
    for row in dataset:
        gold = row[answer_col]
        if gold is not None and str(gold).strip() and parse_gold(str(gold)):
            pool.append((shot_key(row[question_col]), solved_text(str(gold))))
    if not pool:
        raise ValueError(f"prompt_shots_pool: {source} has no row with a parseable answer to use as a shot")
    return pool


def to_math_prompts(dataset: Dataset, source: str = "dataset", prompt_format: PromptFormat | None = None) -> Dataset:
    """Normalise any question/answer table into `prompt` (conversational, in `prompt_format`; default: the question
    and the boxed instruction) and `answer`. Rows whose question is one of the format's shots are dropped."""
    fmt = prompt_format or PromptFormat()
    shots = {q for q, _ in fmt.shots}
    question_col, answer_col = _columns(dataset, source)

    def convert(row):
        gold = row[answer_col]
        gold = None if gold is None else str(gold).strip()
        question = row[question_col]
        return {
            "prompt": format_prompt(question, fmt),
            "answer": gold,
            "_valid": bool(gold) and bool(parse_gold(gold)) and shot_key(question) not in shots,
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
            "%s: dropped %d of %d rows whose gold answer is missing or unparseable, or that are a few-shot example",
            source,
            dropped,
            len(converted),
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


def load_raw_table(
    name_or_path: str, config: str | None = None, split: str | None = None, field: str = "dataset_name"
):
    """The question/answer table of a known name (see `SOURCES`), a Hub id or a local file, as stored, and a label
    for messages."""
    path = Path(name_or_path)
    if path.suffix in LOCAL_FORMATS:
        if not path.exists():
            raise FileNotFoundError(f"{field}: local file {path} does not exist")
        if path.stat().st_size == 0:
            raise ValueError(f"{field}: local file {path} is empty")
        try:
            return load_dataset(LOCAL_FORMATS[path.suffix], data_files=str(path), split="train"), str(path)
        except (DatasetGenerationError, ArrowInvalid) as err:  # datasets' own message names neither file nor row
            raise ValueError(
                f"{field}: local file {path} is not valid {path.suffix[1:]}: {err.__cause__ or err}"
            ) from err
    source = SOURCES.get(name_or_path.lower(), MathSource(name_or_path))
    if source.packaged is not None:
        packaged = Path(__file__).parent / "data_files" / source.packaged
        return load_dataset("json", data_files=str(packaged), split="train"), name_or_path.lower()
    raw = load_dataset(source.hub_id, name=config or source.config, split=split or source.split)
    if source.filter_year is not None and "url" in raw.column_names:
        raw = raw.filter(lambda row: str(source.filter_year) in str(row["url"]))
    return raw, source.hub_id


def load_math_dataset(
    name_or_path: str, config: str | None = None, split: str | None = None, prompt_format: PromptFormat | None = None
) -> Dataset:
    """A known name (see `SOURCES`), a Hub id, or a local .jsonl/.json/.parquet file, normalised for training."""
    raw, label = load_raw_table(name_or_path, config, split)
    return to_math_prompts(raw, source=label, prompt_format=prompt_format)
