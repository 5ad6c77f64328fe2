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


def shipped_recipes(kind: str = "train", package: str = "aer_trl") -> dict[str, Path]:
    """The shipped recipes of a kind by name (`qwen3_4b_base/deepscaler/aer`): "train" (every training recipe) or
    "eval" (the evaluation recipes under `eval/`, named `eval/paper`)."""
    root = Path(str(files(package) / "recipes"))
    found = {}
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root)
        if (kind == "eval") != (rel.parts[0] == "eval") or rel.parts[0] == "accelerate_configs":
            continue
        found[rel.with_suffix("").as_posix()] = path
    return found


def describe_recipe(path: Path) -> str:
    """A recipe's description: the first sentence of its header comment (whole, however many lines it takes); a
    generated one's says what it changes and the setting of the aer.yaml it is generated from."""
    lines = [line[1:].strip() for line in path.read_text().splitlines() if line.startswith("#")]
    if not lines or not lines[0].startswith("GENERATED"):
        return _first_sentence(lines)
    change = lines[0].split(": ", 1)[-1].split(". Do not edit")[0]  # "method 'grpo'", "AER on RLOO (trainer: rloo)"
    setting = describe_recipe(path.with_name("aer.yaml"))
    return f"{change}: {setting.removeprefix('AER on ')}"


def _first_sentence(comment: list[str]) -> str:
    """The first sentence of a header comment's opening paragraph (its lines up to a blank or indented one)."""
    import re

    paragraph = []
    for line in comment:
        if not line or line.startswith(("accelerate ", "aer-", "python ")):
            if paragraph:
                break
            continue
        paragraph.append(line)
    text = " ".join(paragraph)
    end = re.search(r"\.(\s|$)", text)
    return text[: end.start() + 1] if end else text


def runs_on_cpu(path: Path) -> bool:
    """Whether a recipe is one for a CPU: it sets `use_cpu: true` (training) or `backend: transformers` (an evaluation
    recipe the package ships for a laptop)."""
    lines = [line for line in path.read_text().splitlines() if ":" in line and not line.startswith(("#", " "))]
    keys = {line.split(":", 1)[0]: line.split(":", 1)[1].split("#")[0].strip() for line in lines}
    return keys.get("use_cpu") == "true" or keys.get("backend") == "transformers"


def list_recipes(kind: str = "train", width: int = 119) -> str:
    """Every shipped recipe of a kind, grouped by the hardware it is for (a CPU's first), each with its whole
    description, wrapped to `width` under its name."""
    import textwrap

    rows = shipped_recipes(kind)
    pad = max(map(len, rows), default=0) + 2
    groups = {"on a CPU (a laptop; minutes)": [], "on GPUs": []}
    for name, path in rows.items():
        groups["on a CPU (a laptop; minutes)" if runs_on_cpu(path) else "on GPUs"].append((name, path))
    lines = []
    for title, members in groups.items():
        if not members:
            continue
        lines += [f"{title}:" if not lines else f"\n{title}:"]
        for name, path in members:
            text = textwrap.wrap(describe_recipe(path), width - pad - 2) or [""]
            lines.append(f"  {name:<{pad}}{text[0]}")
            lines += [" " * (pad + 2) + more for more in text[1:]]
    return "\n".join(lines)


def resolve_recipe(config: str, kind: str = "train") -> str:
    """A `--config` value as given, or, where no such file exists, the shipped recipe it names:
    `qwen3_4b_base/deepscaler/aer`, `.../aer.yaml` or `recipes/qwen3_4b_base/deepscaler/aer.yaml` (as the docs
    write it), so the documented commands run from an installed wheel in any folder. An unknown name is an error that
    lists the closest shipped names (those under the folder it names, where it names one)."""
    if Path(config).is_file():
        return config
    name = config.removeprefix("recipes/").removesuffix(".yaml")
    shipped = shipped_recipes(kind)
    if name in shipped:
        return str(shipped[name])
    import difflib

    under = [n for n in shipped if n.startswith(name.rstrip("/") + "/")]
    close = under or difflib.get_close_matches(name, list(shipped), n=5, cutoff=0.5)
    listing = "aer-train --list" if kind == "train" else "aer-evaluate --list"
    raise FileNotFoundError(
        f"--config {config!r}: no such file, and no shipped recipe of that name"
        + (f"; did you mean: {', '.join(close)}?" if close else "")
        + f" ({listing} prints all {len(shipped)})"
    )
