"""Trains AER on TRL's asynchronous GRPO with the local rollout worker on its lockstep schedule (`local_rollout_lag`)
in every process it is launched in, from a checkpoint where given, and writes what each rank saw as JSON: α per
optimizer step, the logged losses and entropies, and a checksum of the parameters. Launched by
tests/test_distributed.py with `accelerate launch --multi_gpu --num_processes 2` (gloo on CPU)."""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from aer_trl import AERAsyncGRPOConfig, AERAsyncGRPOTrainer  # noqa: E402
from tests import helpers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--resume_from_checkpoint")
    cli = parser.parse_args()
    args = AERAsyncGRPOConfig(
        output_dir=str(cli.output_dir), use_cpu=True, bf16=False, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=8, max_steps=4, token_budget=0, logging_steps=1, report_to="none",
        gradient_checkpointing=False, learning_rate=1e-2, save_strategy="steps", save_steps=2, disable_tqdm=True,
        aer_correctness_reward="always_wrong", aer_tau=2.0, aer_eta=0.05, local_rollouts=True, local_rollout_lag=2,
    )  # fmt: skip
    trainer = AERAsyncGRPOTrainer(
        model=cli.model, reward_funcs=[helpers.digit_count_reward, helpers.always_wrong], args=args,
        train_dataset=helpers.make_dataset(), processing_class=helpers.make_tokenizer(),
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=cli.resume_from_checkpoint)
    logs = [h for h in trainer.state.log_history if "loss" in h]
    record = {
        "alpha": [h["alpha"] for h in trainer.aer_callback.controller.history],
        "loss": {h["step"]: h["loss"] for h in logs},
        "entropy": {h["step"]: h["aer/entropy"] for h in logs},
        "lags": {h["step"]: sorted(k for k in h if k.startswith("aer/lag/") and k.endswith("/samples")) for h in logs},
        "checksum": float(sum(p.detach().double().sum() for p in trainer.model.parameters())),
    }
    rank = trainer.accelerator.process_index
    (cli.output_dir / f"rank{rank}.json").write_text(json.dumps(record))
    helpers.exit_launched_process(trainer.accelerator)


if __name__ == "__main__":
    main()
