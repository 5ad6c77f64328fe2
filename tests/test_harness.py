"""The evaluation harness as an adversary would use it: interrupted, torn, changed, resumed (transformers backend)."""

import errno
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from aer_trl.evaluation import EvalArguments, PassAtKCallback, evaluate
from aer_trl.evaluation.harness import TransformersGenerator
from aer_trl.evaluation.plan import load_problems
from aer_trl.rewards import JUDGE_VERSION
from tests import helpers


@pytest.fixture
def model_and_bench(tmp_path, tokenizer):
    model_dir = tmp_path / "tiny"
    helpers.save_model(tokenizer, model_dir)
    bench = tmp_path / "bench.jsonl"
    rows = [{"question": f"{i}?", "answer": str(i % 3)} for i in range(10)]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(model_dir), str(bench)


def make_args(out, model, bench, **kw):
    settings = dict(num_samples=8, k_list=[1, 2, 4, 8], max_new_tokens=2, batch_size=3, seed=7)
    settings.update(kw)
    return EvalArguments(
        models=[model] if isinstance(model, str) else model, benchmarks=[bench], output_dir=str(out), **settings
    )


class Fake:
    """A generator factory whose samples are a pure function of (chunk seed, position in the chunk, sample index,
    settings), with boxed answers that are sometimes right; counts what it generates and can fail after some calls."""

    def __init__(self, fail_after=None):
        self.problems, self.calls, self.fail_after = 0, 0, fail_after

    def __call__(self, model_name, args):
        def run(texts, seed):
            if self.fail_after is not None and self.calls >= self.fail_after:
                raise KeyboardInterrupt("simulated interruption")
            self.calls += 1
            self.problems += len(texts)
            salt = round(args.temperature * 100) + args.max_new_tokens + round(args.top_p * 10) + args.top_k
            return [
                [f"so \\boxed{{{(seed + 7 * i + j + salt) % 3}}}" for j in range(args.num_samples)]
                for i in range(len(texts))
            ]

        return run


class Real:
    """The transformers generator (the tiny model), counted, failing after some calls when asked."""

    def __init__(self, fail_after=None):
        self.problems, self.calls, self.fail_after = 0, 0, fail_after

    def __call__(self, model_name, args):
        gen = TransformersGenerator.from_pretrained(model_name, args)

        def run(texts, seed):
            if self.fail_after is not None and self.calls >= self.fail_after:
                raise KeyboardInterrupt("simulated interruption")
            self.calls += 1
            self.problems += len(texts)
            return gen(texts, seed)

        return run


def lines(out):
    return (out / "generations.jsonl").read_text().splitlines()


def test_end_to_end_table_json_plot(tmp_path, model_and_bench):
    model, bench = model_and_bench
    metrics = evaluate(make_args(tmp_path / "eval", model, bench))
    out = tmp_path / "eval"
    m = metrics[model][bench]
    assert m["num_problems"] == 10 and m["num_samples"] == 8 and m["k_list"] == [1, 2, 4, 8]
    assert 0.0 <= m["pass@1"] <= m["pass@2"] <= m["pass@4"] <= m["pass@8"] <= 1.0
    assert m["mean@n"] == pytest.approx(m["pass@1"])
    assert m["fingerprint"]["max_new_tokens"] == 2 and "weights" in m["fingerprint"]["model"]
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(metrics))
    table = (out / "table.md").read_text()
    assert "| Method | bench pass@1 | bench pass@8 | Avg. pass@1 | Avg. pass@8 |" in table and "| tiny |" in table
    assert "| tiny | bench | 10 | 8 |" in table  # problems and n stated
    assert (out / "passk.png").stat().st_size > 5000
    assert len(lines(out)) == 10 and all(len(json.loads(x)["completions"]) == 8 for x in lines(out))


def test_real_model_interrupted_then_resumed_equals_uninterrupted(tmp_path, model_and_bench):
    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench), generator_factory=Real())
    first = Real(fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate(make_args(tmp_path / "resumed", model, bench), generator_factory=first)
    assert first.problems == 6  # two chunks of 3 problems, one generate call each
    second = Real()
    assert evaluate(make_args(tmp_path / "resumed", model, bench), generator_factory=second) == reference
    assert second.problems == 4  # the chunks [6, 7, 8] and [9]
    assert sorted(lines(tmp_path / "resumed")) == sorted(lines(tmp_path / "ref"))

    third = Real()
    assert evaluate(make_args(tmp_path / "resumed", model, bench, rescore=True), generator_factory=third) == reference
    assert third.problems == 0  # re-scored from disk, nothing generated


@pytest.mark.parametrize(
    ("instruction", "written"),
    [
        ("End with a line 'Answer: <number>'.", "so\nAnswer: {}"),
        ("Put the final answer in <answer></answer> tags.", "<answer>{}</answer>"),
        (None, "so \\boxed{{{}}}"),  # the default instruction asks for \boxed{}
    ],
)
def test_the_evaluation_judges_the_answer_format_its_prompt_asks_for(tmp_path, model_and_bench, instruction, written):
    """`prompt_instruction` asking for another format: the evaluation (and the validation during training) judged every
    completion as `\\boxed{}`, pass@k 0 however right the answers were."""
    model, bench = model_and_bench
    answers = {f"{i}?": str(i % 3) for i in range(10)}  # the bench's questions and golds

    def right(model_name, args):
        def run(texts, seed):
            golds = [next(a for q, a in answers.items() if q in t) for t in texts]
            return [[written.format(g)] * args.num_samples for g in golds]

        return run

    kw = {} if instruction is None else {"prompt_instruction": instruction}
    metrics = evaluate(make_args(tmp_path / "eval", model, bench, **kw), generator_factory=right)
    assert metrics[model][bench]["pass@1"] == 1.0
    rescored = evaluate(make_args(tmp_path / "eval", model, bench, rescore=True, **kw), generator_factory=right)
    assert rescored == metrics


def test_verdicts_of_another_answer_checker_version_are_judged_again(tmp_path, model_and_bench, caplog):
    model, bench = model_and_bench
    out = tmp_path / "eval"
    reference = evaluate(make_args(out, model, bench), generator_factory=Fake())
    assert reference[model][bench]["pass@8"] > 0
    records = [json.loads(x) for x in lines(out)]
    assert {r["judge"] for r in records} == {JUDGE_VERSION}

    def store(judge_version):  # verdicts no checker of this version would give, stored as `judge_version`'s
        for r in records:
            r["correct"] = [False] * len(r["correct"])
            r.pop("judge", None)
            if judge_version is not None:  # None: written before verdicts recorded their version
                r["judge"] = judge_version
        (out / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    store(JUDGE_VERSION)  # this version's verdicts are what the store says
    assert evaluate(make_args(out, model, bench), generator_factory=Fake())[model][bench]["pass@8"] == 0
    for older in (JUDGE_VERSION - 1, None):
        store(older)
        again = Fake()
        with caplog.at_level(logging.WARNING):
            assert evaluate(make_args(out, model, bench), generator_factory=again) == reference
        assert again.problems == 0 and "stored samples of 10 problems again" in caplog.text
        caplog.clear()


def test_torn_last_line_is_repaired_and_resume_is_exact(tmp_path, model_and_bench, caplog):
    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench), generator_factory=Fake())
    out = tmp_path / "torn"
    evaluate(make_args(out, model, bench), generator_factory=Fake())
    data = (out / "generations.jsonl").read_bytes()
    cut = data.rfind(b"\n", 0, len(data) - 1) + 40  # inside the last record
    (out / "generations.jsonl").write_bytes(data[:cut])
    again = Fake()
    with caplog.at_level(logging.WARNING):
        assert evaluate(make_args(out, model, bench), generator_factory=again) == reference
    assert again.problems == 1 and "line 10" in caplog.text
    assert sorted(lines(out)) == sorted(lines(tmp_path / "ref"))  # no duplicate, no lost record, no torn line


def test_garbage_line_in_the_middle_is_dropped_once(tmp_path, model_and_bench, caplog):
    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench), generator_factory=Fake())
    out = tmp_path / "garbage"
    evaluate(make_args(out, model, bench), generator_factory=Fake())
    rows = lines(out)
    rows[3] = '{"v": 1, "fp": "trunc'
    rows.insert(6, "\x00\x00 not json")
    (out / "generations.jsonl").write_text("\n".join(rows) + "\n")
    again = Fake()
    with caplog.at_level(logging.WARNING):
        assert evaluate(make_args(out, model, bench), generator_factory=again) == reference
    assert again.problems == 3 and "line 4, 7" in caplog.text  # problem 3's chunk [3, 4, 5] again
    assert sorted(lines(out)) == sorted(lines(tmp_path / "ref"))  # only the missing record is written back
    later = Fake()
    assert evaluate(make_args(out, model, bench), generator_factory=later) == reference and later.problems == 0


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


def test_a_second_model_adds_a_row(tmp_path, model_and_bench, tokenizer):
    model, bench = model_and_bench
    other = tmp_path / "other"
    helpers.save_model(tokenizer, other, seed=3)
    out = tmp_path / "eval"
    evaluate(make_args(out, model, bench), generator_factory=Fake())
    evaluate(make_args(out, str(other), bench), generator_factory=Fake())
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {model, str(other)}
    table = (out / "table.md").read_text()
    assert "| tiny |" in table and "| other |" in table


def test_missing_model_or_benchmark_is_named(tmp_path, model_and_bench):
    model, bench = model_and_bench
    with pytest.raises(FileNotFoundError, match="no model folder './nope/ckpt'"):
        evaluate(make_args(tmp_path / "e", "./nope/ckpt", bench), generator_factory=Fake())
    with pytest.raises(FileNotFoundError, match="runs/missing-run"):
        evaluate(make_args(tmp_path / "e", "runs/missing-run", bench), generator_factory=Fake())
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        evaluate(make_args(tmp_path / "e", model, str(tmp_path / "missing.jsonl")), generator_factory=Fake())


def test_full_disk_keeps_the_file_whole_and_resumes(tmp_path, model_and_bench, monkeypatch):
    from aer_trl.evaluation import store

    model, bench = model_and_bench
    reference = evaluate(make_args(tmp_path / "ref", model, bench), generator_factory=Fake())
    out = tmp_path / "full"
    real_fsync, calls = os.fsync, {"n": 0}

    def failing_fsync(fd):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(store.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk is full"):
        evaluate(make_args(out, model, bench, batch_size=3), generator_factory=Fake())
    monkeypatch.setattr(store.os, "fsync", real_fsync)
    assert len(lines(out)) == 6 and all(json.loads(x) for x in lines(out))  # cut back to whole chunks' records
    assert evaluate(make_args(out, model, bench), generator_factory=Fake()) == reference


def test_incomplete_set_is_refused(tmp_path, model_and_bench):
    from aer_trl.evaluation.harness import make_plans, score

    model, bench = model_and_bench
    args = make_args(tmp_path / "eval", model, bench, max_problems=4)
    evaluate(args, generator_factory=Fake())
    more = make_args(tmp_path / "eval", model, bench)
    # problem 3 was sampled in the chunk [3] of the 4-problem run, not in [3, 4, 5]: 7 of 10 are missing
    with pytest.raises(RuntimeError, match="7 of 10 problems have no stored samples"):
        score(more, make_plans(more, "transformers"))


def test_a_problem_repeated_in_a_benchmark_counts_its_own_samples(tmp_path, model_and_bench):
    """A benchmark that lists a problem twice (in one chunk or in two) evaluates each listing on its own samples, as
    it would two different problems: the store keeps both, and pass@1 is the mean over every generated sample."""
    from aer_trl.evaluation.store import load_store

    model, _ = model_and_bench
    bench = tmp_path / "repeats.jsonl"
    rows = [{"question": q, "answer": "1"} for q in ["0?", "0?", "1?", "0?", "2?"]]  # "0?" in chunk 0 twice, chunk 1
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = make_args(tmp_path / "eval", model, str(bench))
    result = evaluate(args, generator_factory=Fake())[model][str(bench)]
    store = load_store(tmp_path / "eval")
    assert len(store) == len(rows)
    verdicts = [v for r in store.values() for v in r["correct"]]
    assert len(verdicts) == len(rows) * args.num_samples
    assert result["pass@1"] == pytest.approx(sum(verdicts) / len(verdicts))
    again = Fake()
    assert evaluate(args, generator_factory=again)[model][str(bench)] == result and again.problems == 0


def test_a_second_evaluation_into_the_same_folder_is_refused_while_the_first_runs(tmp_path, model_and_bench):
    """Two evaluations in one folder repair and rewrite each other's store and merge metrics.json over each other:
    while one holds the folder, another is refused by name; a killed one leaves no stale lock."""
    from aer_trl.evaluation.harness import EVAL_LOCK

    model, bench = model_and_bench
    out = tmp_path / "eval"
    out.mkdir()
    with helpers.lock_held_elsewhere(out / EVAL_LOCK) as holder:
        with pytest.raises(RuntimeError, match=f"another evaluation is writing into it \\(process {holder.pid}\\)"):
            evaluate(make_args(out, model, bench), generator_factory=Fake())
        assert not (out / "generations.jsonl").exists()
    assert evaluate(make_args(out, model, bench), generator_factory=Fake())[model][bench]["pass@1"] >= 0


def test_invalid_eval_arguments():
    with pytest.raises(ValueError, match="k_list"):
        EvalArguments(models=["m"], num_samples=4, k_list=[1, 8])
    with pytest.raises(ValueError, match="backend"):
        EvalArguments(models=["m"], backend="tgi")
    with pytest.raises(ValueError, match="report_k"):
        EvalArguments(models=["m"], num_samples=4, k_list=[1, 4], report_k=2)


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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


@pytest.mark.parametrize("shared", [True, False])
def test_a_data_parallel_worker_holds_the_folder_lock_with_its_parent(tmp_path, shared):
    """A worker can outlive its parent by up to `exit_with_parent`'s grace; holding the folder's lock with it, it keeps
    the evaluation started again from starting beside it (its vLLM engine would fail at start on the worker's GPU).
    A worker started without the lock shows the test can fail."""
    import multiprocessing as mp

    from aer_trl.evaluation import plan
    from aer_trl.evaluation.harness import EVAL_LOCK
    from aer_trl.io import lock_folder

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
    from aer_trl.evaluation import plan

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(plan, "_shard_worker", lambda *a: pytest.fail("a worker started"))
    with pytest.raises(ValueError, match=r"data_parallel=3: vLLM evaluation runs one engine per GPU and 2 GPUs"):
        plan.run_workers(None, [], "vllm", 3)
    plan.check_workers(2, "vllm")
    plan.check_workers(3, "transformers")  # generate's workers may share a device


def test_each_data_parallel_worker_watches_its_parent_before_it_samples(monkeypatch):
    from aer_trl.evaluation import plan

    calls = []
    monkeypatch.setattr(plan, "exit_with_parent", lambda: calls.append("watch"))
    monkeypatch.setattr(plan, "default_factory", lambda backend: backend)
    monkeypatch.setattr(plan, "generate_missing", lambda *a: calls.append(a[2:]))
    plan._shard_worker(None, [], "vllm", 1, 2)
    assert calls == ["watch", ("vllm", 1, 2)]


# ------------------------------------------------------------------------------------------- during training
def train_with_callback(tmp_path, tokenizer, bench, **config):

    cb = PassAtKCallback(bench, eval_steps=1, num_samples=4, k_list=[1, 4], max_new_tokens=2, max_problems=4)
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, **config), callbacks=[cb])
    return trainer, cb


THINKING_TEMPLATE = (  # a chat template with a switch, as Qwen3's `enable_thinking`
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}{% if think is defined and not think %}quick: {% else %}assistant: {% endif %}"
    "{% endif %}"
)


def test_validation_formats_its_prompts_with_the_runs_chat_template_kwargs(tmp_path, model_and_bench):
    """`chat_template_kwargs` (TRL's, e.g. Qwen3's enable_thinking=False) shape every rollout prompt; validation and
    the evaluation formatted theirs without them, so they measured other prompts than the run trained on."""
    from transformers import TrainerState
    from trl.data_utils import apply_chat_template

    _, bench = model_and_bench
    tokenizer = helpers.make_tokenizer()
    tokenizer.chat_template = THINKING_TEMPLATE
    kwargs = {"think": False}
    args = helpers.make_config(tmp_path, chat_template_kwargs=kwargs, save_strategy="steps", max_steps=1)
    cb = PassAtKCallback(bench, eval_steps=1, num_samples=2, k_list=[1], max_new_tokens=2, chat_template_kwargs=kwargs)
    cb.on_train_begin(args, TrainerState(), None)
    problems = load_problems(bench, cb.eval_args, tokenizer)
    row = {"prompt": [{"role": "user", "content": "0?"}]}
    trained = apply_chat_template(row, tokenizer, **kwargs)["prompt"]  # what TRL's rollout formats
    assert trained.endswith("quick: ") and all(p.text.endswith("quick: ") for p in problems)
    # the evaluation takes them too (a YAML mapping, or JSON on the command line)
    for given in (kwargs, '{"think": false}'):
        eval_args = EvalArguments(models=["m"], benchmarks=[bench], chat_template_kwargs=given)
        assert all(p.text.endswith("quick: ") for p in load_problems(bench, eval_args, tokenizer))
    # a callback built without the run's kwargs is refused before training, not left to measure other prompts
    with pytest.raises(ValueError, match=r"chat_template_kwargs=\{'think': False\}"):
        PassAtKCallback(bench, eval_steps=1).on_train_begin(args, TrainerState(), None)


def test_best_checkpoint_survives_rotation(tmp_path, tokenizer, model_and_bench, monkeypatch):
    _, bench = model_and_bench
    trainer, cb = train_with_callback(
        tmp_path, tokenizer, bench, max_steps=4, save_strategy="steps", save_steps=1, save_total_limit=1
    )
    scores = iter([0.2, 0.5, 0.3, 0.1])  # the best is step 2, then two worse evaluations and more saves
    monkeypatch.setattr(cb, "evaluate", lambda model, tok: {"pass@1": next(scores), "pass@4": 0.9})
    trainer.train()
    best = json.loads((tmp_path / "best_checkpoint.json").read_text())
    assert best["step"] == 2 and best["pass@1"] == 0.5
    assert (tmp_path / "checkpoint-2").is_dir()  # protected from save_total_limit=1
    assert any(k.startswith("eval_passk/bench/pass@1") for h in trainer.state.log_history for k in h)


@pytest.mark.parametrize("restore_flag", [False, True])
def test_a_resume_keeps_the_runs_validation_and_compares_only_like_with_like(
    tmp_path, tokenizer, model_and_bench, monkeypatch, restore_flag, caplog
):
    """Resumed, the run's own callback validates (transformers' restore flag would rebuild it from the checkpoint's
    arguments, without the run's prompt format or vLLM sampler); it keeps the checkpoint's best pass@1 when its
    figures measure the same thing, and when they do not (another token budget here) it says so and the next
    validation sets the best afresh instead of losing to a figure measured otherwise."""
    _, bench = model_and_bench
    common = dict(save_strategy="steps", save_steps=1, restore_callback_states_from_checkpoint=restore_flag)
    trainer, cb = train_with_callback(tmp_path, tokenizer, bench, max_steps=2, **common)
    scores = iter([0.5, 0.2])
    monkeypatch.setattr(cb, "evaluate", lambda model, tok: {"pass@1": next(scores), "pass@4": 0.9})
    trainer.train()
    assert json.loads((tmp_path / "best_checkpoint.json").read_text())["step"] == 1

    def resume(max_new_tokens):
        cb = PassAtKCallback(
            bench, eval_steps=1, num_samples=4, k_list=[1, 4], max_new_tokens=max_new_tokens, max_problems=4
        )
        trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, max_steps=3, **common), callbacks=[cb])
        monkeypatch.setattr(cb, "evaluate", lambda model, tok: {"pass@1": 0.3, "pass@4": 0.9})
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="aer_trl.evaluation.validation"):
            trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
        assert [h["step"] for h in cb.history] == [1, 2, 3] and cb.history[-1]["pass@1"] == 0.3  # this callback ran
        return cb, json.loads((tmp_path / "best_checkpoint.json").read_text())

    same, best = resume(max_new_tokens=2)
    assert (same.best_step, best["step"], best["pass@1"]) == (
        1,
        1,
        0.5,
    ) and "measures something else" not in caplog.text
    other, best = resume(max_new_tokens=3)
    assert (other.best_step, best["step"], best["pass@1"]) == (3, 3, 0.3)
    assert "measures something else than the checkpoint's (max_new_tokens 2 -> 3)" in caplog.text


def test_validation_state_restores_only_like_with_like_including_the_prompt_and_older_checkpoints():
    from types import SimpleNamespace

    boxed = PassAtKCallback("b.jsonl", max_new_tokens=8, prompt_args=SimpleNamespace(prompt_instruction="Box it."))
    boxed.best_pass_at_1, boxed.best_step, boxed.history = 0.4, 20, [{"step": 20, "pass@1": 0.4}]
    plain = PassAtKCallback("b.jsonl", max_new_tokens=8)
    assert plain.restore(boxed.state()) == {"prompt_instruction": ("Box it.", None)} and plain.best_step is None
    assert plain.history == boxed.history  # the figures stay in the history
    # a checkpoint saved before `measure` existed: judged by the arguments it saved, and only by those
    legacy = boxed.state()
    del legacy["attributes"]["measure"]
    assert plain.restore(legacy) == {} and (plain.best_step, plain.best_pass_at_1) == (20, 0.4)
    legacy["args"]["max_new_tokens"] = 4
    assert PassAtKCallback("b.jsonl", max_new_tokens=8).restore(legacy) == {"max_new_tokens": (4, 8)}


def test_validation_steps_inside_an_aer_rollout_batch_are_refused(tmp_path, model_and_bench):
    """AER writes no checkpoint inside a rollout batch, so a best checkpoint found there would never be saved."""
    _, bench = model_and_bench
    from transformers import TrainerState

    # 4 optimizer steps per rollout batch
    four = helpers.make_config(tmp_path, steps_per_generation=4, save_strategy="steps")
    cb = PassAtKCallback(bench, eval_steps=6)
    with pytest.raises(ValueError, match="eval_every_steps=6 must be a multiple of 4"):
        cb.on_train_begin(four, TrainerState(), None)
    PassAtKCallback(bench, eval_steps=8).on_train_begin(four, TrainerState(), None)
    grpo = helpers.make_config(tmp_path, method="grpo", steps_per_generation=4, save_strategy="steps")
    cb.on_train_begin(grpo, TrainerState(), None)  # TRL's methods checkpoint anywhere


def test_evaluation_during_training_leaves_the_training_rng_untouched(tmp_path, tokenizer, model_and_bench):
    _, bench = model_and_bench
    cb = PassAtKCallback(bench, eval_steps=1, num_samples=4, k_list=[1, 4], max_new_tokens=2, max_problems=4)
    model = helpers.make_model(tokenizer)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    cuda_before = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    result = cb.evaluate(model, tokenizer)
    assert torch.equal(torch.random.get_rng_state(), before)
    if cuda_before is not None:
        assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), cuda_before))
    assert cb.evaluate(model, tokenizer) == result  # and the evaluation itself is repeatable


def test_chunks_per_rank_for_lockstep_per_rank_and_main_only_samplers():
    from types import SimpleNamespace

    from aer_trl.evaluation.validation import assigned_chunks

    lockstep, free = SimpleNamespace(lockstep=True), SimpleNamespace(lockstep=False)
    server = SimpleNamespace(lockstep=False, main_only=True)
    assert [assigned_chunks(5, r, 2, lockstep) for r in (0, 1)] == [[0, 2, 4], [1, 3, 5]]  # 5: chunk 0 again
    assert [assigned_chunks(5, r, 2, free) for r in (0, 1)] == [[0, 2, 4], [1, 3]]
    assert [assigned_chunks(5, r, 2, server) for r in (0, 1)] == [[0, 1, 2, 3, 4], []]
    assert assigned_chunks(3, 0, 1, lockstep) == [0, 1, 2]


def test_validation_samples_through_the_sampler_factory_when_one_is_set(tmp_path, tokenizer, model_and_bench):
    """`eval_engine: vllm` sets `sampler_factory` (aer_trl.validation_engine): the callback asks it for a generator
    once per validation, samples every chunk through it (not transformers' generate) and scores what it returns."""
    _, bench = model_and_bench
    cb = PassAtKCallback(bench, eval_steps=1, num_samples=4, k_list=[1, 4], max_new_tokens=2, batch_size=3)
    answers = {f"{i}?": str(i % 3) for i in range(10)}
    made, seen = [], []

    class Sampler:
        lockstep = False

        def __call__(self, texts, seed):
            seen.extend(texts)
            # right on every other sample of the problems whose answer is 0, wrong elsewhere
            return [[f"\\boxed{{{answers[q] if answers[q] == '0' and j % 2 else 9}}}" for j in range(4)]
                    for q in (next(k for k in answers if k in t) for t in texts)]  # fmt: skip

    cb.sampler_factory = lambda eval_args: made.append(eval_args) or Sampler()
    result = cb.evaluate(None, tokenizer)  # no model: transformers' generate would fail
    assert len(made) == 1 and made[0].num_samples == 4 and made[0].max_new_tokens == 2
    assert len(seen) == 10  # every problem once, in chunks of batch_size 3
    assert result["pass@1"] == pytest.approx(4 / 10 * 0.5)  # problems 0, 3, 6, 9: half their samples right
    assert result["pass@4"] == pytest.approx(4 / 10)


def test_validation_closes_its_sampler_after_the_last_chunk_even_when_one_fails(tokenizer, model_and_bench):
    """A sampler with `close()` (the colocated engine in sleep mode: aer_trl.validation_engine) is closed once per
    validation, after its last chunk, also when a chunk raises."""
    _, bench = model_and_bench
    closed = []

    class Sampler:
        lockstep = False

        def __init__(self, fail):
            self.fail, self.calls = fail, 0

        def __call__(self, texts, seed):
            self.calls += 1
            if self.fail and self.calls == 2:
                raise RuntimeError("engine died")
            return [["\\boxed{9}"] * 4 for _ in texts]

        def close(self):
            closed.append((self.fail, self.calls))

    for fail in (False, True):
        cb = PassAtKCallback(bench, eval_steps=1, num_samples=4, k_list=[1], max_new_tokens=2, batch_size=3)
        cb.sampler_factory = lambda eval_args, fail=fail: Sampler(fail)
        if fail:
            with pytest.raises(RuntimeError, match="engine died"):
                cb.evaluate(None, tokenizer)
        else:
            cb.evaluate(None, tokenizer)
    assert closed == [(False, 4), (True, 2)]  # 10 problems in chunks of 3: four calls, closed after the last


def test_two_validation_callbacks_resume_from_their_newest_states(tmp_path, tokenizer, model_and_bench, monkeypatch):
    """transformers appends every save's states of callbacks of one class to one list (a checkpoint holds the states
    of every save before it, oldest first): each callback restores from the newest save's entry, not the first."""
    _, bench = model_and_bench
    config = dict(save_strategy="steps", save_steps=1)

    def callbacks(scores):
        cbs = [
            PassAtKCallback(bench, eval_steps=1, num_samples=4, k_list=[1, 4], max_new_tokens=t, max_problems=4)
            for t in (2, 3)
        ]
        for cb, score in zip(cbs, scores):
            monkeypatch.setattr(cb, "evaluate", lambda model, tok, s=score: {"pass@1": next(s), "pass@4": 0.9})
        return cbs

    first = callbacks([iter([0.5, 0.2]), iter([0.1, 0.4])])
    helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, max_steps=2, **config), callbacks=first).train()
    resumed = callbacks([iter([0.3]), iter([0.3])])
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, max_steps=3, **config), callbacks=resumed)
    trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert [[h["pass@1"] for h in cb.history] for cb in resumed] == [[0.5, 0.2, 0.3], [0.1, 0.4, 0.3]]
    assert [(cb.best_step, cb.best_pass_at_1) for cb in resumed] == [(1, 0.5), (2, 0.4)]


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


def test_a_longer_budget_continues_the_shorter_budgets_samples(tmp_path, model_and_bench):
    """The same model, problems and seed at two budgets: every sample of the longer one begins with the shorter one's
    (the real-LLM study splits the answers lost at the trained budget into cut off and never given on this)."""
    model, bench = model_and_bench
    short = evaluate(make_args(tmp_path / "eval", model, bench, max_new_tokens=3))
    longer = evaluate(make_args(tmp_path / "eval", model, bench, max_new_tokens=9))
    assert short[model][bench]["fingerprint"]["id"] != longer[model][bench]["fingerprint"]["id"]
    stored = [json.loads(x) for x in lines(tmp_path / "eval")]
    by_budget = {}
    for r in stored:
        by_budget.setdefault(r["fp"], {})[r["problem"]] = r["completions"]
    first, second = (by_budget[m[bench]["fingerprint"]["id"]] for m in (short[model], longer[model]))
    pairs = [(a, b) for p in first for a, b in zip(first[p], second[p])]
    assert len(pairs) == 10 * 8
    assert all(b.startswith(a) for a, b in pairs)
    assert sum(len(b) > len(a) for a, b in pairs) > 40  # the longer budget did sample more
