"""One training run, from the three argument groups a recipe parses into; shared by the command line
(`aer_trl/app/run.py`, `recipes/train.py`), the notebooks and the research bench (which passes its own classes).

`train(script_args, training_args, model_args)` reads as: resolve the data source (`aer_trl.app.data`: its data, prompt
format, reward and default model), build the AER trainer the recipe names (`trainer:`, `aer_trl.app.trainers`), train
(resuming when asked), save, write the model card, push when `push_to_hub` is set. `train_recipe(recipe, overrides)`
parses a YAML recipe first, as the command line does.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import asdict, dataclass, field, fields, make_dataclass
from pathlib import Path

from ..callbacks import AERCallback, replace_progress_bar, use_compact_log_lines
from ..config import AERArguments
from ..hardware import busy_cores, cpu_threads, env_count
from ..settings import shaping_settings
from .checkpoints import RUN_LOCK, check_fresh_start, check_resume_adapter, lock_output_dir, resolve_resume
from .cli import check_keys
from .data import PromptArguments, get_source, hub_dataset_id, resolve_format
from .evaluation import PassAtKCallback
from .evaluation.engine_samplers import engine_sampler
from .evaluation.harness import check_model
from .files import unlock
from .gguf import base_model_id, base_model_source, resolve_model
from .rewards import resolve_reward_funcs, rewards
from .trainers import TRAINERS, check_recipe_for, config_class_for, recipe_keys, recipe_trainer, trainer_class_for

logger = logging.getLogger(__name__)


@dataclass
class AERScriptArguments(PromptArguments):
    """What to train on and with which rewards; the training knobs live in the trainer's config (`AERGRPOConfig`,
    `AERRLOOConfig`), the model in `ModelConfig`. The prompt-format keys come from `prompts.PromptArguments`. A data
    source with options of its own adds them in a subclass, parsed with `parse_recipe(..., script_class=...)` (the
    research bench's `lab` and `arithmetic` do)."""

    trainer: str = field(
        default="grpo",
        metadata={
            "help": "Which AER trainer trains: 'grpo' (AERGRPOTrainer, TRL's GRPO loss), 'rloo' (AERRLOOTrainer, "
            "TRL's RLOO loss) or 'async_grpo' (AERAsyncGRPOTrainer, TRL's asynchronous GRPO). It picks the config the "
            "other keys are read into (aer_trl.app.trainers).",
            "choices": sorted(TRAINERS),
        },
    )
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Training data: a registered source (`aer_trl.app.data.register_source`), the name of a known "
            "math data set, a Hub id, or a local .jsonl/.json/.parquet file. Sources with a default model fill in "
            "model_name_or_path when it is unset."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Data set configuration name, if any."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training rows."})
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": f"Reward functions by name ({sorted(rewards())}) or import path 'module.function'. "
            "The first defines correctness for AER unless aer_correctness_reward says otherwise. Unset: the data "
            "source's reward (math_accuracy for question/answer tables)."
        },
    )
    # checkpoint selection during training (the paper: pass@1 on AIME25 every 20 optimizer steps)
    eval_benchmark: str | None = field(
        default=None,
        metadata={
            "help": "Validate on this benchmark (a name such as aime25, or a local .jsonl/.parquet file) every "
            "eval_every_steps optimizer steps and keep the checkpoint with the best pass@1 (never rotated away; "
            "<output_dir>/best_checkpoint.json points to it). None: no validation."
        },
    )
    eval_every_steps: int = field(
        default=20,
        metadata={
            "help": "Optimizer steps between validations; for AER a multiple of the optimizer steps per rollout "
            "batch (a checkpoint can only be written at a rollout boundary)."
        },
    )
    eval_num_samples: int = field(default=8, metadata={"help": "Samples per validation problem (n)."})
    eval_k_list: list[int] = field(default_factory=lambda: [1, 8], metadata={"help": "k values logged (<= n)."})
    eval_max_new_tokens: int = field(default=8192, metadata={"help": "Generation budget of a validation sample."})
    eval_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the validation."})
    eval_max_problems: int | None = field(default=None, metadata={"help": "Validate on the first N problems only."})
    eval_batch_size: int = field(
        default=8,
        metadata={
            "help": "Validation problems per sampling call (each sampled eval_num_samples times): bounds a call's "
            "KV cache under transformers, and the requests handed to vLLM at once."
        },
    )
    eval_engine: str = field(
        default="auto",
        metadata={
            "help": "What samples the validation: 'vllm' (the run's own vLLM engine, colocated or server, its weights "
            "synced to the step validated), 'transformers' (`generate` on the training model; under ZeRO-3 it "
            "gathers every layer per token, so it is refused above eval_max_new_tokens 1024 there), or 'auto' "
            "(vllm when use_vllm, else transformers).",
            "choices": ["auto", "vllm", "transformers"],
        },
    )


def check_model_given(source, model_args) -> None:
    """A run on data without a default model names its model: nothing is filled in behind the user's back."""
    if model_args.model_name_or_path is None and source.default_model is None:
        raise ValueError(
            f"model_name_or_path: training on {source.name!r} needs a model: a Hub id, a local folder or a .gguf file"
        )
    if model_args.model_name_or_path is not None:
        check_model(model_args.model_name_or_path, field="model_name_or_path")


def use_cpu_cores(training_args: AERArguments) -> int | None:
    """On CPU, use the machine's free cores: `accelerate launch` sets OMP_NUM_THREADS=1 in its child processes (1.33x
    slower per step on 2 idle cores), and all the cores beside another job run several times slower. Each process gets
    its share of the cores other work leaves free now (`hardware.busy_cores`, `hardware.cpu_threads`, with a warning
    where it took some away); `AER_CPU_THREADS` overrides."""
    import torch

    if not (training_args.use_cpu or not torch.cuda.is_available()):
        return None
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # what DeepSpeed picks here anyway, without a warning that says so
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # set by the launcher
    threads = env_count("AER_CPU_THREADS")
    if threads is None:
        threads, busy = cpu_threads(os.cpu_count() or 1, busy_cores(), local)
        if busy and int(os.environ.get("LOCAL_RANK", "0")) == 0:
            logger.warning(busy)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def train(
    script_args: AERScriptArguments,
    training_args: AERArguments,
    model_args=None,
    trainer_class=None,
    callbacks=(),
):
    """Train, save, write the card and push, holding `output_dir`'s lock throughout (`lock_output_dir`).
    `trainer_class`: an AER trainer (None: the one `training_args` configures, `AERGRPOTrainer` for an
    `AERGRPOConfig`, `AERRLOOTrainer` for an `AERRLOOConfig`); `callbacks`: more TrainerCallbacks for the trainer (a
    `ProgressCallback` subclass replaces transformers' bar: `replace_progress_bar`)."""
    lock = lock_output_dir(training_args)
    try:
        resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
        if resume is None:
            check_fresh_start(training_args.output_dir)
        else:
            check_resume_adapter(resume, model_args)
        return _train(script_args, training_args, model_args, resume, trainer_class, list(callbacks))
    finally:  # released and removed however the run ends (a killed one leaves an unlocked file: harmless)
        unlock(lock, Path(training_args.output_dir) / RUN_LOCK)


def _train(script_args, training_args, model_args=None, resume: str | None = None, trainer_class=None, extra=()):
    from trl import ModelConfig, get_peft_config

    trainer_class = trainer_class or trainer_class_for(type(training_args).trainer_kind)

    model_args = model_args or ModelConfig()
    source = get_source(script_args.dataset_name)
    check_model_given(source, model_args)
    reward_funcs = resolve_reward_funcs(script_args.reward_funcs or list(source.reward_funcs))
    use_cpu_cores(training_args)
    prompt_format = resolve_format(source, script_args)
    dataset = source.load("train", script_args, prompt_format)
    if script_args.max_train_samples is not None:
        dataset = dataset.select(range(min(script_args.max_train_samples, len(dataset))))
    if model_args.model_name_or_path is not None:  # a .gguf file becomes a cached model folder
        model_name = resolve_model(model_args.model_name_or_path)
    else:
        model_name = source.default_model(script_args, training_args)
    data_description = source.card_text(script_args.dataset_name, prompt_format)  # printed once, below

    model_init_kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    model_init_kwargs = {k: v for k, v in model_init_kwargs.items() if v is not None}
    training_args.model_init_kwargs = {**model_init_kwargs, **(training_args.model_init_kwargs or {})}

    callbacks = []
    if script_args.eval_benchmark is not None:  # first: validation_sampler below reads callbacks[0]
        callbacks.append(
            PassAtKCallback(
                script_args.eval_benchmark,
                eval_steps=script_args.eval_every_steps,
                num_samples=script_args.eval_num_samples,
                k_list=script_args.eval_k_list,
                max_new_tokens=script_args.eval_max_new_tokens,
                temperature=script_args.eval_temperature,
                max_problems=script_args.eval_max_problems,
                batch_size=script_args.eval_batch_size,
                seed=training_args.seed,
                prompt_args=script_args,
                chat_template_kwargs=training_args.chat_template_kwargs,
            )
        )
    trainer = trainer_class(
        model=model_name,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset,
        peft_config=get_peft_config(model_args),
        callbacks=[*callbacks, *extra],
    )
    given = model_args.model_name_or_path
    trainer.aer_card.update(  # what its model card says, in every card it writes (a push's too)
        dataset_name=hub_dataset_id(script_args.dataset_name) or script_args.dataset_name,
        data_description=data_description,
        base_model=base_model_id(given) if given else None,
        base_model_source=base_model_source(given) if given else None,
        example_prompt=dataset[0]["prompt"] if len(dataset) else None,  # the usage snippet's prompt
    )
    if callbacks:
        callbacks[0].sampler_factory = validation_sampler(script_args, training_args, trainer)
    replace_progress_bar(trainer)
    use_compact_log_lines(trainer)  # one short line per log step; every value is in metrics.jsonl
    for cb in trainer.callback_handler.callbacks:  # a resume on another model, LoRA, data, prompts or rewards says so
        if isinstance(cb, AERCallback) and cb.settings is not None:
            cb.settings.update(
                shaping_settings({**asdict(model_args), **asdict(script_args), "train_rows": len(dataset)})
            )
    trainer.accelerator.print(f"Training data: {data_description}")
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(training_args.output_dir)
    trainer.create_model_card()
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}")
    if training_args.push_to_hub:
        trainer.push_to_hub()
        trainer.accelerator.print(f"Model pushed to the Hub: {trainer.hub_model_id}")
    return trainer


ZERO3_GENERATE_TOKENS = 1024  # above this, validation through `generate` under ZeRO-3 is refused (docs/gpu.md)


def validation_sampler(script_args, training_args, trainer):
    """What samples the validation (`eval_engine`): a factory over the run's vLLM engine, or None for transformers'
    `generate` on the training model; a combination that cannot work at its size is refused before step 1."""
    engine = script_args.eval_engine
    if engine not in ("auto", "vllm", "transformers"):
        raise ValueError(f"eval_engine must be 'auto', 'vllm' or 'transformers', got {engine!r}")
    if engine == "auto":
        engine = "vllm" if training_args.use_vllm else "transformers"
    if engine == "vllm":
        if not training_args.use_vllm:
            raise ValueError(
                "eval_engine: vllm validates through the run's own vLLM engine, and this run has none (use_vllm: "
                "false): set use_vllm: true, or eval_engine: transformers"
            )
        return functools.partial(engine_sampler, trainer)
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    if plugin is not None and plugin.zero_stage == 3 and script_args.eval_max_new_tokens > ZERO3_GENERATE_TOKENS:
        raise ValueError(
            f"eval_max_new_tokens={script_args.eval_max_new_tokens} through transformers' generate under ZeRO-3 "
            "gathers every layer for every token (hours per validation, and the KV cache beside the shards): "
            f"validate through vLLM (use_vllm: true, eval_engine: vllm), or keep eval_max_new_tokens <= "
            f"{ZERO3_GENERATE_TOKENS}, or evaluate the saved checkpoints with recipes/evaluate.py"
        )
    return None


def parse_recipe(args: list[str], script_class=AERScriptArguments, config_class=None):
    """(script_args, training_args, model_args) from command-line style arguments (`--config recipe.yaml` and flags
    that override it), as `recipes/train.py` parses them. A key no class knows is refused by name (TRL's parser).
    `script_class` / `config_class`: subclasses with more keys (a data source's options, an extension's settings);
    config_class None: the config of the recipe's `trainer:` (`aer_trl.app.trainers`)."""
    from trl import ModelConfig, TrlParser

    kind = recipe_trainer(args)
    config_class = config_class or config_class_for(kind)
    if config_class.trainer_kind != kind:
        raise ValueError(
            f"trainer: {kind}, but this command line parses recipes into {config_class.__name__}, which configures "
            f"trainer: {config_class.trainer_kind}"
        )
    check_recipe_for(args, config_class, (script_class, ModelConfig))
    shared = {f.name for f in fields(config_class)} & {f.name for f in fields(ModelConfig)}
    model_class = ModelConfig
    if shared:  # TRL's asynchronous GRPO config has ModelConfig's `dtype`: one flag, read into the training config
        keep = [(f.name, f.type, f) for f in fields(ModelConfig) if f.name not in shared]
        model_class = make_dataclass("ModelConfig", keep, bases=())
    classes = (script_class, config_class, model_class)
    check_keys(recipe_keys(args), classes, f"a recipe ({', '.join(c.__name__ for c in classes)})")
    script_args, training_args, model_args = TrlParser(classes).parse_args_and_config(args=args)
    for name in shared:
        setattr(model_args, name, getattr(training_args, name))
    return script_args, training_args, model_args


def train_recipe(
    recipe: str | Path,
    overrides: list[str] = (),
    script_class=AERScriptArguments,
    config_class=None,
    trainer_class=None,
    callbacks=(),
):
    """Train one YAML recipe with command-line style overrides; returns (script_args, training_args, trainer). The
    classes and `callbacks` as in `parse_recipe` and `train`."""
    script_args, training_args, model_args = parse_recipe(
        ["--config", str(recipe), *overrides], script_class, config_class
    )
    return script_args, training_args, train(script_args, training_args, model_args, trainer_class, callbacks)
