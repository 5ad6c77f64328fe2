"""Files the package ships and reads at run time: the YAML recipes under `aer_trl/recipes/` (the repository's
`recipes/<setting>` folders link to them, and to the research bench's under `bench/aer_bench/recipes/`), found the
same way from a checkout, an editable install or a wheel."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def recipes_dir(setting: str = "", package: str = "aer_trl") -> Path:
    """The folder of one setting's recipes, e.g. `qwen3_4b_base/deepscaler` ("" for all), in `package` (another
    package that ships recipes the same way: the research bench's `aer_bench`)."""
    root = Path(str(files(package) / "recipes"))
    path = root / setting
    if not path.is_dir():
        known = sorted(str(p.parent.relative_to(root)) for p in root.rglob("*.yaml"))
        raise FileNotFoundError(f"no recipe folder {setting!r} in {root}; known: {sorted(set(known))}")
    return path


def recipe_path(setting: str, name: str, package: str = "aer_trl") -> Path:
    """One recipe file: `recipe_path("qwen3_4b_base/deepscaler", "aer")` is
    `aer_trl/recipes/qwen3_4b_base/deepscaler/aer.yaml`."""
    path = recipes_dir(setting, package) / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise FileNotFoundError(f"no recipe {name!r} for {setting!r} in {path.parent}; known: {known}")
    return path


def resolve_recipe(config: str) -> str:
    """A `--config` value as given, or, where no such file exists, the shipped recipe it names:
    `qwen3_4b_base/deepscaler/aer`, `.../aer.yaml` or `recipes/qwen3_4b_base/deepscaler/aer.yaml` (as the docs
    write it), so the documented commands run from an installed wheel in any folder."""
    if Path(config).is_file():
        return config
    name = config.removeprefix("recipes/").removesuffix(".yaml")
    setting, _, stem = name.rpartition("/")
    try:
        return str(recipe_path(setting, stem))
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"--config {config!r}: no such file, and no shipped recipe of that name ({e})"
        ) from None
