"""Files the package ships and reads at run time: the YAML recipes under `aer_trl/recipes/` (the repository's
`recipes/<setting>` folders link to them), found the same way from a checkout, an editable install or a wheel."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def recipes_dir(setting: str = "") -> Path:
    """The folder of one setting's recipes, e.g. `lab` or `smollm2_135m_instruct/arithmetic` ("" for all)."""
    root = Path(str(files("aer_trl") / "recipes"))
    path = root / setting
    if not path.is_dir():
        known = sorted(str(p.parent.relative_to(root)) for p in root.rglob("*.yaml"))
        raise FileNotFoundError(f"no recipe folder {setting!r} in {root}; known: {sorted(set(known))}")
    return path


def recipe_path(setting: str, name: str) -> Path:
    """One recipe file: `recipe_path("lab", "aer")` is `aer_trl/recipes/lab/aer.yaml`."""
    path = recipes_dir(setting) / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise FileNotFoundError(f"no recipe {name!r} for {setting!r} in {path.parent}; known: {known}")
    return path
