"""conftest.py for TRL's GRPO trainer tests run offline (copied next to them by benchmarks/trl_suite.py).

- Hub ids: `HF_HUB_CACHE` points at a cache of tiny local models built by trl_suite.py under the ids TRL's tests ask
  for (`trl-internal-testing/tiny-Qwen2ForCausalLM-2.5`, ...); `HF_HUB_OFFLINE=1`, so nothing is downloaded.
- Data sets: `datasets.load_dataset("trl-internal-testing/zen", config, ...)` reads the local JSON Lines copy.
- The trainer under test: `AER_SUITE_TRAINER` = `trl` (TRL's own `GRPOTrainer`), `aer` (`AERGRPOTrainer` with its
  default method, a `trl.GRPOConfig` converted as a user's would be) or `aer_grpo` (`AERGRPOTrainer` with
  `method="grpo"`). It replaces `trl.GRPOTrainer` before the test module imports it.
"""

import importlib.util
import json
import os
import re
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("WANDB_DISABLED", "true")

import datasets  # noqa: E402
import pytest  # noqa: E402
import trl  # noqa: E402
from trl import import_utils  # noqa: E402

HERE = Path(__file__).resolve().parent

# TRL's testing_utils.py of another TRL version may import `is_<package>_available` helpers the installed TRL lacks:
# each missing one is supplied as "is the package importable" (it only decides which tests skip).
for _package in re.findall(r"\bis_(\w+)_available\b", (HERE / "testing_utils.py").read_text()):
    if not hasattr(import_utils, f"is_{_package}_available"):
        setattr(
            import_utils,
            f"is_{_package}_available",
            lambda *args, _package=_package, **kwargs: importlib.util.find_spec(_package) is not None,
        )
SETTINGS = json.loads((HERE / "suite_settings.json").read_text())
_load_dataset = datasets.load_dataset


def load_dataset(path, name=None, split=None, streaming=False, **kwargs):
    local = SETTINGS["datasets"].get(path)
    if local is None:
        return _load_dataset(path, name, split=split, streaming=streaming, **kwargs)
    folder = Path(local) / (name or "default")
    if not folder.is_dir():
        raise FileNotFoundError(f"no local copy of {path!r} config {name!r} at {folder}")
    files = {p.stem: str(p) for p in sorted(folder.glob("*.jsonl"))}
    return _load_dataset("json", data_files=files, split=split, streaming=streaming)


datasets.load_dataset = load_dataset

TRAINER = os.environ.get("AER_SUITE_TRAINER", "trl")
if TRAINER != "trl":
    from aer_trl import AERGRPOConfig, AERGRPOTrainer

    if TRAINER == "aer":
        trl.GRPOTrainer = AERGRPOTrainer
    elif TRAINER == "aer_grpo":

        class GRPOMethodTrainer(AERGRPOTrainer):
            """`AERGRPOTrainer` with method='grpo': a `trl.GRPOConfig` converted with that one field changed."""

            def __init__(self, model, reward_funcs=None, args=None, *pos_args, **kwargs):
                if args is not None and not isinstance(args, AERGRPOConfig):
                    args = AERGRPOConfig.from_grpo_config(args, method="grpo")
                super().__init__(model, reward_funcs, args, *pos_args, **kwargs)

        trl.GRPOTrainer = GRPOMethodTrainer
    else:
        raise ValueError(f"AER_SUITE_TRAINER must be trl, aer or aer_grpo, got {TRAINER!r}")


@pytest.fixture(autouse=True)
def cpu_without_accelerator(monkeypatch):
    """TRL's configs default to bf16, which transformers refuses without a GPU unless `use_cpu` is set: on a machine
    without CUDA every TRL config (ours included: AERGRPOConfig derives from GRPOConfig) is built with use_cpu=True, as
    TRL's own test setup does."""
    import torch
    from trl.trainer.base_config import _BaseConfig

    if torch.cuda.is_available():
        return
    post_init = _BaseConfig.__post_init__

    def on_cpu(self):
        self.use_cpu = True
        post_init(self)

    monkeypatch.setattr(_BaseConfig, "__post_init__", on_cpu)
