"""Data sources: what a run trains and evaluates on, asked for by name (`dataset_name`, `benchmarks`).

A source knows how to load its splits, its prompt format's defaults and few-shot pool, its reward, its default
model (if any) and the line the model card says about it. A training run (`aer_trl.training`) and the evaluation
harness ask `get_source(name)` and never branch on what the data is:

- a known math name (`deepscaler`, `gsm8k`, `aime25`, ... see `aer_trl.data.SOURCES`), a Hub id, or a local
  .jsonl/.json/.parquet file: question/answer tables.

Add one with `register_source(DataSource(...))` (the research bench adds `lab` and `arithmetic` so:
`aer_bench.lab.sources`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from datasets import Dataset

from .prompts import BOXED_INSTRUCTION, PromptArguments, PromptFormat, draw_shots

logger = logging.getLogger(__name__)

__all__ = [
    "DataSource",
    "PromptArguments",
    "get_source",
    "register_source",
    "option",
    "resolve_format",
    "SOURCE_REGISTRY",
]


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


SOURCE_REGISTRY: dict[str, DataSource] = {}


def register_source(source: DataSource) -> DataSource:
    SOURCE_REGISTRY[source.name] = source
    return source


def get_source(name: str | None) -> DataSource:
    """The registered source called `name`, else the question/answer table source (known math names, Hub ids and
    local files)."""
    if not name:
        raise ValueError(
            "dataset_name: say what to train on: a registered source "
            f"({', '.join(sorted(SOURCE_REGISTRY))}), a known math data set (deepscaler, dapo-math-17k, gsm8k, ...), "
            "a Hub id or a local .jsonl/.json/.parquet file"
        )
    return SOURCE_REGISTRY.get(name, _table_source(name))


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
            from .data import load_raw_table, solved_examples

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


# ------------------------------------------------------------------------------------------------------ sources
def _table_source(name: str) -> DataSource:
    from .data import SOURCES, load_math_dataset

    def load(split, args, fmt):
        config = getattr(args, "dataset_config", None)
        train_split = getattr(args, "dataset_train_split", None) if split == "train" else None
        return load_math_dataset(name, config=config, split=train_split, prompt_format=fmt)

    known = SOURCES.get(name.lower())
    about = f"the math data set {known.hub_id}" if known else "question/answer rows"
    return DataSource(name=name, about=about, load=load, format_defaults=PromptFormat(instruction=BOXED_INSTRUCTION))
