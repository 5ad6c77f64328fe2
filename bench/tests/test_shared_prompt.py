"""`share_prompt_forward`: each distinct prompt's forward once, its KV cache shared by its group's completions, gives
TRL's log-probabilities, entropies and gradients (up to float rounding), and trains like TRL's forward."""

import inspect

import bench_helpers
import pytest
import torch
from trl import GRPOTrainer

from aer_bench.training import BenchGRPOTrainer
from tests import helpers


def _batch(tokenizer):
    """2 prompts (different lengths, left-padded) x 4 completions (right-padded), rows interleaved as after TRL's
    shuffle."""
    pad = tokenizer.pad_token_id
    prompts = [tokenizer("12+3=")["input_ids"], tokenizer("7+5=")["input_ids"]]
    width = max(map(len, prompts))
    rows, masks = [], []
    completions = ["15", "1", "16x", "", "12", "123", "1", "9"]
    for i, text in enumerate(completions):
        p = prompts[i % 2]
        c = tokenizer(text)["input_ids"] if text else []
        c = (c + [tokenizer.eos_token_id])[:4]
        rows.append([pad] * (width - len(p)) + p + c + [pad] * (4 - len(c)))
        masks.append([0] * (width - len(p)) + [1] * len(p) + [1] * len(c) + [0] * (4 - len(c)))
    return torch.tensor(rows), torch.tensor(masks), 4


@pytest.fixture
def trainer(tmp_path):
    tokenizer = helpers.make_tokenizer()
    model = helpers.make_model(tokenizer)
    args = bench_helpers.make_bench_config(tmp_path, share_prompt_forward=True)
    return BenchGRPOTrainer(
        model=model,
        reward_funcs=helpers.even_length_reward,
        args=args,
        train_dataset=helpers.make_dataset(),
        processing_class=tokenizer,
    )


def _logps_and_grads(trainer, shared: bool, ids, mask, keep):
    model = trainer.model
    model.zero_grad()
    if shared:
        out = trainer._shared_prompt_logps(model, ids, mask, keep, compute_entropy=True)
        assert out is not None
    else:
        out = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, mask, keep, compute_entropy=True)
    logps, entropies, _ = out
    completion_mask = mask[:, -keep:].float()
    ((logps * completion_mask).sum() + (entropies * completion_mask).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logps.detach() * completion_mask, entropies.detach() * completion_mask, grads


def test_shared_prompt_forward_equals_trls_forward(trainer):
    ids, mask, keep = _batch(trainer.processing_class)
    ref_logps, ref_entropies, ref_grads = _logps_and_grads(trainer, False, ids, mask, keep)
    logps, entropies, grads = _logps_and_grads(trainer, True, ids, mask, keep)
    torch.testing.assert_close(logps, ref_logps, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(entropies, ref_entropies, rtol=1e-4, atol=1e-5)
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-3, atol=1e-5, msg=name)


def test_shared_prompt_forward_keeps_trls_memory_chunks(trainer):
    ids, mask, keep = _batch(trainer.processing_class)
    whole = trainer._shared_prompt_logps(trainer.model, ids, mask, keep, compute_entropy=True)
    chunked = trainer._shared_prompt_logps(trainer.model, ids, mask, keep, batch_size=4, compute_entropy=True)
    completion_mask = mask[:, -keep:]
    for a, b in zip(whole[:2], chunked[:2]):
        torch.testing.assert_close(a * completion_mask, b * completion_mask, rtol=1e-4, atol=1e-5)


def test_shared_prompt_forward_steps_back_where_nothing_is_shared(trainer):
    ids, mask, keep = _batch(trainer.processing_class)
    assert trainer._shared_prompt_logps(trainer.model, ids[::2][:1], mask[::2][:1], keep) is None
    assert trainer._shared_prompt_logps(trainer.model, ids, mask, keep, compute_aux_loss=True) is None


def test_training_with_the_shared_prompt_forward_matches_trls_forward(tmp_path):
    tokenizer = helpers.make_tokenizer()

    def run(share):
        trainer = BenchGRPOTrainer(
            model=helpers.make_model(tokenizer),
            reward_funcs=[helpers.even_length_reward, helpers.digit_count_reward],
            # SGD: Adam turns float rounding on near-zero gradients into full ±lr steps; SGD's update is the gradient's
            args=bench_helpers.make_bench_config(
                tmp_path / str(share), share_prompt_forward=share, max_steps=2, optim="sgd"
            ),
            train_dataset=helpers.make_dataset(),
            processing_class=tokenizer,
        )
        trainer.train()
        return [r["loss"] for r in trainer.state.log_history if "loss" in r], trainer.model.state_dict()

    ref_loss, ref_state = run(False)
    loss, state = run(True)
    assert loss == pytest.approx(ref_loss, rel=1e-4, abs=1e-6)
    for name in ref_state:
        torch.testing.assert_close(state[name], ref_state[name], rtol=1e-4, atol=1e-6, msg=name)


def test_the_logps_method_takes_only_keywords_the_shared_prompt_path_knows():
    """The shared prompt forward keeps an allow-list of TRL's keywords: a keyword TRL adds must be classified there
    (shared, or TRL's own forward) before it can pass."""
    base = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)[1:]
    assert base[:6] == ["model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy"]
    assert set(base[6:]) <= BenchGRPOTrainer._SHARED_PROMPT_KNOWN, (
        set(base[6:]) - BenchGRPOTrainer._SHARED_PROMPT_KNOWN
    )


def test_the_shared_prompt_path_refuses_a_keyword_it_does_not_know(trainer):
    ids, mask, keep = _batch(trainer.processing_class)
    with pytest.raises(ValueError, match=r"share_prompt_forward: TRL passed \['future_kwarg'\]"):
        trainer._shared_prompt_logps(trainer.model, ids, mask, keep, future_kwarg=None)
    # the multimodal ones it knows send the batch to TRL's forward
    assert trainer._shared_prompt_logps(trainer.model, ids, mask, keep, pixel_values=torch.zeros(1)) is None


def test_the_shared_rollout_takes_what_trl_passes_its_generate_single_turn():
    """The bench's one override of a private TRL method: TRL calls it with these parameters, in this order."""
    from aer_bench.shared_prompt import SharedPromptMixin

    theirs = list(inspect.signature(GRPOTrainer._generate_single_turn).parameters)
    assert list(inspect.signature(SharedPromptMixin._generate_single_turn).parameters) == theirs


def test_a_training_step_with_the_shared_prompt_forward_warns_of_no_renamed_name(tmp_path):
    """The shared forward passes the KV cache under the name the installed transformers wants (aer_trl.compat)."""
    import warnings

    from tests.test_compat import _ours

    tokenizer = helpers.make_tokenizer()
    trainer = bench_helpers.make_trainer(
        tokenizer, bench_helpers.make_bench_config(tmp_path, share_prompt_forward=True, max_steps=1)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert _ours(caught) == []
