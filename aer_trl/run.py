"""Training entry point shared by `recipes/train.py`, the lab demo and the notebooks.

`train(script_args, training_args, model_args)` loads the model (by Hub id or local path, or the lab's warm start),
the data (the lab's arithmetic, or a data set by name/file), the reward functions by name, builds
`AERGRPOTrainer`, trains (resuming when asked), saves, writes the model card and pushes when `push_to_hub` is set.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

from .config import AERConfig
from .lab.rewards import lab_accuracy_reward
from .metrics import MetricsFileCallback
from .rewards import math_accuracy_reward

REWARD_FUNCS = {
    "math_accuracy": math_accuracy_reward,
    "math_accuracy_reward": math_accuracy_reward,
    "lab_accuracy": lab_accuracy_reward,  # the same check, plus per-tier accuracy metrics for the lab
}


@dataclass
class AERScriptArguments:
    """What to train on and with which rewards; the training knobs live in `AERConfig`, the model in `ModelConfig`."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Training data: the name of a known data set, a Hub id or a local .jsonl/.json/.parquet "
            "file. None: the laptop lab's synthetic arithmetic."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Data set configuration name, if any."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training rows."})
    reward_funcs: list[str] = field(
        default_factory=lambda: ["math_accuracy"],
        metadata={
            "help": f"Reward functions by name ({sorted(REWARD_FUNCS)}) or import path 'module.function'. "
            "The first defines correctness for AER unless aer_correctness_reward says otherwise."
        },
    )
    lab_train_size: int = field(default=4096, metadata={"help": "Lab only: number of training problems."})
    lab_data_seed: int = field(default=0, metadata={"help": "Lab only: seed of the problem generator."})
    lab_tiers: list[int] | None = field(default=None, metadata={"help": "Lab only: difficulty tiers to train on."})
    lab_warm_start: str = field(
        default="default",
        metadata={"help": "Lab only: warm-start preset, 'default' (0.8M parameters) or 'tiny' (for quick checks)."},
    )
    lab_cache_dir: str = field(
        default="runs/lab", metadata={"help": "Lab only: where the warm-started model is cached."}
    )


def resolve_reward_funcs(names: list[str]) -> list:
    funcs = []
    for name in names:
        if name in REWARD_FUNCS:
            funcs.append(REWARD_FUNCS[name])
        elif "." in name:
            module_path, func_name = name.rsplit(".", 1)
            sys.path.insert(0, os.getcwd())
            try:
                funcs.append(getattr(importlib.import_module(module_path), func_name))
            except (ImportError, AttributeError) as err:
                raise ValueError(f"reward_funcs: cannot import {name!r}: {err}") from err
        else:
            raise ValueError(f"reward_funcs: unknown reward {name!r}; known: {sorted(REWARD_FUNCS)} or 'module.func'")
    if not funcs:
        raise ValueError("reward_funcs: at least one reward function is needed")
    return funcs


def lab_model_and_data(script_args: AERScriptArguments, training_args: AERConfig):
    """The lab's warm-started model path (built and cached on first use) and its training problems."""
    from .lab.tasks import make_arithmetic_dataset
    from .lab.warmstart import WARM_START_PRESETS, build_warm_start

    if script_args.lab_warm_start not in WARM_START_PRESETS:
        raise ValueError(
            f"lab_warm_start: unknown preset {script_args.lab_warm_start!r}; known: {sorted(WARM_START_PRESETS)}"
        )
    config = WARM_START_PRESETS[script_args.lab_warm_start]
    with training_args.main_process_first(desc="lab warm start"):  # rank 0 builds it, the others then reuse it
        path = build_warm_start(config, cache_dir=script_args.lab_cache_dir, disable_tqdm=training_args.disable_tqdm)
    dataset = make_arithmetic_dataset(
        script_args.lab_train_size, seed=script_args.lab_data_seed, tiers=script_args.lab_tiers
    )
    return str(path), dataset


def load_train_dataset(script_args: AERScriptArguments):
    from .data import load_math_dataset

    dataset = load_math_dataset(
        script_args.dataset_name, config=script_args.dataset_config, split=script_args.dataset_train_split
    )
    if script_args.max_train_samples is not None:
        dataset = dataset.select(range(min(script_args.max_train_samples, len(dataset))))
    return dataset


def train(script_args: AERScriptArguments, training_args: AERConfig, model_args=None):
    from trl import ModelConfig, get_peft_config

    from .trainer import AERGRPOTrainer

    model_args = model_args or ModelConfig()
    reward_funcs = resolve_reward_funcs(script_args.reward_funcs)

    if model_args.model_name_or_path is None or script_args.dataset_name is None:
        lab_path, lab_data = lab_model_and_data(script_args, training_args)
    model_name = model_args.model_name_or_path or lab_path
    dataset = lab_data if script_args.dataset_name is None else load_train_dataset(script_args)

    model_init_kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    model_init_kwargs = {k: v for k, v in model_init_kwargs.items() if v is not None}
    training_args.model_init_kwargs = {**model_init_kwargs, **(training_args.model_init_kwargs or {})}

    trainer = AERGRPOTrainer(
        model=model_name,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
        callbacks=[MetricsFileCallback()],
    )
    trainer.aer_dataset_name = script_args.dataset_name or "aer_trl lab: synthetic arithmetic"
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.create_model_card(dataset_name=trainer.aer_dataset_name)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=trainer.aer_dataset_name)
        trainer.accelerator.print(f"Model pushed to the Hub: {trainer.hub_model_id}")
    return trainer
