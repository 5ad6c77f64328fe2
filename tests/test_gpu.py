"""The package on a CUDA machine (`pytest -m gpu`; skipped where no GPU is visible): bf16 training with AER, the
evaluation harness on cuda, and DeepSpeed ZeRO-3 on one GPU. (The research bench's on cuda: bench/tests/
test_gpu_bench.py.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import helpers

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_bf16_aer_training_on_cuda(tmp_path):
    tokenizer = helpers.make_tokenizer()
    args = helpers.make_config(tmp_path, use_cpu=False, bf16=True, max_steps=3, aer_alpha_init=0.05)
    trainer = helpers.make_trainer(tokenizer, args)
    assert trainer.accelerator.device.type == "cuda"
    trainer.train()
    assert next(trainer.model.parameters()).device.type == "cuda"
    logged = [r for r in trainer.state.log_history if "aer/entropy" in r]
    assert logged and all(torch.isfinite(torch.tensor(r["aer/entropy"])) for r in logged)


def test_evaluation_harness_on_cuda(tmp_path):
    from aer_trl.app.evaluation import EvalArguments, evaluate

    tokenizer = helpers.make_tokenizer()
    model_dir = tmp_path / "tiny"
    helpers.save_model(tokenizer, model_dir)
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps({"question": f"{i}?", "answer": str(i % 3)}) + "\n" for i in range(6)))
    args = EvalArguments(
        models=[str(model_dir)],
        benchmarks=[str(bench)],
        output_dir=str(tmp_path / "eval"),
        num_samples=4,
        k_list=[1, 4],
        max_new_tokens=3,
        backend="transformers",
    )
    entry = evaluate(args)[str(model_dir)][str(bench)]
    assert entry["fingerprint"]["device"] == "cuda" and entry["fingerprint"]["dtype"] == "bfloat16"
    assert entry["num_problems"] == 6


@pytest.mark.skipif(not __import__("importlib").util.find_spec("deepspeed"), reason="needs deepspeed")
def test_deepspeed_zero3_on_one_gpu(tmp_path):
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # carried packages too
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=pythonpath)
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "recipes" / "accelerate_configs" / "zero3.yaml"),
        "--num_processes",
        "1",
        str(ROOT / "tests" / "scripts" / "distributed_run.py"),
        "--output_dir",
        str(tmp_path),
        "--max_steps",
        "2",
        "--save_steps",
        "2",
        "--use_cpu",
        "false",
        "--bf16",
        "true",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "checkpoint-2" / "trainer_state.json").exists()
