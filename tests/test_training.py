"""aer_trl.app.training: one training run from a recipe: rewards by name, resuming (and refusing what cannot be
resumed), the model a source needs, the machine's cores on CPU, and a run on a local model and data set with its
card."""

import json
import os
import sys
from pathlib import Path

import pytest

from aer_trl import AERGRPOConfig
from tests import helpers

ROOT = Path(__file__).resolve().parents[1]
CPU = ["--bf16", "false", "--use_cpu", "true"]  # the paper recipes ask for bf16 on GPUs


def test_unknown_reward_is_a_clear_error():
    from aer_trl.app.training import resolve_reward_funcs

    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        resolve_reward_funcs(["nope"])
    # one registered name per reward: its function's name is not a second one, and the error points at the first
    with pytest.raises(ValueError, match="did you mean 'math_accuracy'"):
        resolve_reward_funcs(["math_accuracy_reward"])


def tiny_argv(tmp_path, *extra):
    """A run of the library's command line on a tiny local model and 64 local question/answer rows (nothing of the
    research bench): 4 prompts x 4 completions per optimizer step, one step per rollout batch, so a checkpoint after
    every step is exact."""
    model, data = tmp_path / "model", tmp_path / "rows.jsonl"
    if not model.exists():
        helpers.save_model(helpers.make_tokenizer(), model)
    if not data.exists():
        data.write_text("".join(json.dumps({"problem": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(64)))
    return [
        *["--model_name_or_path", str(model), "--dtype", "float32", "--dataset_name", str(data)],
        *["--output_dir", str(tmp_path / "run"), *CPU, "--report_to", "none", "--disable_tqdm", "true"],
        *["--per_device_train_batch_size", "16", "--num_generations", "4", "--max_completion_length", "8"],
        *["--steps_per_generation", "1", "--save_strategy", "steps", "--save_steps", "1", "--logging_steps", "1"],
        *["--gradient_checkpointing", "false"],
        *extra,
    ]


def test_a_fresh_run_into_a_folder_with_an_earlier_runs_checkpoints_is_refused(tmp_path):
    """Its checkpoints would mix with the earlier run's, and `resume_from_checkpoint: latest` would then continue the
    earlier run from its highest step; resuming it is what the message offers, and works."""
    from aer_trl.app import run as train

    train.main(tiny_argv(tmp_path, "--max_steps", "2"))
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "run").rglob("*") if p.name != "_aer_trl.lock"}
    with pytest.raises(FileExistsError, match=r"holds an earlier run's checkpoints \(checkpoint-1, checkpoint-2\)"):
        train.main(tiny_argv(tmp_path, "--max_steps", "1", "--seed", "3"))
    after = {p: p.stat().st_mtime_ns for p in (tmp_path / "run").rglob("*") if p.name != "_aer_trl.lock"}
    assert after == before  # nothing touched
    trainer = train.main(tiny_argv(tmp_path, "--max_steps", "3", "--resume_from_checkpoint", "latest"))
    assert trainer.state.global_step == 3


@pytest.mark.slow  # 6-9 s on 2 cores
def test_a_lora_checkpoint_resumes_only_as_the_adapter_it_was_trained_as(tmp_path, caplog):
    """Resumed with another lora_alpha, the adapter's weights loaded under another scaling and trained on, silently;
    with use_peft toggled, transformers failed deep inside. Each is refused up front by name; the same settings
    resume."""
    from aer_trl.app import run as train

    lora = ["--use_peft", "true", "--lora_target_modules", "all-linear"]
    train.main(tiny_argv(tmp_path, "--max_steps", "1", *lora))
    resume = ["--max_steps", "2", "--resume_from_checkpoint", "latest"]
    with pytest.raises(ValueError, match="trained with other settings \\(lora_alpha 32 -> 64\\)"):
        train.main(tiny_argv(tmp_path, *resume, *lora, "--lora_alpha", "64"))
    with pytest.raises(ValueError, match="use_rslora False -> True"):
        train.main(tiny_argv(tmp_path, *resume, *lora, "--use_rslora", "true"))
    with pytest.raises(ValueError, match="holds a LoRA adapter .* this run trains the full model"):
        train.main(tiny_argv(tmp_path, *resume))
    with caplog.at_level("WARNING", logger="aer_trl.resume"):
        trainer = train.main(tiny_argv(tmp_path, *resume, *lora, "--lora_dropout", "0.1"))
    assert trainer.state.global_step == 2 and "lora_dropout 0.05 -> 0.1" in caplog.text  # allowed, and named
    full = tmp_path / "full"
    train.main(tiny_argv(full, "--max_steps", "1"))
    with pytest.raises(ValueError, match="holds a full model and this run trains a LoRA adapter"):
        train.main(tiny_argv(full, *resume, *lora))


def test_a_second_run_into_the_same_output_dir_is_refused_before_it_writes_anything(tmp_path):
    """Two runs in one folder overwrite each other's checkpoints and interleave metrics.jsonl: while a run holds
    `output_dir`, another is refused by name; a killed run leaves no stale lock."""
    from aer_trl.app import run as train
    from aer_trl.app.checkpoints import RUN_LOCK, lock_output_dir

    run = tmp_path / "run"
    run.mkdir()
    with helpers.lock_held_elsewhere(run / RUN_LOCK) as holder:
        with pytest.raises(RuntimeError, match=f"another run is training into it \\(process {holder.pid}\\)"):
            train.main(tiny_argv(tmp_path, "--max_steps", "1"))
        assert sorted(p.name for p in run.iterdir()) == sorted([RUN_LOCK, f"{RUN_LOCK}.held"])  # nothing written
    fd = lock_output_dir(AERGRPOConfig(output_dir=str(run), use_cpu=True, bf16=False, report_to="none"))
    assert fd is not None  # the killed holder's lock is gone
    os.close(fd)


def test_a_run_that_fails_releases_and_removes_its_lock(tmp_path):
    """A run ends however it ends (here: its data set cannot be read, after the lock was taken): the lock is released
    and its file removed, so the folder holds nothing of the failed run; the next run takes the folder at once."""
    from aer_trl.app import run as train
    from aer_trl.app.checkpoints import RUN_LOCK
    from aer_trl.app.files import try_lock, unlock

    run = tmp_path / "run"
    model = helpers.save_model(helpers.make_tokenizer(), tmp_path / "model")
    missing = ["--dataset_name", str(tmp_path / "missing.jsonl"), "--model_name_or_path", model]
    with pytest.raises(FileNotFoundError, match="dataset_name: local file .*missing.jsonl does not exist"):
        train.main(tiny_argv(tmp_path, "--max_steps", "1", *missing))
    assert not (run / RUN_LOCK).exists()
    fd = try_lock(run / RUN_LOCK)
    assert fd is not None
    unlock(fd, run / RUN_LOCK)
    assert not (run / RUN_LOCK).exists()


@pytest.mark.slow
def test_resume_true_from_the_cli_skips_an_incomplete_checkpoint(tmp_path):
    import subprocess

    from aer_trl.app import run as train

    train.main(tiny_argv(tmp_path, "--max_steps", "2"))
    run = tmp_path / "run"
    (run / "checkpoint-2" / "trainer_state.json").unlink()  # a save killed half-way (or a full disk)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "aer_trl.app.run",
            *tiny_argv(tmp_path, "--max_steps", "3"),
            "--resume_from_checkpoint",
            "true",
            "--max_train_samples",  # the script's arguments are settings too: a resume on other data says so
            "48",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skipping" in done.stderr and "checkpoint-2" in done.stderr
    applied = done.stderr.split("Applied from here on: ")[1].split(" (α=")[0]
    assert applied == "max_steps 2 -> 3; max_train_samples None -> 48; train_rows 64 -> 48", applied
    state = json.loads((run / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3


def test_resume_values_are_checked(tmp_path):
    from aer_trl.app.checkpoints import resolve_resume

    assert resolve_resume("false", str(tmp_path)) is None and resolve_resume(None, str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        resolve_resume("latest", str(tmp_path))
    with pytest.raises(ValueError, match="'maybe'"):
        resolve_resume("maybe", str(tmp_path))
    assert resolve_resume("auto", str(tmp_path)) is None  # a first start
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text("{}")
    assert (
        resolve_resume("auto", str(tmp_path))
        == resolve_resume("latest", str(tmp_path))
        == str(tmp_path / "checkpoint-4")
    )


def test_the_sweep_resumes_each_value_so_a_stopped_sweep_continues():
    sys.path.insert(0, str(ROOT / "recipes"))
    import sweep  # recipes/sweep.py

    recipe = str(ROOT / "recipes" / "smollm2_135m_instruct" / "gsm8k" / "aer.yaml")
    for command in sweep.commands(recipe, "aer_tau", [0.3, 0.5], "python", []):
        assert command[command.index("--resume_from_checkpoint") + 1] == "auto"


@pytest.mark.parametrize("torn", ["", '{"global_step": 3, "log_hist'])
def test_resume_skips_a_checkpoint_whose_state_file_is_empty_or_torn(tmp_path, torn, caplog):
    """A kill (or a full disk) while trainer_state.json, the last file of a save, is being written leaves it empty or
    cut off; `latest` takes the newest checkpoint that reads whole, and a folder named outright is refused."""
    from aer_trl.app.checkpoints import resolve_resume

    for step in (2, 3):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text(torn)
    with caplog.at_level("WARNING"):
        assert resolve_resume("latest", str(tmp_path)) == str(tmp_path / "checkpoint-2")
    assert "skipping" in caplog.text and "checkpoint-3" in caplog.text
    with pytest.raises(FileNotFoundError, match="checkpoint-3 is not a complete checkpoint"):
        resolve_resume(str(tmp_path / "checkpoint-3"), str(tmp_path))
    assert resolve_resume(str(tmp_path / "checkpoint-2"), str(tmp_path)) == str(tmp_path / "checkpoint-2")


def test_a_half_specified_real_run_is_refused():
    from trl import ModelConfig

    from aer_trl.app.data import get_source
    from aer_trl.app.training import check_model_given

    with pytest.raises(ValueError, match="dataset_name: say what to train on"):
        get_source(None)
    with pytest.raises(ValueError, match="model_name_or_path: training on 'gsm8k' needs a model"):
        check_model_given(get_source("gsm8k"), ModelConfig())
    with pytest.raises(FileNotFoundError, match="model_name_or_path: no model folder"):
        check_model_given(get_source("gsm8k"), ModelConfig(model_name_or_path="runs/a/missing"))


def test_cpu_runs_use_the_machines_cores(tmp_path, monkeypatch):
    import torch

    from aer_trl.app.training import use_cpu_cores

    config = AERGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # what `accelerate launch` leaves a CPU child with (OMP_NUM_THREADS=1)
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
        monkeypatch.delenv("AER_CPU_THREADS", raising=False)
        import psutil

        monkeypatch.setattr(psutil, "cpu_percent", lambda interval: 0.0)  # idle cores: all of them
        assert use_cpu_cores(config) == (os.cpu_count() or 1) == torch.get_num_threads()
        monkeypatch.setattr(psutil, "cpu_percent", lambda interval: 100.0)  # every core busy: one thread
        assert use_cpu_cores(config) == 1 == torch.get_num_threads()
        monkeypatch.setenv("AER_CPU_THREADS", "1")
        assert use_cpu_cores(config) == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_train_script_trains_on_local_model_and_data_and_writes_card(tmp_path, tokenizer):
    model_dir = tmp_path / "tiny-base"
    helpers.save_model(tokenizer, model_dir)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(16)))
    from aer_trl.app import run as train

    out = tmp_path / "out"
    train.main(
        [
            "--config",
            str(ROOT / "recipes" / "qwen3_4b_base" / "deepscaler" / "aer.yaml"),
            *CPU,
            "--model_name_or_path",
            str(model_dir),
            "--dtype",
            "float32",
            "--dataset_name",
            str(data),
            "--use_vllm",
            "false",
            "--max_completion_length",
            "8",
            "--per_device_train_batch_size",
            "8",
            "--gradient_accumulation_steps",
            "1",
            "--steps_per_generation",
            "1",
            "--max_steps",
            "2",
            "--output_dir",
            str(out),
            "--report_to",
            "none",
            "--save_strategy",
            "steps",
            "--save_steps",
            "1",
            "--save_total_limit",
            "1",
            "--gradient_checkpointing",
            "false",
            "--learning_rate",
            "1e-3",
            "--logging_steps",
            "1",
            # the recipe's checkpoint selection (AIME25 every 20 steps through vLLM), pointed at local data and,
            # without vLLM here, at transformers' generate (a few tokens: allowed)
            "--eval_benchmark",
            str(data),
            "--eval_engine",
            "transformers",
            "--eval_every_steps",
            "1",
            "--eval_num_samples",
            "2",
            "--eval_k_list",
            "1",
            "2",
            "--eval_max_new_tokens",
            "4",
            "--eval_max_problems",
            "3",
        ]
    )
    best = json.loads((out / "best_checkpoint.json").read_text())
    assert Path(best["checkpoint"]).is_dir() and best["step"] in (1, 2)
    card = (out / "README.md").read_text()
    for needle in (
        "aer_trl",
        "Adaptive Entropy Regularization",
        str(data),
        "ρ (pivot accuracy) | 0.2",
        "τ (target ratio) | 0.4",
        "η (α step size) | 0.005",
        "final α",
        "H0 (initial entropy)",
        "H* (target entropy)",
        "AER iterations | 2",
    ):
        assert needle in card, needle
    assert (out / "model.safetensors").exists() and (out / "metrics.jsonl").exists()


def test_the_validation_engine_follows_the_run_and_long_generate_under_zero3_is_refused():
    """`eval_engine`: auto -> the run's vLLM engine when it rolls out with vLLM, else transformers' generate; vllm
    without an engine, or generate under ZeRO-3 at more than 1024 tokens, is refused before step 1."""
    import functools
    from types import SimpleNamespace

    from aer_trl.app.evaluation.engine_samplers import engine_sampler
    from aer_trl.app.training import validation_sampler

    def trainer(stage=None):
        plugin = None if stage is None else SimpleNamespace(zero_stage=stage)
        return SimpleNamespace(accelerator=SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin)))

    def script(engine="auto", tokens=8192):
        return SimpleNamespace(eval_engine=engine, eval_max_new_tokens=tokens)

    vllm_run, plain_run = SimpleNamespace(use_vllm=True), SimpleNamespace(use_vllm=False)
    factory = validation_sampler(script(), vllm_run, trainer(3))
    assert isinstance(factory, functools.partial) and factory.func is engine_sampler
    assert validation_sampler(script(tokens=64), plain_run, trainer(3)) is None  # short: generate is fine
    assert validation_sampler(script(), plain_run, trainer(2)) is None  # ZeRO-2 keeps whole layers
    with pytest.raises(ValueError, match="eval_max_new_tokens=8192 through transformers' generate under ZeRO-3"):
        validation_sampler(script(), plain_run, trainer(3))
    with pytest.raises(ValueError, match="eval_max_new_tokens=8192"):
        validation_sampler(script("transformers"), vllm_run, trainer(3))
    with pytest.raises(ValueError, match="this run has none"):
        validation_sampler(script("vllm"), plain_run, trainer())
    with pytest.raises(ValueError, match="eval_engine must be"):
        validation_sampler(script("sglang"), vllm_run, trainer())


def test_the_engine_sampler_syncs_the_weights_once_per_step_and_serves_from_the_main_process():
    """evaluation.engine_samplers on stand-ins for TRL's VLLMGeneration: the engine gets the policy of the validated
    step (TRL syncs only before a rollout), a rollout at the same step does not sync again, and in server mode the main
    process samples one seeded request per prompt through the client and decodes it."""
    from types import SimpleNamespace

    from aer_trl.app.evaluation import EvalArguments
    from aer_trl.app.evaluation.engine_samplers import ServerSampler, engine_sampler

    syncs, requests = [], []

    class Client:
        def generate(self, prompts, n, **kw):
            requests.append((prompts, n, kw["generation_kwargs"]["seed"], kw["max_tokens"]))
            return {"completion_ids": [[ord("a") + i] for i in range(n)]}

    tokenizer = SimpleNamespace(
        batch_decode=lambda ids, skip_special_tokens: ["".join(map(chr, x)) for x in ids],
        encode=lambda text, add_special_tokens: list(map(ord, text)),  # the prompt goes as token ids
    )
    generation = SimpleNamespace(mode="server", vllm_client=Client(), sync_weights=lambda: syncs.append(1))
    trainer = SimpleNamespace(use_vllm=True, vllm_generation=generation, _last_loaded_step=4,
                              state=SimpleNamespace(global_step=5), processing_class=tokenizer)  # fmt: skip
    args = EvalArguments(models=["m"], benchmarks=["b"], num_samples=3, k_list=[1, 3], max_new_tokens=7)
    sampler = engine_sampler(trainer, args)
    assert isinstance(sampler, ServerSampler) and sampler.main_only
    assert syncs == [1] and trainer._last_loaded_step == 5
    engine_sampler(trainer, args)
    assert syncs == [1]  # the same step: the engine already holds this policy
    assert sampler(["p0", "p1"], seed=11) == [["a", "b", "c"], ["a", "b", "c"]]
    assert [r[0] for r in requests] == [[list(map(ord, "p0"))], [list(map(ord, "p1"))]]
    assert {r[1] for r in requests} == {3}
    assert requests[0][2] != requests[1][2] and {r[3] for r in requests} == {7}  # a seed per request
    with pytest.raises(ValueError, match="tensor_parallel_size > 1"):
        engine_sampler(SimpleNamespace(use_vllm=True, vllm_generation=SimpleNamespace(
            mode="colocate", tensor_parallel_size=2)), args)  # fmt: skip
