"""What a real-LLM training step costs with each rollout path: TRL's `generate` (each prompt prefilled
num_generations times), `share_prompt_generation` (each distinct prompt prefilled once, its KV cache repeated for its
group) and, where vLLM is installed (`.venv-vllm`, `make install-vllm`), TRL's colocated vLLM. Each path trains the
real recipe (`recipes/smollm2_135m_instruct/arithmetic/aer.yaml`: SmolLM2-135M-Instruct, 4 prompts x 8 completions,
2-shot prompts, 24 new tokens) for a few steps from the same seed, in this one process; printed per path: engine or
trainer start, median generation time per step and median step time (first step left out), and the ratio to TRL's
generate measured in the same run.

    python benchmarks/rollout_paths.py                                   # transformers paths (.venv)
    .venv-vllm/bin/python benchmarks/rollout_paths.py --paths trl shared vllm --json runs/bench/rollouts.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

PATHS = {
    "trl": ["--share_prompt_generation", "false"],
    "shared": ["--share_prompt_generation", "true"],
    # the recipe's generation_kwargs ({use_cache: true}) are transformers' and vLLM's SamplingParams refuses them
    "vllm": ["--use_vllm", "true", "--vllm_mode", "colocate", "--generation_kwargs", "{}"],
}


def run_path(name: str, steps: int, workdir: Path) -> dict:
    from aer_bench.training import BenchGRPOTrainer, parse_recipe, train
    from aer_trl.app.resources import recipes_dir

    generation: list[float] = []
    cls = BenchGRPOTrainer  # the library's trainer with the bench's shared rollout
    original_generate, original_init = cls._generate_single_turn, cls.__init__
    start = {}

    def timed_generate(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original_generate(self, *args, **kwargs)
        finally:
            generation.append(time.perf_counter() - t0)

    def timed_init(self, *args, **kwargs):
        t0 = time.perf_counter()
        original_init(self, *args, **kwargs)
        start["trainer_init_s"] = time.perf_counter() - t0

    recipe = recipes_dir("smollm2_135m_instruct/arithmetic", "aer_bench") / "aer.yaml"
    out = workdir / name
    args = ["--config", str(recipe), "--output_dir", str(out), "--max_steps", str(steps), "--save_strategy", "no"]
    cls._generate_single_turn, cls.__init__ = timed_generate, timed_init
    try:
        script_args, training_args, model_args = parse_recipe(args + PATHS[name])
        train(script_args, training_args, model_args)
    finally:
        cls._generate_single_turn, cls.__init__ = original_generate, original_init
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step_times = [r["step_time"] for r in records if "step_time" in r][1:]
    return {
        "path": name,
        "steps": steps,
        "trainer_init_s": start.get("trainer_init_s"),
        "generation_s": statistics.median(generation[1:]) if len(generation) > 1 else None,
        "step_s": statistics.median(step_times) if step_times else None,
        "reward": [r.get("reward") for r in records if "reward" in r],
    }


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paths", nargs="+", default=["trl", "shared"], choices=list(PATHS))
    parser.add_argument("--steps", type=int, default=5, help="training steps per path (the first is left out)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    import torch

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.paths:
            results.append(run_path(name, args.steps, Path(tmp)))
    reference = next((r for r in results if r["path"] == "trl"), None)
    threads, steps = torch.get_num_threads(), args.steps
    print(f"\nthreads {threads}, torch {torch.__version__}, {steps} steps per path (the first left out)")
    print("| path | trainer start (s) | generation per step (s) | step (s) | step / TRL's generate |")
    print("|---|---|---|---|---|")
    for r in results:
        ratio = r["step_s"] / reference["step_s"] if reference and r["step_s"] else float("nan")
        print(
            f"| {r['path']} | {r['trainer_init_s']:.1f} | {r['generation_s']:.2f} | {r['step_s']:.2f} | {ratio:.2f} |"
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
