"""Recipes: every YAML (the package's copies, linked from recipes/) loads strictly; accelerate configs load."""

from pathlib import Path

import pytest
from trl import TrlParser

from aer_trl import AERRLOOConfig
from aer_trl.app.resources import recipe_path, recipes_dir
from aer_trl.app.training import parse_recipe
from aer_trl.families import family
from aer_trl.methods import get_method

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted(  # the package's copies; recipes/<setting> in the repository links to them
    p for p in recipes_dir().rglob("*.yaml") if "accelerate_configs" not in p.parts and "eval" not in p.parts
)
EVAL_RECIPES = sorted((ROOT / "recipes" / "eval").glob("*.yaml"))
ACCELERATE_CONFIGS = sorted((ROOT / "recipes" / "accelerate_configs").glob("*.yaml"))
CPU = ["--bf16", "false", "--use_cpu", "true"]  # the paper recipes ask for bf16 on GPUs


def parse(path, *extra):
    """A recipe as `aer-train` parses it: into the config of the trainer its `trainer:` key names."""
    return parse_recipe(["--config", str(path), *CPU, *extra])


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_recipe_loads_in_strict_mode(recipe):
    script, training_args, _ = parse(recipe)
    kind = {"aer_rloo": "rloo", "aer_async": "async_grpo"}.get(recipe.stem, "grpo")
    assert type(training_args).trainer_kind == kind and script.trainer == kind
    # the recommended AER settings may name a registry variant of AER (e.g. aer_cap)
    if recipe.stem in ("aer", "aer_rloo", "aer_async"):
        assert get_method(training_args.method).aer
    else:
        assert training_args.method == recipe.stem


# the paper-scale settings (folder) -> the GPUs their batch arithmetic is written for, and the model
PAPER_SETTINGS = {
    "qwen3_4b_base": (8, "Qwen/Qwen3-4B-Base"),
    "qwen3_8b_base": (8, "Qwen/Qwen3-8B-Base"),
    "qwen3_30b_a3b_base": (16, "Qwen/Qwen3-30B-A3B-Base"),  # the appendix's MoE: 488 GB of ZeRO-3 state
    "llama3_1_8b_base": (8, "meta-llama/Llama-3.1-8B"),  # the appendix's base model of another family
}


def test_paper_recipes_carry_the_papers_hyperparameters():
    paper = [r for r in RECIPES if r.parts[-3] in PAPER_SETTINGS and r.stem in ("aer", "aer_rloo")]  # synchronous
    assert len(paper) == 7
    for recipe in paper:
        _, args, model = parse(recipe)
        gpus, model_id = PAPER_SETTINGS[recipe.parts[-3]]
        assert args.learning_rate == 1e-6 and args.beta == 0.0 and args.max_completion_length == 8192
        assert (args.aer_rho, args.aer_tau, args.aer_eta) == (0.2, 0.4, 0.005)
        assert args.use_vllm and args.vllm_mode == "colocate"
        per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * gpus // args.num_generations
        per_rollout = args.per_device_train_batch_size * args.steps_per_generation * gpus // args.num_generations
        assert (per_step, per_rollout) == (32, 128)  # prompts per optimizer step / per rollout batch
        assert model.model_name_or_path == model_id
        assert f"{gpus} GPUs" in recipe.read_text()  # the header's batch arithmetic is for that count


@pytest.mark.parametrize("method", ["aer", "grpo", "clip_higher"])
def test_the_appendix_rows_have_recipes_with_their_models_needs(method):
    """Qwen3-30B-A3B and Llama-3.1-8B-Base, each with the three methods the appendix compares. The MoE: the router
    loss set explicitly (none, docs/design.md), vLLM with tensor and expert parallelism; the base model: the plain
    prompt template, a stop where it would begin a next question, vLLM's context kept to the run's."""
    _, moe, _ = parse(recipes_dir() / "qwen3_30b_a3b_base" / "deepscaler" / f"{method}.yaml")
    assert moe.router_aux_loss_coef == 0.0 and moe.vllm_enable_expert_parallel and moe.vllm_tensor_parallel_size == 4
    _, llama, _ = parse(recipes_dir() / "llama3_1_8b_base" / "deepscaler" / f"{method}.yaml")
    assert llama.chat_template_path == "plain" and llama.generation_kwargs == {"stop": ["\nQuestion:"]}
    for args in (moe, llama):
        assert args.method == method and args.vllm_max_model_length == 9216 and args.max_steps < 500


@pytest.mark.parametrize(
    "recipe",
    [r for r in RECIPES if r.parts[-3] in PAPER_SETTINGS and r.stem != "aer_async"],  # async: a vLLM server, below
    ids=lambda p: p.parts[-3] + "/" + p.name,
)
def test_paper_recipes_have_a_budget_and_validate_through_vllm(recipe):
    """Every paper-scale recipe (AER and its generated baselines): a bounded run, validation at the paper's cadence
    through the run's own vLLM engine, and a baseline's copy carries none of AER's keys or notes."""
    script, args, _ = parse(recipe)
    assert args.max_steps == 480 and args.use_vllm
    assert script.eval_benchmark == "aime25" and script.eval_engine == "vllm" and script.eval_every_steps == 20
    assert script.eval_batch_size * script.eval_num_samples <= 64
    text = recipe.read_text()
    if not get_method(args.method).aer:
        assert "aer_" not in text.replace("aer_trl", "") and "# AER" not in text, recipe.name


def test_a_recipe_picks_its_trainer_and_wrong_trainer_settings_are_refused_by_name(tmp_path):
    rloo = tmp_path / "rloo.yaml"
    rloo.write_text("method: aer\ntrainer: rloo\noutput_dir: out\nnormalize_advantages: true\n")
    _, args, _ = parse(rloo)
    assert isinstance(args, AERRLOOConfig) and args.normalize_advantages
    with pytest.raises(ValueError, match=r"normalize_advantages: a setting of AERRLOOConfig \(trainer: rloo\), not of "
                       r"AERGRPOConfig \(trainer: grpo\).*set trainer: rloo"):  # fmt: skip
        parse(rloo, "--trainer", "grpo")  # the flag overrides the recipe's key
    with pytest.raises(ValueError, match=r"trainer: 'rlo' is not an AER trainer; accepted: \['async_grpo', 'grpo', "
                       r"'rloo'\] \(did you mean 'rloo'\?\)"):  # fmt: skip
        parse(rloo, "--trainer", "rlo")
    with pytest.raises(ValueError, match="method='ent_adv' does not train with AERRLOOConfig"):
        parse(rloo, "--method", "ent_adv")
    grpo_keys = tmp_path / "grpo_keys.yaml"
    grpo_keys.write_text("method: aer\ntrainer: rloo\noutput_dir: out\nloss_type: dapo\n")
    with pytest.raises(ValueError, match=r"loss_type: a setting of AERGRPOConfig \(trainer: grpo\), not of AERRLOOCo"):
        parse(grpo_keys)


def test_the_async_recipes_sample_from_a_worker_with_the_papers_settings():
    """`aer_async`: the paper's AER settings on TRL's asynchronous GRPO; on CPU a local rollout worker (no server), on
    GPUs a vLLM server; none of the synchronous trainers' generation keys."""
    _, cpu, _ = parse(recipes_dir() / "smollm2_135m_instruct" / "gsm8k" / "aer_async.yaml")
    assert cpu.local_rollouts and cpu.max_staleness == 4 and cpu.token_budget == 0
    _, gpu, model = parse(recipes_dir() / "qwen3_4b_base" / "deepscaler" / "aer_async.yaml")
    assert not gpu.local_rollouts and gpu.vllm_server_base_url == "http://localhost:8000"
    assert (gpu.aer_rho, gpu.aer_tau, gpu.aer_eta, gpu.learning_rate) == (0.2, 0.4, 0.005, 1e-6)
    assert model.model_name_or_path == "Qwen/Qwen3-4B-Base" and model.dtype == gpu.dtype == "bfloat16"


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.stem in ("aer_rloo", "aer_async")], ids=lambda p: p.stem)
def test_a_generated_recipes_header_fits_its_trainer(recipe):
    """recipes/make_recipes.py writes each trainer's recipe with its family's header (aer_trl.families): read back,
    the launch line, α's cadence and the rollout engine are the ones that trainer has."""
    _, args, _ = parse(recipe)
    kind = type(args).trainer_kind
    lines = recipe.read_text().splitlines()
    header = "\n".join(lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))])
    f = family(kind)
    if kind == "async_grpo":
        assert f"#   {f.launch} --config recipes/" in header and f"# AER moves alpha {f.alpha_cadence}." in header
        assert f"# Processes: {f.processes}." in header
        for wrong in ("zero3", "once per rollout batch", "colocate"):
            assert wrong not in header, wrong
        assert ("copy of the policy in this process" in header) == args.local_rollouts
        assert ("trl vllm-serve" in header) == (not args.local_rollouts)
    else:  # RLOO launches, moves α and samples as GRPO: the GRPO recipe's header, its own path in the commands
        base = recipe.with_name("aer.yaml").read_text().replace("/aer.yaml", f"/{recipe.name}")
        assert header.split("\n", 1)[1] == "\n".join(line for line in base.splitlines()[: header.count("\n")])


def test_unknown_recipe_key_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: aer\naer_rhoo: 0.3\n")
    with pytest.raises(ValueError, match="aer_rhoo"):
        parse(bad)


@pytest.mark.parametrize("config", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_configs_load(config):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(config))
    assert cfg.num_processes >= 1 and cfg.mixed_precision == "bf16"


@pytest.mark.parametrize("recipe", EVAL_RECIPES, ids=lambda p: p.name)
def test_eval_recipes_load_in_strict_mode(recipe):
    from aer_trl.app.evaluation import EvalArguments

    (args,) = TrlParser((EvalArguments,)).parse_args_and_config(args=["--config", str(recipe)])
    assert args.num_samples >= max(args.k_list) and args.benchmarks


def test_the_repositorys_recipe_folders_are_the_packages():
    """One copy of each recipe: recipes/<setting> links into aer_trl/recipes/ (which the library's wheel ships) or
    into the research bench's bench/aer_bench/recipes/, and every shipped recipe is reached through a link."""
    links = [p for p in (ROOT / "recipes").rglob("*") if p.is_symlink()]
    reached = {y.resolve() for link in links for y in (link.rglob("*.yaml") if link.is_dir() else [link])}
    bench = ROOT / "bench" / "aer_bench" / "recipes"  # read from the checkout: the bench need not be installed
    shipped = {p.resolve() for folder in (recipes_dir(), bench) for p in folder.rglob("*.yaml")}
    assert reached == shipped
    gsm8k = "smollm2_135m_instruct/gsm8k"
    assert (ROOT / "recipes" / gsm8k / "aer.yaml").resolve() == recipe_path(gsm8k, "aer").resolve()
    assert not (recipes_dir() / "lab").exists()  # the lab's recipes are the bench's
    with pytest.raises(FileNotFoundError, match=r"no recipe 'nope' for .*gsm8k.*known: \['aer'"):
        recipe_path(gsm8k, "nope")
    with pytest.raises(FileNotFoundError, match="no recipe folder 'nowhere'"):
        recipes_dir("nowhere")


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes" / "eval").glob("appendix_*.yaml")), ids=lambda p: p.name)
def test_the_appendix_evaluation_recipes_carry_its_protocol(recipe):
    """mean@32 / pass@32 on AIME24 and AIME25, mean@8 / pass@8 on MATH500 and AMC23, rows Base, GRPO, Clip-Higher,
    AER, laid out as the appendix table; the base model's with the template its runs trained with."""
    from aer_trl.app.evaluation import EvalArguments
    from aer_trl.app.evaluation.args import sample_groups

    (args,) = TrlParser((EvalArguments,)).parse_args_and_config(args=["--config", str(recipe)])
    runs = {tuple(run.benchmarks): run.num_samples for run in sample_groups(args)}
    assert runs == {("aime24", "aime25"): 32, ("math500", "amc23"): 8}
    assert all(run.num_samples in run.k_list for run in sample_groups(args))  # pass@n is scored
    assert args.table == "appendix" and args.model_labels[0] == "Base" and len(args.models) == 4
    assert (args.chat_template_path == "plain") == ("llama" in recipe.name) == (args.stop == ["\nQuestion:"])
