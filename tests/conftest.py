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
