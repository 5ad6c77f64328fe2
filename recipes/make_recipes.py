"""Writes the baseline/ablation recipes from each setting's AER recipe, so every row shares one budget and data.

    python recipes/make_recipes.py          # (re)write them
    python recipes/make_recipes.py --check  # exit 1 if a committed recipe differs (the test suite runs this)

A recipe for method M is its setting's `aer.yaml` with `method: M` and M's own keys appended; edit the base
`aer.yaml` (or the method's `recipe` keys in aer_trl/methods.py) and re-run, never the generated files.
"""

import argparse
import sys
from pathlib import Path

from aer_trl.families import family
from aer_trl.methods import get_method, methods

try:  # registers the research bench's methods, for the bench's recipes (the lab's, the arithmetic tiers')
    import aer_bench.training  # noqa: F401

    BENCH = True
except ImportError:  # the library alone (its tests run without the bench): the library's recipes only
    BENCH = False

HERE = Path(__file__).resolve().parent
# Each method's own keys (paper-scale, laptop lab) and comment come from its registry entry (aer_trl/methods.py).
SETTINGS = {
    # base recipe -> methods generated beside it (Table 1 rows; component ablation on Qwen3-8B; generalisation)
    "lab/aer.yaml": [name for name, m in methods().items() if name != "aer" and "grpo" in m.trainers],
    "qwen3_4b_base/deepscaler/aer.yaml": ["grpo", "clip_higher", "ent_adv", "kl_cov", "clip_cov"],
    "qwen3_8b_base/deepscaler/aer.yaml": [
        "grpo",
        "clip_higher",
        "ent_adv",
        "kl_cov",
        "clip_cov",
        "entropy_coef",
        "aer_fixed",
        "aer_c1",
        "aer_c2c3",
        "skywork",
    ],
    "qwen3_4b_base/dapo_math_17k/aer.yaml": ["grpo", "clip_higher"],
    "smollm2_135m_instruct/gsm8k/aer.yaml": ["grpo"],
    "smollm2_135m_instruct/arithmetic/aer.yaml": ["grpo", "clip_higher", "clip_cov", "kl_cov", "skywork"],
    "smollm2_135m_instruct/arithmetic_gpu/aer.yaml": ["grpo", "clip_cov", "kl_cov"],
    "qwen3_8b_base/dapo_math_17k/aer.yaml": ["grpo", "clip_higher"],
    # the appendix (table "Scalability and Generalization Analysis"): GRPO, Clip-Higher and AER
    "qwen3_30b_a3b_base/deepscaler/aer.yaml": ["grpo", "clip_higher"],
    "llama3_1_8b_base/deepscaler/aer.yaml": ["grpo", "clip_higher"],
}


# AER on TRL's RLOO loss (`trainer: rloo`, aer_trl.app.trainers): `aer_rloo.yaml` beside these settings' aer.yaml
RLOO_SETTINGS = ["smollm2_135m_instruct/gsm8k/aer.yaml", "qwen3_4b_base/deepscaler/aer.yaml"]
RLOO_LINE = "trainer: rloo  # AERRLOOTrainer: AER on TRL's RLOO loss (leave-one-out baseline, clipped sequence ratio)"

# AER on TRL's asynchronous GRPO (`trainer: async_grpo`): `aer_async.yaml` beside this setting's aer.yaml, without
# the keys asynchronous GRPO has no field for (it samples with its own worker and has no KL term), and what it adds
ASYNC_SETTINGS = {
    "smollm2_135m_instruct/gsm8k/aer.yaml": [
        "trainer: async_grpo  # AERAsyncGRPOTrainer: TRL's asynchronous GRPO, samples up to max_staleness old",
        "local_rollouts: true  # sample with a copy of the policy in this process (no vLLM server): the CPU path",
        "max_staleness: 4",
        "token_budget: 0  # rows of per_device_train_batch_size samples (no vLLM server to ask for a length)",
        "# local_rollout_lag: 2  # a run that resumes exactly: each group sampled 2 versions before it is trained",
    ],
    "smollm2_135m_instruct/arithmetic/aer.yaml": [
        "trainer: async_grpo  # AERAsyncGRPOTrainer: TRL's asynchronous GRPO, samples up to max_staleness old",
        "local_rollouts: true  # sample with a copy of the policy in this process (no vLLM server): the CPU path",
        "max_staleness: 4",
        "token_budget: 0  # rows of per_device_train_batch_size samples (no vLLM server to ask for a length)",
        "# local_rollout_lag: 2  # a run that resumes exactly: each group sampled 2 versions before it is trained",
    ],
    "qwen3_4b_base/deepscaler/aer.yaml": [
        "trainer: async_grpo  # AERAsyncGRPOTrainer: rollouts from a vLLM server (trl vllm-serve), docs/gpu.md",
        "max_staleness: 4",
        "vllm_server_base_url: http://localhost:8000",
    ],
}
ASYNC_DROP = ("beta", "generation_kwargs", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization",
              "vllm_enable_sleep_mode", "steps_per_generation", "eval_", "share_prompt_")  # fmt: skip

_MEASURED_ONLY = "# AER's keys: measurements only here (aer_measurements: H* = aer_tau x H0), no bonus"


def _drop_aer(lines: list[str], telemetry: bool) -> list[str]:
    """A baseline's copy of aer.yaml without AER's part: the comment lines that begin with "AER", and the comment
    block right above the AER keys. The keys go too, unless the recipe keeps AER's measurements on (aer_measurements:
    its target distance uses aer_tau), where one line says what they are for."""
    out, block = [], []
    for line in lines:
        if line.startswith("#"):
            block.append(line)
            continue
        if line.startswith("aer_") and not line.startswith("aer_measurements:"):
            if block:
                block = [_MEASURED_ONLY] * telemetry
            if telemetry:
                out += block + [line]
            block = []
            continue
        out += [c for c in block if not c.startswith("# AER")] + [line]
        block = []
    return out + block


def render(base_text: str, method: str, lab: bool) -> str:
    lines = base_text.splitlines()
    out = [f"# GENERATED by recipes/make_recipes.py from aer.yaml beside it: method '{method}'. Do not edit by hand."]
    spec = get_method(method)
    if spec.recipe_note:
        out.append(f"# {spec.recipe_note}")
    if not spec.aer:
        lines = _drop_aer(lines, telemetry=any(line.startswith("aer_measurements: true") for line in lines))
    for line in lines:
        if line.startswith("#") and "--config" in line:
            line = line.replace("/aer.yaml", f"/{method}.yaml")
        if line == "" and out and out[-1] == "":
            continue  # a dropped AER block leaves one blank line, not two
        if line.startswith("method:"):
            line = f"method: {method}"
        elif line.startswith("output_dir:"):
            line = line.rstrip().removesuffix("aer").rstrip("/-") + ("/" if lab else "-") + method
        out.append(line)
    extras = spec.lab_recipe if lab and spec.lab_recipe is not None else spec.recipe
    if extras:
        out.append(f"# {method}")
        out += [f"{key}: {value}" for key, value in extras.items()]
    return "\n".join(out) + "\n"


def trainer_header(kind: str, base_header: list[str], name: str, keys: list[str]) -> list[str]:
    """The header of a recipe of trainer family `kind`: the base recipe's where the family launches, moves α and
    samples as GRPO does (RLOO), else one written from the family (aer_trl.families): the base's description (its
    lines before the first command), the launch commands, the processes, α's cadence and where rollouts come from."""
    f, grpo = family(kind), family("grpo")
    if (f.launch, f.alpha_cadence, f.rollouts) == (grpo.launch, grpo.alpha_cadence, grpo.rollouts):
        return base_header
    config = next((line.split("--config ")[1].split()[0] for line in base_header if "--config recipes/" in line), "")
    local = any(key.startswith("local_rollouts: true") for key in keys)
    described = next((i for i, line in enumerate(base_header) if line.startswith("#   ")), 1)  # up to the commands
    lines = [*base_header[:described], "#   " + (f"{f.launch} --config {config}" if config else f.launch)]
    if any("aer-train --config" in line for line in base_header):  # a recipe the package ships, run by name
        lines.append(f"#   aer-train --config {config.removeprefix('recipes/')}")
    lines.append(f"# Trainer: {f.trainer_name} on {f.trl_trainer} (trainer: {kind}).")
    lines += [f"# Processes: {f.processes}.", f"# AER moves alpha {f.alpha_cadence}."]
    rollouts = f.rollouts.split("; or, with local_rollouts: true, ")
    lines.append(
        "# Rollouts: "
        + (f"with local_rollouts: true, {rollouts[1]}." if local and len(rollouts) > 1 else f"{rollouts[0]}.")
    )
    return lines


def render_trainer(base_text: str, name: str, kind: str, keys: list[str], drop: tuple[str, ...] = ()) -> str:
    """The setting's aer.yaml trained by another AER trainer (`<name>.yaml`, trainer family `kind`): its keys but those
    starting with `drop`, `keys` after the method, the output folder suffixed with the name's tail (aer_rloo -> -rloo),
    and the header of its family (`trainer_header`)."""
    what = f"AER on {family(kind).title} (trainer: {kind})"
    out = [f"# GENERATED by recipes/make_recipes.py from aer.yaml beside it: {what}. Do not edit."]
    lines = base_text.splitlines()
    first_key = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    header = [line.replace("/aer.yaml", f"/{name}.yaml") if "--config" in line else line for line in lines[:first_key]]
    out += trainer_header(kind, header, name, keys)
    comments: list[str] = []  # the comment lines right above a key go with it
    for line in lines[first_key:]:
        if line.startswith("#"):
            comments.append(line)
            continue
        if drop and line.startswith(drop):
            comments = []
            continue
        out += comments
        comments = []
        if line.startswith("output_dir:"):
            line = line.rstrip() + "-" + name.removeprefix("aer_")
        out.append(line)
        if line.startswith("method:"):
            out += keys
    return "\n".join(out + comments) + "\n"


def generated() -> dict[Path, str]:
    """Every generated recipe's path and content (the bench's only where the bench is installed)."""
    bench = (HERE.parent / "bench").resolve()

    def bases(settings) -> list[tuple[Path, str]]:
        chosen = [(HERE / base, base) for base in settings]
        return [(path, base) for path, base in chosen if BENCH or bench not in path.resolve().parents]

    files = {}
    for path, base in bases(SETTINGS):
        for method in SETTINGS[base]:
            files[path.with_name(f"{method}.yaml")] = render(path.read_text(), method, lab=base.startswith("lab/"))
    for path, _ in bases(RLOO_SETTINGS):
        files[path.with_name("aer_rloo.yaml")] = render_trainer(path.read_text(), "aer_rloo", "rloo", [RLOO_LINE])
    for path, base in bases(ASYNC_SETTINGS):
        files[path.with_name("aer_async.yaml")] = render_trainer(
            path.read_text(), "aer_async", "async_grpo", ASYNC_SETTINGS[base], ASYNC_DROP
        )
    return files


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    for target, content in generated().items():
        if args.check:
            if not target.exists() or target.read_text() != content:
                stale.append(str(target.relative_to(HERE)))
        else:
            target.write_text(content)
    if stale:
        print("stale generated recipes (run python recipes/make_recipes.py):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
