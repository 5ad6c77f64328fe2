"""The lab's 'pretrained base model': a tiny char-level Qwen3 warm-started with TRL's SFTTrainer, cached on disk."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from aer_trl.testing import build_char_tokenizer, build_tiny_qwen3

from .tasks import make_sft_dataset

logger = logging.getLogger(__name__)

DEFAULT_CACHE = Path(os.environ.get("AER_LAB_CACHE", "runs/lab"))


@dataclass(frozen=True)
class WarmStartConfig:
    """Everything that determines the warm-started model (its hash names the cache folder)."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_examples: int = 20000
    noise: float = 0.3
    epochs: float = 3.0
    learning_rate: float = 3e-3
    batch_size: int = 64
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]


WARM_START_PRESETS = {
    "default": WarmStartConfig(),
    "tiny": WarmStartConfig(hidden_size=32, num_layers=2, num_heads=2, num_examples=512, epochs=1.0, batch_size=64),
}


def warm_start_path(config: WarmStartConfig = WarmStartConfig(), cache_dir: str | Path = DEFAULT_CACHE) -> Path:
    return Path(cache_dir) / f"warmstart-{config.key()}"


def build_warm_start(
    config: WarmStartConfig = WarmStartConfig(),
    cache_dir: str | Path = DEFAULT_CACHE,
    force: bool = False,
    disable_tqdm: bool = False,
    callbacks=(),
) -> Path:
    """Return the folder of the warm-started model (and tokenizer), training it first when it is not cached
    (`callbacks`: more TrainerCallbacks for that training, e.g. a progress bar of one's own).

    The folder loads like any Hub model: `AutoModelForCausalLM.from_pretrained(path)`.
    """
    path = warm_start_path(config, cache_dir)
    if (path / "config.json").exists() and (path / "lab_meta.json").exists() and not force:
        logger.info("reusing the cached warm start at %s", path)
        return path

    from trl import SFTConfig, SFTTrainer

    from aer_trl.callbacks import replace_progress_bar

    tokenizer = build_char_tokenizer()
    model = build_tiny_qwen3(
        tokenizer,
        hidden_size=config.hidden_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        seed=config.seed,
    )
    dataset = make_sft_dataset(config.num_examples, seed=config.seed, noise=config.noise)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # per process: concurrent first runs never collide
    from accelerate.state import AcceleratorState, PartialState

    # accelerate keeps its device choice process-wide (shared state): the warm start's use_cpu=True must neither
    # inherit the run's choice nor leave its own behind (a GPU run that parsed its config first, as train_recipe
    # does, otherwise trained with the accelerator on cpu and its batches on cuda: seen on an H200)
    saved = {cls: dict(cls._shared_state) for cls in (PartialState, AcceleratorState)}
    AcceleratorState._reset_state(reset_partial_state=True)
    args = SFTConfig(
        output_dir=str(tmp),
        use_cpu=True,
        bf16=False,
        num_train_epochs=config.epochs,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=20,
        max_length=64,
        logging_steps=50,
        save_strategy="no",
        report_to="none",
        seed=config.seed,
        gradient_checkpointing=False,
        disable_tqdm=disable_tqdm,
        dataloader_num_workers=0,
    )
    try:
        trainer = SFTTrainer(
            model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=list(callbacks)
        )
        replace_progress_bar(trainer)
        trainer.train()
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        for cls, state in saved.items():
            cls._shared_state.update(state)
    trainer.model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "lab_meta.json").write_text(json.dumps({"warm_start": asdict(config)}, indent=2))
    import shutil

    if force and path.exists():
        shutil.rmtree(path)
    try:
        tmp.rename(path)  # written whole, then moved: an interrupted build never leaves a half model behind
    except OSError:  # another process finished the same warm start first: keep its copy (same seed, same model)
        shutil.rmtree(tmp, ignore_errors=True)
        if not (path / "lab_meta.json").exists():
            raise
    return path
