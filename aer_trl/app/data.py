"""Where a run's data comes from, and how it becomes prompts (docs/design.md §0).

Data sources: what a run trains and evaluates on, asked for by name (`dataset_name`, `benchmarks`). A source knows
how to load its splits, its prompt format's defaults and few-shot pool, its reward, its default model (if any) and the
line the model card says about it. A training run (`aer_trl.app.training`) and the evaluation harness ask
`get_source(name)` and never branch on what the data is. Add one with `register_source(DataSource(...))` (the
research bench adds `lab` and `arithmetic` so: `aer_bench.lab.sources`); any other name is a question/answer table:

- a known math name (`deepscaler`, `gsm8k`, `aime25`, ... see `MATH_TABLES`), a Hub id, or a local
  .jsonl/.json/.parquet file. Every loader returns a `datasets.Dataset` with a conversational `prompt` built by
  `aer_trl.app.prompts.format_prompt` (by default: the question and an instruction to put the final answer in
  `\\boxed{}`; a conversational question keeps every turn) and an `answer` column (the gold answer text). Rows whose
  gold answer is missing or cannot be parsed by math-verify are dropped and counted in a warning, never kept silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset, load_dataset
from datasets.exceptions import DatasetGenerationError
from pyarrow import ArrowInvalid

from ..card import hub_dataset_id as card_hub_id
from ..plugins import Registry
from .data_names import KNOWN_DATA, LOCAL_FORMATS, MATH_TABLES, MathTable
from .prompts import BOXED_INSTRUCTION, PromptArguments, PromptFormat, draw_shots, format_prompt, solved_text
from .rewards import parse_gold

logger = logging.getLogger(__name__)

__all__ = [
    "DataSource",
    "PromptArguments",
    "get_source",
    "register_source",
    "sources",
    "option",
    "resolve_format",
    "load_math_dataset",
    "to_math_prompts",
    "MATH_TABLES",
]

QUESTION_COLUMNS = ("problem", "question", "prompt")
ANSWER_COLUMNS = ("answer", "solution")


def hub_offline() -> bool:
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def check_hub_id(name: str, field: str) -> None:
    """A name that is no known data set and no local file must be a Hub id (owner/name): a misspelt short name is
    refused at once, with the known names, instead of datasets' retries against the Hub."""
    if name.count("/") != 1 or name.startswith("/") or name.endswith("/"):
        import difflib

        close = difflib.get_close_matches(name.lower(), list(MATH_TABLES), n=3, cutoff=0.6)
        raise ValueError(
            f"{field}: {name!r} is no known data set, Hub id or local file"
            + (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "")
            + f". {KNOWN_DATA}"
        )


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
    """The Hub id of a training data set name, for links: a known name's (`MATH_TABLES`), else the card's rule (an
    `owner/name` that is no local file); None for the lab, local files and unknown names."""
    if name and name.lower() in MATH_TABLES:
        return MATH_TABLES[name.lower()].hub_id
    return card_hub_id(name)


def load_raw_table(
    name_or_path: str, config: str | None = None, split: str | None = None, field: str = "dataset_name"
):
    """The question/answer table of a known name (see `MATH_TABLES`), a Hub id or a local file, as stored, and a label
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
    source = MATH_TABLES.get(name_or_path.lower(), MathTable(name_or_path))
    if source.packaged is not None:
        packaged = Path(__file__).parent / "data_files" / source.packaged
        return load_dataset("json", data_files=str(packaged), split="train"), name_or_path.lower()
    if name_or_path.lower() not in MATH_TABLES:
        check_hub_id(name_or_path, field)
    try:
        raw = load_dataset(source.hub_id, name=config or source.config, split=split or source.split)
    except (FileNotFoundError, ConnectionError, OSError) as err:  # datasets' DatasetNotFoundError is one
        offline = " (HF_HUB_OFFLINE=1: only the local cache is read)" if hub_offline() else ""
        raise FileNotFoundError(f"{field}: {name_or_path!r} could not be loaded from the Hub{offline}: {err}. "
                                f"{KNOWN_DATA}") from err  # fmt: skip
    if source.filter_year is not None and "url" in raw.column_names:
        raw = raw.filter(lambda row: str(source.filter_year) in str(row["url"]))
    return raw, source.hub_id


def load_math_dataset(
    name_or_path: str,
    config: str | None = None,
    split: str | None = None,
    prompt_format: PromptFormat | None = None,
    field: str = "dataset_name",
) -> Dataset:
    """A known name (see `MATH_TABLES`), a Hub id, or a local .jsonl/.json/.parquet file, normalised for training;
    `field`: the setting that named it, for messages."""
    raw, label = load_raw_table(name_or_path, config, split, field=field)
    return to_math_prompts(raw, source=label, prompt_format=prompt_format)


# ------------------------------------------------------------------------------------------ data sources
@dataclass(frozen=True)
class DataSource:
    """One kind of data. `load(split, args, fmt)` returns a Dataset with `prompt` and `answer` (plus any metadata
    column, e.g. `difficulty`); `shot_pool(args)` returns solved (question, solution) pairs for few-shot prompts."""

    name: str
    about: str
    load: Callable[[str, object, PromptFormat], Dataset]
    reward_funcs: tuple[str, ...] = ("math_accuracy",)
    format_defaults: PromptFormat = PromptFormat()
    default_shots: int = 0
    shot_pool: Callable[[object], list[tuple[str, str]]] | None = None
    default_model: Callable[[object, object], str] | None = None
    eval_split: str = "test"
    chat: bool = True  # False: raw text prompts (the lab's character-level model); no prompt format applies

    def card_text(self, name: str, fmt: PromptFormat | None) -> str:
        text = f"`{name}`: {self.about}"
        return f"{text}; prompts: {fmt.summary()}" if fmt is not None and self.chat else text


SOURCE_REGISTRY: Registry[DataSource] = Registry(
    "data source", field="dataset_name", group="aer_trl.data", check=lambda s: isinstance(s, DataSource)
)


def register_source(source: DataSource, *, name: str | None = None, replace: bool = False) -> DataSource:
    """Adds `source` under its name (`replace=True` to redefine a name); `aer_trl.plugins`."""
    return SOURCE_REGISTRY.register(source, name=name, replace=replace)


def sources() -> Mapping[str, DataSource]:
    """The registered data sources by name (a read-only view); any other name is a question/answer table."""
    return SOURCE_REGISTRY.view()


def get_source(name: str | None, field: str = "dataset_name") -> DataSource:
    """The registered source called `name`, else the question/answer table source (known math names, Hub ids and
    local files); `field`: the setting that named it, for messages."""
    if not name:
        raise ValueError(
            "dataset_name: say what to train on: a registered source "
            f"({', '.join(sorted(SOURCE_REGISTRY.view()))}), a known math data set (deepscaler, dapo-math-17k, "
            "gsm8k, ...), a Hub id or a local .jsonl/.json/.parquet file"
        )
    return SOURCE_REGISTRY.get(name) if name in SOURCE_REGISTRY else _table_source(name, field)


def option(args, name, default=None):
    """A source's option `name` from the run's arguments (`default` where they lack it or leave it unset)."""
    value = getattr(args, name, None)
    return default if value is None else value


def resolve_format(source: DataSource, args) -> PromptFormat | None:
    """The prompt format of a run: the user's prompt_* settings over the source's defaults, shots drawn once."""
    if not source.chat:
        given = [f for f in ("prompt_system", "prompt_instruction", "prompt_num_shots") if option(args, f) is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: the {source.name!r} source has raw text prompts; no format applies")
        return None
    d = source.format_defaults
    num_shots = option(args, "prompt_num_shots", source.default_shots)
    shots: tuple = ()
    if num_shots:
        pool_name = option(args, "prompt_shots_pool")
        if pool_name is not None:
            raw, label = load_raw_table(pool_name, field="prompt_shots_pool")
            pool = solved_examples(raw, source=label)
        elif source.shot_pool is not None:
            pool = source.shot_pool(args)
        else:
            raise ValueError(
                f"prompt_num_shots={num_shots}: the {source.name!r} source has no pool of solved examples; "
                "name one with prompt_shots_pool (a question/answer file or data set, kept apart from the training "
                "rows)"
            )
        shots = draw_shots(pool, num_shots, seed=option(args, "prompt_shots_seed", 0))
    return PromptFormat(
        system=option(args, "prompt_system", d.system),
        instruction=option(args, "prompt_instruction", d.instruction),
        shots=shots,
    )


def _table_source(name: str, field: str = "dataset_name") -> DataSource:
    def load(split, args, fmt):
        config = getattr(args, "dataset_config", None)
        train_split = getattr(args, "dataset_train_split", None) if split == "train" else None
        return load_math_dataset(name, config=config, split=train_split, prompt_format=fmt, field=field)

    known = MATH_TABLES.get(name.lower())
    about = f"the math data set {known.hub_id}" if known else "question/answer rows"
    return DataSource(name=name, about=about, load=load, format_defaults=PromptFormat(instruction=BOXED_INSTRUCTION))
