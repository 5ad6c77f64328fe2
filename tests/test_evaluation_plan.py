"""Problems, fingerprints and chunks; generating what is missing, in one process or one worker per GPU."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from aer_trl.app.evaluation import evaluate
from tests import helpers
from tests.eval_helpers import Fake, _alive, make_args


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.7},
        {"top_p": 0.9},
        {"max_new_tokens": 3},
        {"seed": 8},
        {"num_samples": 16, "k_list": [1, 16]},
        {"top_k": 5},
        {"batch_size": 4},  # the chunk size decides which problems share a seed: part of the fingerprint
        {"model_revision": "v2"},
    ],
)
def test_each_fingerprint_field_is_detected(tmp_path, model_and_bench, change):
    model, bench = model_and_bench
    out = tmp_path / "eval"
    evaluate(make_args(out, model, bench), generator_factory=Fake())
    again = Fake()
    changed = evaluate(make_args(out, model, bench, **change), generator_factory=again)
    fresh = evaluate(make_args(tmp_path / "fresh", model, bench, **change), generator_factory=Fake())
    if "model_revision" in change:  # a local folder is identified by its weights, not by a revision
        assert again.problems == 0
        return
    assert again.problems == 10 and changed == fresh
    assert changed[model][bench]["num_samples"] == change.get("num_samples", 8)


def test_changed_weights_and_changed_benchmark_rows_are_detected(tmp_path, model_and_bench, tokenizer):
    model, bench = model_and_bench
    out = tmp_path / "eval"
    evaluate(make_args(out, model, bench), generator_factory=Fake())
    helpers.make_model(tokenizer, seed=1).save_pretrained(model)  # same folder, new weights
    again = Fake()
    evaluate(make_args(out, model, bench), generator_factory=again)
    assert again.problems == 10
    rows = [json.loads(x) for x in open(bench)]
    rows[2]["answer"] = "7"  # one gold answer edited: only that problem's chunk [0, 1, 2] is generated again
    with open(bench, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    edited = Fake()
    evaluate(make_args(out, model, bench), generator_factory=edited)
    assert edited.problems == 3


def test_a_change_in_one_tensor_in_the_middle_of_the_weights_file_is_a_new_model(tmp_path, model_and_bench, tokenizer):
    """Training that leaves the first and last tensors alone (frozen embeddings, a merged adapter) is still another
    model: its samples are not answered from the store (an identity from the file's ends once did)."""
    from safetensors.torch import load_file, save_file

    _, bench = model_and_bench
    model = tmp_path / "big"
    helpers.make_model(tokenizer, hidden_size=256).save_pretrained(model)
    weights = model / "model.safetensors"
    assert weights.stat().st_size > 4 << 20
    out = tmp_path / "eval"
    evaluate(make_args(out, str(model), bench), generator_factory=Fake())
    tensors = load_file(weights)
    names = sorted(tensors)
    middle = names[len(names) // 2]
    tensors[middle] = tensors[middle] + 1e-3
    save_file(tensors, weights, metadata={"format": "pt"})
    again = Fake()
    evaluate(make_args(out, str(model), bench), generator_factory=again)
    assert again.problems == 10


def test_max_problems_changes_give_the_new_numbers(tmp_path, model_and_bench):
    model, bench = model_and_bench
    out = tmp_path / "eval"
    evaluate(make_args(out, model, bench, max_problems=6), generator_factory=Fake())
    smaller = Fake()
    small = evaluate(make_args(out, model, bench, max_problems=4), generator_factory=smaller)
    # chunks of 3: [0, 1, 2] is reused, problem 3 now sits in a chunk of its own (another seed): generated again
    assert smaller.problems == 1 and small[model][bench]["num_problems"] == 4
    assert small == evaluate(make_args(tmp_path / "fresh4", model, bench, max_problems=4), generator_factory=Fake())
    larger = Fake()
    full = evaluate(make_args(out, model, bench), generator_factory=larger)
    assert larger.problems == 4 and full[model][bench]["num_problems"] == 10
    assert full == evaluate(make_args(tmp_path / "fresh", model, bench), generator_factory=Fake())
    assert json.loads((out / "metrics.json").read_text())[model][bench]["num_problems"] == 10


def test_missing_model_or_benchmark_is_named(tmp_path, model_and_bench):
    model, bench = model_and_bench
    with pytest.raises(FileNotFoundError, match="no model folder './nope/ckpt'"):
        evaluate(make_args(tmp_path / "e", "./nope/ckpt", bench), generator_factory=Fake())
    with pytest.raises(FileNotFoundError, match="runs/missing-run"):
        evaluate(make_args(tmp_path / "e", "runs/missing-run", bench), generator_factory=Fake())
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        evaluate(make_args(tmp_path / "e", model, str(tmp_path / "missing.jsonl")), generator_factory=Fake())


def test_a_peft_adapter_is_identified_with_its_config_and_its_base_model(tmp_path, tokenizer, model_and_bench):
    """transformers loads an adapter folder's base model with it: a changed adapter config (its scaling here) or a
    changed base model is another model, so its samples are generated again, not reused."""
    from peft import LoraConfig, get_peft_model

    base, bench = model_and_bench
    adapter = tmp_path / "adapter"
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(helpers.make_model(tokenizer), lora).save_pretrained(adapter)
    tokenizer.save_pretrained(adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())

    def evaluate_with(**changes):
        config.update(changes)
        (adapter / "adapter_config.json").write_text(json.dumps(config))
        generator = Fake()
        evaluate(make_args(tmp_path / "eval", str(adapter), bench), generator_factory=generator)
        return generator.problems

    assert evaluate_with(base_model_name_or_path=base) == 10
    assert evaluate_with() == 0  # the same adapter on the same base: reused
    assert evaluate_with(lora_alpha=64) == 10  # another scaling of the same weights
    helpers.make_model(tokenizer, seed=1).save_pretrained(base)  # the base model trained further, same folder
    assert evaluate_with() == 10


@pytest.mark.slow
def test_data_parallel_workers_give_the_same_result(tmp_path, model_and_bench):
    """Problems spread over 2 worker processes (one per GPU with vLLM; here on CPU) give the single-process result."""
    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench))
    sharded = evaluate(make_args(tmp_path / "dp", model, bench, data_parallel=2, backend="transformers"))
    assert sharded == reference
    assert sorted(p.name for p in (tmp_path / "dp").glob("generations*.jsonl")) == [
        "generations.shard0.jsonl",
        "generations.shard1.jsonl",
    ]


@pytest.mark.slow  # ~11 s: a worker, its parent killed, and the worker's own shutdown
@pytest.mark.parametrize("watch", [True, False])
def test_a_data_parallel_worker_stops_when_its_parent_is_killed_alone(watch):
    """`kill -9` of the evaluation alone: a worker that watches its parent stops within seconds instead of sampling on
    beside the evaluation started again. The worker that does not watch shows the test can fail."""
    script = Path(__file__).parent / "scripts" / "orphaned_worker.py"
    parent = subprocess.Popen([sys.executable, str(script), "watch" if watch else "plain"], stdout=subprocess.PIPE)
    try:
        worker = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + (15 if watch else 3)  # a watching worker stops within seconds
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _alive(worker) is (not watch)
    finally:
        parent.kill()
        if "worker" in locals() and _alive(worker):
            os.kill(worker, signal.SIGKILL)


@pytest.mark.slow  # 9-12 s under the suite: a worker process started, the lock held, the worker stopped
@pytest.mark.parametrize("shared", [True, False])
def test_a_data_parallel_worker_holds_the_folder_lock_with_its_parent(tmp_path, shared):
    """A worker can outlive its parent by up to `exit_with_parent`'s grace; holding the folder's lock with it, it keeps
    the evaluation started again from starting beside it (its vLLM engine would fail at start on the worker's GPU).
    A worker started without the lock shows the test can fail."""
    import multiprocessing as mp

    from aer_trl.app.evaluation import plan
    from aer_trl.app.evaluation.harness import EVAL_LOCK
    from aer_trl.app.files import lock_folder

    def lock():
        return lock_folder(tmp_path, EVAL_LOCK, "evaluation is writing into it")

    held = lock()
    worker = plan.start_worker(mp.get_context("spawn"), held if shared else None, time.sleep, 3)
    os.close(held)  # the parent ends; its worker has not yet
    if shared:
        with pytest.raises(RuntimeError, match="another evaluation is writing into it"):
            lock()
    else:
        os.close(lock())
    worker.join(timeout=60)
    assert worker.exitcode == 0
    os.close(lock())  # free once the worker has ended


def test_more_vllm_workers_than_gpus_is_refused_before_any_starts(monkeypatch):
    from aer_trl.app.evaluation import plan

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(plan, "_shard_worker", lambda *a: pytest.fail("a worker started"))
    with pytest.raises(ValueError, match=r"data_parallel=3: vLLM evaluation runs one engine per GPU and 2 GPUs"):
        plan.run_workers(None, [], "vllm", 3)
    plan.check_workers(2, "vllm")
    plan.check_workers(3, "transformers")  # generate's workers may share a device


def test_each_data_parallel_worker_watches_its_parent_before_it_samples(monkeypatch):
    from aer_trl.app.evaluation import plan

    calls = []
    monkeypatch.setattr(plan, "exit_with_parent", lambda: calls.append("watch"))
    monkeypatch.setattr(plan, "default_factory", lambda backend: backend)
    monkeypatch.setattr(plan, "generate_missing", lambda *a: calls.append(a[2:]))
    plan._shard_worker(None, [], "vllm", 1, 2)
    assert calls == ["watch", ("vllm", 1, 2)]
