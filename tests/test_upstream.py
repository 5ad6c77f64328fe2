"""Minimal reproductions, against the stock libraries, of what docs/upstream.md proposes to fix upstream: each test
first shows the stock behaviour (TRL's or transformers' code as installed, nothing of aer_trl in the way), then that
the package's fix gives the right one. When a stock assertion fails, upstream has changed: the package's fix may go
(docs/upstream.md says which module to retire)."""

import os
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl.experimental.async_grpo import async_grpo_trainer as trl_async  # noqa: E402
from trl.experimental.async_grpo import packing  # noqa: E402

from aer_trl.async_grpo_trainer import TrainedGroups  # noqa: E402
from aer_trl.upstream.trl_async import peak_flops_per_device, tree_attention_sdpa  # noqa: E402


def test_trl_peak_flops_ask_cuda_for_a_cpu_devices_name():
    """TRL: `get_peak_flops_per_device` calls `torch.cuda.get_device_name(accelerator.device)`, which raises for a CPU
    device, inside `AsyncGRPOTrainer.__init__`: the trainer cannot be built on a CPU. Fix: None off CUDA."""
    from trl.trainer.utils import get_peak_flops_per_device

    cpu = SimpleNamespace(device=torch.device("cpu"))
    with pytest.raises((AssertionError, RuntimeError, ValueError)):
        get_peak_flops_per_device(cpu, "float32")
    assert peak_flops_per_device(cpu, "float32") is None


def test_trl_tree_attention_runs_only_on_the_fa3_kernel():
    """TRL: the tree attention of packed rows is FA3's varlen kernel, fetched from the Hub, with no fallback: on a CPU
    (or offline, or on an older GPU) the forward fails. Fix: the same attention in torch (checked against a dense
    causal attention in tests/test_async_grpo.py), chosen by the tensors' device."""
    q = torch.randn(1, 2, 3, 4)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    kwargs = dict(tree_kv_index=torch.arange(3), tree_cu_seqlens_q=cu, tree_cu_seqlens_k=cu)
    with pytest.raises(Exception):  # noqa: B017 - no `kernels` package, no Hub, or no CUDA: each fails differently
        packing.tree_attention(None, q, q, q, None, tree_max_seqlen_q=3, tree_max_seqlen_k=3, **kwargs)
    out, _ = tree_attention_sdpa(None, q, q, q, None, **kwargs)
    assert out.shape == (1, 3, 2, 4) and torch.isfinite(out).all()


def test_trl_counts_the_groups_collated_one_micro_batch_ahead_as_trained():
    """TRL: the collator marks a micro-batch's groups trained when it collates them, and accelerate's loader collates
    one micro-batch ahead of training, so at a checkpoint after group 0 is trained, `rollout_state.json`'s
    prompt_index counts group 1 too and a resume skips its prompt. Fix: the latest collate is left out."""

    def row(group):
        ids = torch.tensor([5, 6, 7, 8])
        sample = {"input_ids": ids, "completion_mask": torch.tensor([0, 0, 1, 1]), "old_log_probs": torch.zeros(4),
                  "advantage": 1.0, "group_id": group, "metrics": {}}  # fmt: skip
        tree = packing.TreeRow()
        tree.add(sample)
        return [tree]

    stock, ours = set(), TrainedGroups()
    for trained in (stock, ours):
        collator = trl_async.DataCollatorForRollout(pad_token_id=0, groups_trained=trained)
        collator.torch_call([row(0)])  # trained
        collator.torch_call([row(1)])  # collated ahead by the loader, not trained yet
    first_untrained = next(g for g in range(10) if g not in stock)  # TRL's `_save_checkpoint`
    assert first_untrained == 2  # stock: group 1's prompt is skipped on resume
    assert ours.first_untrained() == 1


def test_transformers_warns_about_trls_two_step_interval_callbacks(monkeypatch):
    """TRL adds two `StepIntervalCallback`s to every asynchronous trainer (the weight sync and the step metrics), and
    transformers warns, with the whole callback list, about a second callback of one class. Fix: the AER trainer adds
    those two without the check (tests/test_async_grpo.py builds one and sees no warning)."""
    from transformers import trainer_callback

    warnings = []
    monkeypatch.setattr(trainer_callback.logger, "warning", lambda msg, *a, **k: warnings.append(str(msg)))
    handler = trainer_callback.CallbackHandler([], None, None, None, None)
    handler.add_callback(trl_async.StepIntervalCallback(lambda: None, 1))
    handler.add_callback(trl_async.StepIntervalCallback(lambda: None, 1))
    assert any("there is already one" in w for w in warnings)


def test_trls_model_card_front_matter_says_licence_license(tmp_path):
    """TRL's `generate_model_card` writes `licence: license` into the card's front matter: a misspelt key with a
    placeholder value, which the Hub does not read as a license. Fix: the AER card drops the line."""
    from trl.trainer.utils import generate_model_card

    card = generate_model_card(
        base_model=None, model_name="m", hub_model_id="m", dataset_name=None, tags=[], wandb_url=None,
        trackio_url=None, trainer_name="GRPO", trainer_citation=None,
    )  # fmt: skip
    assert "licence: license" in str(card)
    from aer_trl.card import clean_front_matter

    assert "licence" not in clean_front_matter(str(card)) and clean_front_matter(str(card)).startswith("---\n")


def test_transformers_trains_one_step_past_max_steps_when_a_finished_run_is_resumed(tmp_path):
    """transformers (stock `trl.GRPOTrainer`): a run resumed from its checkpoint at `max_steps` (a finished job
    queued again) trains one step more before its loop checks `max_steps`. Fix: `ResumeMixin._run_epoch` returns
    before training (tests/test_resume.py::test_a_finished_run_started_again_trains_nothing_more)."""
    from trl import GRPOConfig, GRPOTrainer

    from tests import helpers

    tokenizer = helpers.make_tokenizer()
    kwargs = helpers.config_kwargs(tmp_path / "run", max_steps=2, save_strategy="steps", save_steps=1)
    helpers.make_trainer(tokenizer, GRPOConfig(**kwargs), trainer_class=GRPOTrainer).train()
    again = helpers.make_trainer(tokenizer, GRPOConfig(**kwargs), trainer_class=GRPOTrainer)
    again.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    assert again.state.global_step == 3  # stock: one step past max_steps=2
