"""Trains AER on a tiny model in every process it is launched in and writes what each rank saw as JSON.

Launched by tests/test_distributed.py with `accelerate launch --multi_gpu --num_processes 2` (gloo on CPU), with or
without DeepSpeed ZeRO-3. Per rank it records, for every rollout batch: the rewards gathered over all processes, the λ
this rank trained with, and α; plus the controller's history and whether parameters were really sharded.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from transformers import TrainerCallback  # noqa: E402

from aer_trl import AERGRPOConfig, AERGRPOTrainer, AERRLOOConfig, AERRLOOTrainer  # noqa: E402
from tests import helpers  # noqa: E402


class Recording:
    """Records, per rollout batch, the gathered rewards, this rank's λ and α (mixed into either AER trainer)."""

    rollouts: list

    def _generate_and_score_completions(self, inputs):
        alpha = self.aer_callback.alpha
        output = super()._generate_and_score_completions(inputs)
        self.rollouts.append(
            {
                "alpha": alpha,
                "rewards": self._recorded_rewards,
                "local_lambda": output["aer_lambda"].tolist(),
                "local_count": len(output["aer_lambda"]),
            }
        )
        return output

    def _calculate_rewards(self, *args, **kwargs):
        rewards = super()._calculate_rewards(*args, **kwargs)
        self._recorded_rewards = rewards[:, 0].tolist()
        return rewards


class RecordingTrainer(Recording, AERGRPOTrainer):
    pass


def bench_classes():
    """The research bench's config and trainer (its shared-prompt paths, `--share_prompt_*`), recording as above: the
    bench's own distributed test (bench/tests/test_distributed_bench.py) asks for them; the library's never do."""
    from aer_bench.training import BenchConfig, BenchGRPOTrainer

    class RecordingBenchTrainer(Recording, BenchGRPOTrainer):
        def _shared_prompt_logps(self, *args, **kwargs):
            out = super()._shared_prompt_logps(*args, **kwargs)
            self.shared_forwards = getattr(self, "shared_forwards", 0) + (out is not None)
            return out

        def _with_shared_prefill(self, *args):
            self.shared_rollouts = getattr(self, "shared_rollouts", 0) + 1
            return super()._with_shared_prefill(*args)

    return BenchConfig, RecordingBenchTrainer


class RecordingRLOOTrainer(Recording, AERRLOOTrainer):
    pass


class Delay(TrainerCallback):
    """Slows each optimizer step (a window to stop a "machine" in mid-run: tests/test_multinode.py)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def parameter_digest(trainer) -> dict:
    """name -> [sum, sum of squares] of every parameter in float64, gathered whole under ZeRO-3 (a collective: every
    rank calls it)."""
    import contextlib

    import torch

    model = (
        trainer.model_wrapped.module
        if trainer.is_deepspeed_enabled
        else trainer.accelerator.unwrap_model(trainer.model)
    )
    params = dict(model.named_parameters())
    gather = contextlib.nullcontext()
    if trainer.is_deepspeed_enabled:
        import deepspeed

        gather = deepspeed.zero.GatheredParameters(list(params.values()))
    with gather, torch.no_grad():
        return {n: [p.double().sum().item(), p.double().pow(2).sum().item()] for n, p in params.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--max_steps", type=int, default=3)
    parser.add_argument("--save_steps", type=int, default=0)
    parser.add_argument("--eval_bench", default=None, help="also validate every step with PassAtKCallback")
    parser.add_argument("--use_cpu", default="true", help="'false' on a GPU (tests/test_gpu.py)")
    parser.add_argument("--bf16", default="false")
    parser.add_argument("--share_prompt_forward", default="false", help="'true': each rank's shared prompt once")
    parser.add_argument("--share_prompt_generation", default="false", help="'true': each rank's prompt prefilled once")
    parser.add_argument("--moe", default="false", help="'true': a tiny Qwen3-MoE (router loss on) instead of Qwen3")
    parser.add_argument("--resume_from", default=None, help="a checkpoint to resume from")
    parser.add_argument("--step_delay", type=float, default=0.0, help="seconds to wait after each optimizer step")
    parser.add_argument("--trainer", default="grpo", choices=["grpo", "rloo"], help="which AER trainer trains")
    cli = parser.parse_args()
    passk = None
    if cli.eval_bench:
        from aer_trl.app.evaluation import PassAtKCallback

        passk = PassAtKCallback(cli.eval_bench, eval_steps=1, num_samples=2, k_list=[1, 2], max_new_tokens=2)

    tokenizer = helpers.make_tokenizer()
    rloo = cli.trainer == "rloo"
    shared = {
        "share_prompt_forward": cli.share_prompt_forward.lower() == "true",
        "share_prompt_generation": cli.share_prompt_generation.lower() == "true",
    }
    config_class, trainer_class = (AERRLOOConfig, RecordingRLOOTrainer) if rloo else (AERGRPOConfig, RecordingTrainer)
    if any(shared.values()):
        config_class, trainer_class = bench_classes()
    else:
        shared = {}
    args = helpers.make_config(
        cli.output_dir,
        config_class,
        # groups of 4: with 2 ranks, 2 completions each and every group spans both; with 1 (a GPU test), all 4
        per_device_train_batch_size=4 // int(os.environ.get("WORLD_SIZE", "1")),
        num_generations=4,
        max_steps=cli.max_steps,
        aer_rho=1.0,  # λ = α (1 - g): g can be read back from λ
        aer_alpha_init=0.5,
        aer_fixed_target=100.0,  # entropy always below target: α rises by η every iteration
        aer_eta=0.01,
        save_strategy="steps" if cli.save_steps or passk else "no",
        save_steps=cli.save_steps or 500,
        use_cpu=cli.use_cpu.lower() == "true",
        bf16=cli.bf16.lower() == "true",
        **({"beta": 0.0} if rloo else {}),  # RLOO's KL would load a reference model by the tiny model's (no) Hub id
        **shared,
    )
    moe = cli.moe.lower() == "true"
    trainer = trainer_class(
        model=helpers.make_moe_model(tokenizer, hidden_size=64)
        if moe
        else helpers.make_model(tokenizer, hidden_size=64),
        reward_funcs=[helpers.even_length_reward],
        args=args,
        train_dataset=helpers.make_dataset(),
        processing_class=tokenizer,
        callbacks=[cb for cb in (passk, Delay(cli.step_delay) if cli.step_delay else None) if cb],
    )
    trainer.rollouts = []
    trainer.train(resume_from_checkpoint=cli.resume_from)

    sharded = None
    if trainer.is_deepspeed_enabled:
        engine_params = list(trainer.model_wrapped.module.parameters())
        sharded = all(hasattr(p, "ds_tensor") and p.ds_tensor.numel() < p.ds_numel for p in engine_params)
    rank = trainer.accelerator.process_index
    digest = parameter_digest(trainer)
    record = {
        "rank": rank,
        "world_size": trainer.accelerator.num_processes,
        "deepspeed": trainer.is_deepspeed_enabled,
        "sharded": sharded,
        "shared_forwards": getattr(trainer, "shared_forwards", 0),  # micro-batches through the shared prompt path
        "shared_rollouts": getattr(trainer, "shared_rollouts", 0),  # rollouts with the shared prefill
        "rollouts": trainer.rollouts,
        "history": trainer.aer_callback.controller.history,
        "initial_entropy": trainer.aer_callback.initial_entropy,
        "target": trainer.aer_callback.target,
        "passk_history": passk.history if passk else None,
        "passk_best_step": passk.best_step if passk else None,
        "num_generations": args.num_generations,
        "rho": args.aer_rho,
        "parameters": digest,  # every parameter, whole (gathered under ZeRO-3): name -> [sum, sum of squares]
        "train_logs": [h for h in trainer.state.log_history if "loss" in h],
    }
    with open(os.path.join(cli.output_dir, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    helpers.exit_launched_process(trainer.accelerator)


if __name__ == "__main__":
    main()
