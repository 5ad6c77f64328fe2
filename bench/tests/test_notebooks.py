"""Every notebook executes headless in test mode (tiny model, a few steps) without a cell error."""

from pathlib import Path

import nbformat
import pytest

from aer_bench.notebooks import execute

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))

pytestmark = pytest.mark.slow


def test_the_notebooks_are_committed_without_outputs():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_entropy_dynamics.ipynb",
        "03_gpu_and_hub.ipynb",
        "04_real_llm.ipynb",
    ]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("AER_NOTEBOOK_MODE", "test")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    execute(path, timeout=600)  # per cell: a hang guard, not a speed target (load can slow a healthy run)


def test_notebooks_go_offline_only_in_test_mode():
    """A user's full run downloads its model and may push to the Hub: HF_HUB_OFFLINE is set under TEST only."""
    import json

    for path in NOTEBOOKS:
        setup = "".join(json.loads(path.read_text())["cells"][1]["source"])
        assert "if TEST:  # offline only in test mode" in setup and setup.count("HF_HUB_OFFLINE") == 1, path.name
