"""A killed asynchronous run resumes exactly, on the real LLM: the CPU recipe `smollm2_135m_instruct/gsm8k/aer_async`
(SmolLM2-135M-Instruct on GSM8K through `AERAsyncGRPOTrainer`, the local rollout worker on the lockstep schedule
`local_rollout_lag`) trained uninterrupted; the same run killed with SIGKILL as soon as its checkpoint is complete and
started again with `resume_from_checkpoint: latest`. Printed: for each step after the checkpoint, which logged
training values differ (none expected: loss, gradient norm, α, H0, H*, entropy, λ and the samples per lag), and
whether the final weights are bit-identical. Exit status 1 where anything differs.

    python benchmarks/async_resume.py --output_dir runs/async_resume    # ~3 min on 2 CPU cores
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

RECIPE = "smollm2_135m_instruct/gsm8k/aer_async"
# values the trainer logs when it collates (rewards, sizes: one micro-batch ahead) or measures time
NOT_TRAINING = ("perf/", "sample/", "batch/", "reward", "completions/", "epoch", "train_")


def command(out: Path, args) -> list[str]:
    return [
        sys.executable, "-m", "aer_trl.app.run", "--config", RECIPE, "--output_dir", str(out),
        "--max_steps", str(args.max_steps), "--save_strategy", "steps", "--save_steps", str(args.save_steps),
        "--save_total_limit", "2", "--local_rollout_lag", str(args.lag),
        "--max_completion_length", str(args.max_completion_length),
    ]  # fmt: skip


def train(cmd: list[str], log: Path, kill_after: Path | None = None) -> int:
    """Runs `cmd` (its own process group); with `kill_after`, SIGKILLs the group once that file exists."""
    with log.open("w") as sink:
        process = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        while kill_after is not None and process.poll() is None and not kill_after.is_file():
            time.sleep(0.2)
        if kill_after is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        return process.wait()


def training_logs(out: Path) -> dict[int, dict]:
    from aer_trl.metrics import read_metrics

    return {
        r["step"]: {k: v for k, v in r.items() if not k.startswith(NOT_TRAINING)}
        for r in read_metrics(out / "metrics.jsonl")
        if "loss" in r
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", type=Path, default=Path("runs/async_resume"))
    parser.add_argument("--max_steps", type=int, default=6)
    parser.add_argument("--save_steps", type=int, default=3)
    parser.add_argument("--lag", type=int, default=2)
    parser.add_argument("--max_completion_length", type=int, default=32)
    args = parser.parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    whole, killed = args.output_dir / "whole", args.output_dir / "killed"
    checkpoint = killed / f"checkpoint-{args.save_steps}"
    start = time.perf_counter()
    if train(command(whole, args), args.output_dir / "whole.log") != 0:
        raise SystemExit(f"the uninterrupted run failed: {args.output_dir / 'whole.log'}")
    whole_s = time.perf_counter() - start
    code = train(command(killed, args), args.output_dir / "killed.log", kill_after=checkpoint / "trainer_state.json")
    if code != -signal.SIGKILL:
        raise SystemExit(f"the run to kill ended by itself (exit {code}) before {checkpoint} was complete")
    resumed = [*command(killed, args), "--resume_from_checkpoint", "latest"]
    if train(resumed, args.output_dir / "resumed.log") != 0:
        raise SystemExit(f"the resumed run failed: {args.output_dir / 'resumed.log'}")

    import torch
    from safetensors.torch import load_file

    a, b = training_logs(whole), training_logs(killed)
    after = range(args.save_steps + 1, args.max_steps + 1)
    differing = {s: sorted(k for k in a[s].keys() | b.get(s, {}).keys() if a[s].get(k) != b.get(s, {}).get(k))
                 for s in after}  # fmt: skip
    wa, wb = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    same_weights = wa.keys() == wb.keys() and all(torch.equal(wa[n], wb[n]) for n in wa)
    report = {
        "recipe": RECIPE, "max_steps": args.max_steps, "killed_after_checkpoint": args.save_steps,
        "local_rollout_lag": args.lag, "uninterrupted_run_s": round(whole_s, 1),
        "inflight_groups_in_checkpoint": len(json.loads((checkpoint / "rollout_inflight.json").read_text())["groups"]),
        "alpha": [a[s].get("aer/alpha") for s in sorted(a)],
        "samples_by_lag": {s: {k.split("/")[2]: v for k, v in a[s].items() if k.endswith("/samples")} for s in a},
        "differing_values_after_resume": differing, "final_weights_bit_identical": same_weights,
    }  # fmt: skip
    print(json.dumps(report, indent=1))
    return 0 if same_weights and not any(differing.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
