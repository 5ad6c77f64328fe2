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


def test_transformers_progress_bar_writes_every_logged_metric_each_step():
    """transformers: `ProgressCallback.on_log` writes the whole log dict, every metric, at each logging step (with
    AER's and TRL's telemetry, over a thousand characters a step). Fix: one short line
    (`callbacks.CompactProgressCallback`, a `ProgressCallback` subclass), every value still in the log history."""
    from transformers import TrainerState
    from transformers.trainer_callback import ProgressCallback

    from aer_trl.callbacks import CompactProgressCallback

    logs = {"loss": 0.0123, "reward": 0.5, "entropy": 0.61, "aer/alpha": 0.02, "learning_rate": 1e-6}
    logs.update({f"rewards/reward_{i}/mean": 0.25 for i in range(40)})  # TRL's per-reward telemetry, and more
    state = TrainerState(global_step=3, max_steps=10)
    state.is_world_process_zero = True
    written = {}
    for callback in (ProgressCallback(), CompactProgressCallback()):
        callback.training_bar = SimpleNamespace(write=lambda text, c=callback: written.setdefault(type(c), text))
        callback.on_log(None, state, None, logs=dict(logs))
    stock, compact = written[ProgressCallback], written[CompactProgressCallback]
    assert all(key in stock for key in logs) and len(stock) > 1000  # every metric, every step
    assert compact.startswith("step 3/10 | loss 0.0123") and len(compact) < 150 and "rewards/" not in compact


def test_transformers_restores_a_stateful_callback_only_when_asked_and_then_from_the_checkpoints_arguments():
    """transformers: `Trainer._load_callback_state` restores stateful callbacks (`ExportableState`) only with
    `restore_callback_states_from_checkpoint` (off by default), and when it does, it rebuilds each from the
    checkpoint's arguments, so a setting the resumed run was given is replaced by the checkpoint's. For AER's
    controller both are wrong: its α and H0 are optimisation state, to restore on every resume, and its settings are
    this run's. The fix, per callback (`ResumeMixin._load_callback_state`), is tested in tests/test_resume.py."""
    from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState
    from transformers.trainer_callback import CallbackHandler, ExportableState

    class Controller(TrainerCallback, ExportableState):
        def __init__(self, tau=1.0):
            self.tau, self.alpha = tau, 0.0

        def state(self):
            return {"args": {"tau": self.tau}, "attributes": {"alpha": self.alpha}}

    def resumed(restore: bool) -> Controller:
        saved = Controller(tau=1.0)
        saved.alpha = 0.37  # where the run stood at its checkpoint
        live = Controller(tau=2.0)  # the resumed run's own setting
        trainer = SimpleNamespace(
            args=SimpleNamespace(restore_callback_states_from_checkpoint=restore),
            state=TrainerState(stateful_callbacks={"Controller": saved.state()}),
            control=TrainerControl(),
            callback_handler=CallbackHandler([live], None, None, None, None),
        )
        Trainer._load_callback_state(trainer)
        return next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, Controller))

    by_default = resumed(restore=False)
    assert (by_default.alpha, by_default.tau) == (0.0, 2.0)  # the controller starts over: α lost
    asked = resumed(restore=True)
    assert (asked.alpha, asked.tau) == (0.37, 1.0)  # α back, but the run's own τ replaced by the checkpoint's


def test_trl_saves_the_rollout_position_only_for_its_own_rollout_worker(tmp_path, monkeypatch):
    """TRL: `AsyncGRPOTrainer._save_checkpoint` writes `rollout_state.json` (the next prompt, the policy version) only
    where the rollout worker is TRL's own `AsyncRolloutWorker` (an isinstance check); any other worker, built to
    TRL's `RolloutWorkerProtocol`, gets no position saved, and a resume starts it from prompt 0 and version 0. Fix:
    the adapter's `_save_checkpoint` / `_inner_training_loop` for its local worker, tested end to end by
    tests/test_async_grpo.py::test_a_killed_async_run_resumes_its_controller_prompt_order_and_versions."""
    from transformers import Trainer
    from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker

    monkeypatch.setattr(Trainer, "_save_checkpoint", lambda self, model, trial: None)  # the test's: weights aside

    def saved_position(worker) -> bool:
        trainer = trl_async.AsyncGRPOTrainer.__new__(trl_async.AsyncGRPOTrainer)  # TRL's method on a bare instance
        trainer.accelerator = SimpleNamespace(is_main_process=True)
        trainer.state = SimpleNamespace(global_step=2)
        trainer._get_output_dir = lambda trial: str(tmp_path / type(worker).__name__)
        trainer.rollout_worker, trainer._trained_groups, trainer.model_version = worker, {0, 1}, 2
        trl_async.AsyncGRPOTrainer._save_checkpoint(trainer, None, None)
        return (tmp_path / type(worker).__name__ / "checkpoint-2" / "rollout_state.json").is_file()

    trls = AsyncRolloutWorker.__new__(AsyncRolloutWorker)
    trls._loop_kwargs = {"dataset_start_index": 0}

    class OwnWorker:  # any other worker (the protocol's methods do not matter to the check)
        pass

    assert saved_position(trls) and not saved_position(OwnWorker())


def test_trl_counts_max_staleness_at_the_queue_while_accelerate_trains_a_sample_one_version_later():
    """TRL: `RolloutQueueDataset` applies `max_staleness` (and logs `sample/staleness_*`) when a sample leaves the
    queue, but accelerate's `DataLoaderShard` fetches one batch ahead of the one it yields, so the next step's sample
    is checked before the optimizer step that trains on the current one publishes a new version. With a worker that
    always samples with the newest weights and `max_staleness=0`, every sample is counted at staleness 0 and every
    one after the first is trained one version old (docs/design.md §5b measured the same in the staleness study). A
    plain torch loader, which fetches only what it yields, trains each at lag 0. No fix in the package: a finding
    (docs/upstream.md #5), and the reason `local_rollout_lag` is at least 1."""
    from collections import defaultdict

    from accelerate.data_loader import DataLoaderShard
    from torch.utils.data import DataLoader

    def lags_trained(loader_class) -> tuple[list[int], list[float]]:
        version, metrics = [0], defaultdict(list)

        class NewestWeightsWorker:  # the queue as the trainer sees it: a sample by the newest version when asked
            def get(self, timeout=None):
                row = {"input_ids": [1], "completion_mask": [1], "old_log_probs": [0], "advantage": 0, "metrics": {}}
                return SimpleNamespace(model_version=version[0], enqueued_at=None, group_id=version[0], **row)

            def qsize(self):
                return 0

        dataset = trl_async.RolloutQueueDataset(
            NewestWeightsWorker(), lambda: version[0], lambda stale_after_s: None, 60.0, metrics, max_staleness=0
        )
        loader = loader_class(dataset, batch_size=None, collate_fn=lambda row: row["group_id"])  # sampled at
        lags = []
        for _, sampled_at in zip(range(4), loader):
            lags.append(version[0] - sampled_at)  # the version it is trained at, less the one that sampled it
            version[0] += 1  # the optimizer step publishes the next version
        return lags, metrics["sample/staleness_max"]

    lags, counted = lags_trained(DataLoaderShard)
    assert counted[:4] == [0.0] * 4 and lags == [0, 1, 1, 1]  # stock: counted 0, trained at lag 1
    assert lags_trained(DataLoader)[0] == [0, 0, 0, 0]  # no lookahead: trained as counted
