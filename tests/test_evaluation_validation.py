"""Validation during training (`PassAtKCallback`): prompts, checkpoints, resume, the sampler, the RNG."""

import json
import logging

import pytest
import torch

from aer_trl.app.evaluation import EvalArguments, PassAtKCallback
from aer_trl.app.evaluation.plan import load_problems
from tests import helpers
from tests.eval_helpers import THINKING_TEMPLATE, train_with_callback


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
        with caplog.at_level(logging.WARNING, logger="aer_trl.app.evaluation.validation"):
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

    from aer_trl.app.evaluation.validation import assigned_chunks

    lockstep, free = SimpleNamespace(lockstep=True), SimpleNamespace(lockstep=False)
    server = SimpleNamespace(lockstep=False, main_only=True)
    assert [assigned_chunks(5, r, 2, lockstep) for r in (0, 1)] == [[0, 2, 4], [1, 3, 5]]  # 5: chunk 0 again
    assert [assigned_chunks(5, r, 2, free) for r in (0, 1)] == [[0, 2, 4], [1, 3]]
    assert [assigned_chunks(5, r, 2, server) for r in (0, 1)] == [[0, 1, 2, 3, 4], []]
    assert assigned_chunks(3, 0, 1, lockstep) == [0, 1, 2]


def test_validation_samples_through_the_sampler_factory_when_one_is_set(tmp_path, tokenizer, model_and_bench):
    """`eval_engine: vllm` sets `sampler_factory` (evaluation.engine_samplers): the callback asks it for a generator
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
    """A sampler with `close()` (the colocated engine in sleep mode: evaluation.engine_samplers) is closed once per
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
