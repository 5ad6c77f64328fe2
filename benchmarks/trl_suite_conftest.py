"""conftest.py for TRL's GRPO or RLOO trainer tests run offline (copied next to them by benchmarks/trl_suite.py).

- Hub ids: `HF_HUB_CACHE` points at a cache of tiny local models built by trl_suite.py under the ids TRL's tests ask
  for (`trl-internal-testing/tiny-Qwen2ForCausalLM-2.5`, ...); `HF_HUB_OFFLINE=1`, so nothing is downloaded.
- Data sets: `datasets.load_dataset("trl-internal-testing/zen", config, ...)` reads the local JSON Lines copy.
- The trainer under test (`AER_SUITE` = grpo | rloo): `AER_SUITE_TRAINER` = `trl` (TRL's own trainer), `aer` (AER's
  trainer with its default method, a TRL config converted as a user's would be), `aer_grpo` | `aer_rloo` (AER's
  trainer with TRL's plain method) or `aer_bonus` (AER with aer_alpha_init 0.1: the bonus on from the first step).
  It replaces `trl.GRPOTrainer` | `trl.RLOOTrainer` before the test module imports it.
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

SUITE = os.environ.get("AER_SUITE", "grpo")
TRAINER = os.environ.get("AER_SUITE_TRAINER", "trl")
VARIANTS = {"aer": {}, f"aer_{SUITE}": {"method": SUITE}, "aer_bonus": {"aer_alpha_init": 0.1}}
if TRAINER != "trl":
    import aer_trl

    if SUITE not in ("grpo", "rloo") or TRAINER not in VARIANTS:
        raise ValueError(f"AER_SUITE must be grpo or rloo and AER_SUITE_TRAINER one of trl, {list(VARIANTS)}")
    base = getattr(aer_trl, f"AER{SUITE.upper()}Trainer")
    fields = VARIANTS[TRAINER]

    class SuiteTrainer(base):
        """AER's trainer; a TRL config converted with `fields` changed (none for `aer`)."""

        def __init__(self, model, reward_funcs=None, args=None, *pos_args, **kwargs):
            if fields and args is not None and not isinstance(args, base.config_class):
                args = base.config_class.from_trl_config(args, **fields)
            super().__init__(model, reward_funcs, args, *pos_args, **kwargs)

    setattr(trl, f"{SUITE.upper()}Trainer", SuiteTrainer if fields else base)


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
