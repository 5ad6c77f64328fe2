"""Trains AER (bonus on) on a tiny Qwen3-MoE with vLLM colocated on the CPU and writes, as JSON, TRL's log-prob gap per
step and how far vLLM's next-token log-probs are from the trained and from the initial model after a final sync.

Run by tests/test_vllm.py in a process of its own, as a user's run is: vLLM sets up its expert-parallel group with the
first engine of a process only, so a MoE engine after a dense one in the same process cannot be built.
`--no_sync`: the weight sync does nothing (the engine keeps the initial policy); the run must stop with the drift
guard's error, which is written instead. `--trainer rloo`: AERRLOOTrainer (RLOO logs no log-prob gap: TRL has no
vLLM importance-sampling correction there; the served log-probs are the check).
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from aer_trl import AERGRPOTrainer, AERRLOOConfig, AERRLOOTrainer  # noqa: E402
from aer_trl.upstream.vllm_engine import EngineDriftError  # noqa: E402
from tests import helpers  # noqa: E402

GAP = "sampling/sampling_logp_difference/mean"


@torch.no_grad()
def next_token_logprobs(model, ids):
    return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)


def served_logprobs(trainer, ids, k=5):
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, temperature=1.0, logprobs=k, seed=0)
    out = trainer.vllm_generation.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
    return {token: lp.logprob for token, lp in out[0].outputs[0].logprobs[0].items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--expert_size", type=int, default=48)  # vLLM's CPU kernel pads it to 64
    parser.add_argument("--max_steps", type=int, default=3)
    parser.add_argument("--no_sync", action="store_true")
    parser.add_argument("--trainer", default="grpo", choices=["grpo", "rloo"])
    args = parser.parse_args()
    root = Path(args.output_dir)
    tokenizer = helpers.make_tokenizer()
    path = root / "model"
    helpers.make_moe_model(tokenizer, hidden_size=128, expert_size=args.expert_size).save_pretrained(path)
    tokenizer.save_pretrained(path)
    rloo = args.trainer == "rloo"
    config = helpers.make_config(
        root / "run",
        *([AERRLOOConfig] if rloo else []),
        **({"beta": 0.0} if rloo else {}),
        use_vllm=True,
        vllm_mode="colocate",
        aer_tau=1.5,
        aer_eta=0.01,
        aer_alpha_init=0.05,
        learning_rate=5e-2,
        max_steps=args.max_steps,
    )
    trainer = (AERRLOOTrainer if rloo else AERGRPOTrainer)(
        model=str(path),
        reward_funcs=[helpers.even_length_reward],
        args=config,
        train_dataset=helpers.make_dataset(),
        processing_class=tokenizer,
    )
    if args.no_sync:  # the engine keeps the initial policy: TRL's sync (and AER's fix around it) never runs
        trainer.vllm_generation.sync_weights = lambda: None
    result = {}
    try:
        trainer.train()
    except EngineDriftError as error:
        result["drift_error"] = str(error)
    logs = [h for h in trainer.state.log_history if "loss" in h]
    result["gap_by_step"] = [h[GAP] for h in logs if GAP in h]
    result["aux_loss_by_step"] = [h.get("aux_loss") for h in logs]
    result["alpha_by_step"] = [h.get("aer/alpha") for h in logs]
    if "drift_error" not in result:
        trainer.vllm_generation.sync_weights()
        initial = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        trained = trainer.model.eval()
        result["served"] = []
        for prompt in ("3+4=", "12+5="):
            ids = tokenizer(prompt, add_special_tokens=False).input_ids
            served = served_logprobs(trainer, ids)
            now, before = next_token_logprobs(trained, ids), next_token_logprobs(initial, ids)
            result["served"].append(
                {
                    "prompt": prompt,
                    "gap_trained": max(abs(served[t] - now[t].item()) for t in served),
                    "gap_initial": max(abs(served[t] - before[t].item()) for t in served),
                }
            )
    (root / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
