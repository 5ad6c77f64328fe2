"""aer_trl.run: the training command line (aer-train, python -m aer_trl.run, recipes/train.py)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_train_script_default_is_the_lab(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "recipes"))
    import train  # recipes/train.py

    import aer_trl.run

    captured = {}
    monkeypatch.setattr(aer_trl.run, "train", lambda s, t, m: captured.update(script=s, training=t, model=m))
    train.main(["--output_dir", str(tmp_path)])
    assert captured["script"].dataset_name == "lab" and captured["model"].model_name_or_path is None
    assert captured["training"].use_cpu and captured["training"].method == "aer"
    assert captured["training"].output_dir == str(tmp_path)  # flags override the YAML
