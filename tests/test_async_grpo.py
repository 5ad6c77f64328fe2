"""AER on TRL's asynchronous GRPO, on CPU: the tree attention's torch fallback against a dense causal attention, λ from
whole groups however the planner splits them, the loss = TRL's − mean(λ·H) on packed rows, α once per optimizer step
under real staleness (a local rollout worker), and bad input refused by name."""

import json
import logging
import math
import os
import queue
import shutil

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from transformers import AutoModelForCausalLM  # noqa: E402
from trl.experimental.async_grpo import AsyncGRPOTrainer  # noqa: E402
from trl.experimental.async_grpo.packing import TreeRow  # noqa: E402

import aer_trl.upstream.trl_async as async_support  # noqa: E402
from aer_trl import AERAsyncGRPOConfig, AERAsyncGRPOTrainer  # noqa: E402
from aer_trl.async_grpo_trainer import AERCollator, GroupedRollouts  # noqa: E402
from aer_trl.chat_template import read_chat_template  # noqa: E402
from aer_trl.core import AERCore  # noqa: E402
from aer_trl.upstream.local_rollout import LocalRolloutWorker, LocalWeightTransfer  # noqa: E402
from tests import helpers  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    return helpers.save_model(tokenizer, tmp_path_factory.mktemp("async") / "model")


def config(tmp_path, **overrides) -> AERAsyncGRPOConfig:
    kwargs = dict(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=8, max_steps=4, token_budget=0, logging_steps=1, report_to="none",
        gradient_checkpointing=False, learning_rate=1e-2, save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    return AERAsyncGRPOConfig(**{**kwargs, **overrides})


def build(tmp_path, tokenizer, model_dir, rewards, **overrides):
    worker = LocalRolloutWorker(
        AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, helpers.make_dataset(), rewards,
        num_generations=4, max_completion_length=8, seed=0,
    )  # fmt: skip
    args = config(tmp_path, **overrides)
    trainer = AERAsyncGRPOTrainer(
        model=model_dir, reward_funcs=rewards, args=args, train_dataset=helpers.make_dataset(),
        processing_class=tokenizer, rollout_worker=worker, weight_transfer=LocalWeightTransfer(worker),
    )  # fmt: skip
    return trainer, worker


def train(trainer, worker, checkpoint=None):
    """`trainer.train()` (from `checkpoint` where given), the worker's thread stopped however it ends."""
    try:
        trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint))
    finally:
        worker.stop()
    return trainer


def sample_dict(sample):
    """A queued `RolloutSample` as TRL's `RolloutQueueDataset` yields it to the planner."""
    return {k: getattr(sample, k) for k in ("input_ids", "completion_mask", "old_log_probs", "advantage", "group_id",
                                            "metrics")}  # fmt: skip


# ----------------------------------------------------------------------------------------- the CPU path
def test_the_torch_tree_attention_is_a_causal_attention_along_each_samples_path(model_dir, tokenizer):
    """Three samples sharing a prompt (and two a longer prefix) packed into one trie row: through the torch fallback,
    every trained token's log-probability is the one a plain causal forward of its sample alone gives."""
    from trl.experimental.async_grpo.packing import TREE_ATTENTION, register_tree_attention

    register_tree_attention()  # TRL's (FA3 only), as TRL's trainer registers it
    tree = AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation=TREE_ATTENTION
    ).eval()  # as TRL loads it
    async_support.use_tree_attention_by_device(tree)  # what the AER trainer does with it
    assert tree.config._attn_implementation == async_support.AER_TREE_ATTENTION
    dense = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    prompt = tokenizer("12+3=", add_special_tokens=False)["input_ids"]
    completions = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in ("15", "1x5", "1x7y", "9")]
    row = TreeRow()
    for c in completions:
        ids = prompt + c
        row.add({"input_ids": torch.tensor(ids), "completion_mask": torch.tensor([0] * len(prompt) + [1] * len(c)),
                 "old_log_probs": torch.zeros(len(ids)), "advantage": 0.0, "group_id": 0, "metrics": {}})  # fmt: skip
    packed = row.pack()
    assert packed["input_ids"].numel() < sum(len(prompt) + len(c) for c in completions)  # shared tokens forwarded once
    with torch.no_grad():
        logits = tree(
            input_ids=packed["input_ids"].unsqueeze(0), position_ids=packed["position_ids"].unsqueeze(0),
            tree_kv_index=packed["tree_kv_index"], tree_cu_seqlens_q=packed["tree_cu_seqlens_q"],
            tree_cu_seqlens_k=packed["tree_cu_seqlens_k"], tree_max_seqlen_q=int(packed["tree_max_seqlens"][0]),
            tree_max_seqlen_k=int(packed["tree_max_seqlens"][1]),
        ).logits[0]  # fmt: skip
        got = torch.log_softmax(logits.float(), -1)[packed["token_index"], packed["input_ids"].new_tensor(
            [ids for c in completions for ids in c])]  # fmt: skip
        want = []
        for c in completions:
            ids = torch.tensor([prompt + c])
            lp = torch.log_softmax(dense(input_ids=ids).logits[0].float(), -1)
            want += [lp[len(prompt) - 1 + t, c[t]] for t in range(len(c))]
    torch.testing.assert_close(got, torch.stack(want), rtol=1e-5, atol=1e-5)


def test_the_tree_attention_follows_the_tensors_device_not_the_machine(monkeypatch):
    """With an FA3 kernel that loads (a stand-in here), CUDA tensors run TRL's kernel and CPU tensors the torch
    fallback: a use_cpu run on a GPU machine never hands CPU tensors to FA3. TRL's own registration is left as is."""
    from transformers import AttentionInterface
    from trl.experimental.async_grpo import packing

    trl_registered = AttentionInterface._global_mapping.get(packing.TREE_ATTENTION)
    calls = []
    monkeypatch.setattr(async_support, "flash_attention_3_available", lambda: True)  # the stand-in kernel loads
    monkeypatch.setattr(packing, "tree_attention", lambda *a, **k: calls.append("fa3"))
    assert async_support.uses_fa3(torch.device("cuda", 0)) and not async_support.uses_fa3(torch.device("cpu"))
    q = torch.randn(1, 2, 3, 4)
    cu = torch.tensor([0, 3])
    out, _ = async_support.tree_attention_by_device(
        None, q, q, q, None, tree_kv_index=torch.arange(3), tree_cu_seqlens_q=cu, tree_cu_seqlens_k=cu
    )
    assert calls == [] and out.shape == (1, 3, 2, 4)  # CPU tensors: the torch path, though "FA3" loads
    model = torch.nn.Module()
    model.set_attn_implementation = lambda name: calls.append(name)
    async_support.use_tree_attention_by_device(model)
    assert calls == [async_support.AER_TREE_ATTENTION]
    assert AttentionInterface._global_mapping.get(packing.TREE_ATTENTION) is trl_registered


def test_grouped_rollouts_stamp_each_sample_with_its_whole_groups_accuracy():
    """λ needs g(q) of the whole group however the planner later splits it: the queue is read a group at a time,
    each sample stamped with g and its policy version; a group cut short by a timeout goes on as it came."""
    from types import SimpleNamespace

    def sample(group, correct, version=3):
        return SimpleNamespace(group_id=group, model_version=version, metrics={"rewards/ok": correct})

    source = queue.Queue()
    for s in [sample(7, 1.0), sample(7, 0.0), sample(7, 0.0), sample(7, float("nan")), sample(8, 1.0)]:
        source.put(s)
    correct = AERCore(SimpleNamespace(aer_correctness_threshold=0.5, aer_measurements=True), None).correct
    grouped = GroupedRollouts(source, group_size=4, correctness_key="rewards/ok", correct=correct)
    first = [grouped.get(timeout=0.01) for _ in range(4)]
    assert [s.metrics["aer/group_accuracy"] for s in first] == [1 / 3] * 4  # the unscored one left out of g
    assert all(s.metrics["sample/model_version"] == 3.0 for s in first)
    partial = grouped.get(timeout=0.01)  # group 8 never completes: handed on as far as it came
    assert partial.metrics["aer/group_accuracy"] == 1.0 and grouped.partial_groups == 1
    with pytest.raises(queue.Empty):
        grouped.get(timeout=0.01)
    for value, g in ((0.5, 1.0), (0.49, 0.0)):  # the rule of every AER trainer: reward >= aer_correctness_threshold
        source.put(sample(9, value))
        assert GroupedRollouts(source, 1, "rewards/ok", correct).get(timeout=0.01).metrics["aer/group_accuracy"] == g
    source.put(SimpleNamespace(group_id=1, model_version=0, metrics={"rewards/other": 1.0}))
    with pytest.raises(KeyError, match=r"carry no 'rewards/ok' \(they record \['rewards/other'\]\)"):
        GroupedRollouts(source, 1, "rewards/ok", correct).get(timeout=0.01)


# ----------------------------------------------------------------------------------------- the loss
def test_the_loss_is_trls_minus_mean_lambda_entropy_on_packed_rows(tmp_path, tokenizer, model_dir):
    """On a packed row (two groups, one solved, one not), AER's loss is TRL's minus mean_i(λ_i·H_i), H_i the mean
    token entropy of completion i, λ_i from its group's accuracy and the α of now; its gradient is TRL's plus the
    bonus's."""
    trainer, worker = build(tmp_path, tokenizer, model_dir, [helpers.even_length_reward], aer_alpha_init=0.4)
    samples = worker.make_samples(helpers.make_dataset()[0], 0) + worker.make_samples(helpers.make_dataset()[1], 1)
    for s in samples[:4]:
        s.metrics["rewards/even_length_reward"] = 0.0  # group 0 unsolved: g = 0
    source = queue.Queue()
    for s in samples:
        source.put(s)
    grouped = GroupedRollouts(source, 4, "rewards/even_length_reward", trainer.aer_core.correct)
    row = TreeRow()
    for _ in range(8):
        row.add(sample_dict(grouped.get(timeout=0.01)))
    batch = AERCollator(tokenizer.pad_token_id, 1)([[row]])
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    trainer.model_version = 0
    aer = trainer.compute_loss(model, batch)
    g_aer = helpers.grads(model, aer)
    trl = AsyncGRPOTrainer.compute_loss(trainer, model, batch)
    g_trl = helpers.grads(model, trl)
    dense = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa")
    dense.load_state_dict(model.state_dict())
    g = torch.tensor([s.metrics["aer/group_accuracy"] for s in samples])
    lam = 0.4 * torch.clamp(0.2 - g, min=0) / (0.2 + 1e-8)
    entropies = []
    for s in samples:
        ids = torch.tensor(s.input_ids).unsqueeze(0)
        logp = torch.log_softmax(dense(input_ids=ids).logits[0, :-1].float(), -1)
        h = -(logp.exp() * logp).sum(-1)[torch.tensor(s.completion_mask[1:]).bool()]
        entropies.append(h.mean())
    bonus = (lam * torch.stack(entropies)).mean()
    assert lam[:4].tolist() == pytest.approx([0.4] * 4) and lam[4:].eq(0).all()  # the unsolved group only
    torch.testing.assert_close(aer, trl - bonus, rtol=1e-4, atol=1e-5)
    g_bonus = helpers.grads(dense, -bonus)
    assert any(v.abs().sum() > 0 for v in g_bonus.values())
    for name in g_trl:
        torch.testing.assert_close(g_aer[name], g_trl[name] + g_bonus[name], rtol=1e-3, atol=1e-5)


# ----------------------------------------------------------------------------------------- training
def test_aer_trains_async_on_cpu_alpha_per_step_and_telemetry_by_lag(tmp_path, tokenizer, model_dir):
    """A local rollout worker samples while the trainer trains (real staleness); every group is unsolved (a reward
    never correct), τ = 2 puts the entropy below H*: α rises by η at every optimizer step, λ = α on every sample,
    and the logs hold entropy, λ and sample counts by lag."""
    rewards = [helpers.digit_count_reward, helpers.always_wrong]
    trainer, worker = build(
        tmp_path, tokenizer, model_dir, rewards, aer_correctness_reward="always_wrong", aer_tau=2.0, aer_eta=0.05,
        max_steps=5,
    )  # fmt: skip
    assert trainer.model.config._attn_implementation == async_support.AER_TREE_ATTENTION
    train(trainer, worker)
    alphas = [h["alpha"] for h in trainer.aer_callback.controller.history]
    assert alphas == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.25])  # H0 from step 1, α moves once per step
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 5 and all(h["aer/hard_fraction"] == 1.0 for h in logs)
    assert logs[-1]["aer/lambda_mean"] == pytest.approx(logs[-2]["aer/alpha"])  # λ = α in force when trained
    lags = {k for h in logs for k in h if k.startswith("aer/lag/") and k.endswith("/samples")}
    assert lags and max(int(k.split("/")[2]) for k in lags) >= 1  # stale samples were trained, and counted
    assert (tmp_path / "metrics.jsonl").is_file()
    # the synchronous trainers' telemetry, under their keys: one plotting path serves all three
    for key in ("completions/mean_length", "rewards/always_wrong/mean", "rewards/digit_count_reward/mean"):
        assert all(key in h for h in logs), key
    assert all(0 < h["completions/mean_length"] <= 8 for h in logs) and logs[0]["rewards/always_wrong/mean"] == 0.0
    trainer.create_model_card()  # the card says how stale the samples were: max_staleness and the lags trained
    procedure = (tmp_path / "README.md").read_text().split("## Training procedure\n\n", 1)[1].split("\n", 1)[0]
    assert f"max_staleness = {trainer.args.max_staleness} policy versions old; samples trained: " in procedure
    assert (
        " at lag 1" in procedure and "`aer_trl.AERAsyncGRPOTrainer` (TRL's `AsyncGRPOTrainer` with AER)" in procedure
    )


def test_the_local_worker_hands_on_what_reward_functions_log(tokenizer, model_dir):
    """A reward function's `log_metric` (TRL's keyword; the lab logs per-tier accuracy with it) reaches the samples'
    metrics, which TRL's collator averages into the step's logs, as the synchronous trainers log it."""

    def tiered(completions, log_metric=None, **kwargs):
        log_metric("lab/accuracy_tier1", 0.25)
        return [0.0] * len(completions)

    worker = LocalRolloutWorker(
        AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, helpers.make_dataset(), [tiered],
        num_generations=4, max_completion_length=4,
    )  # fmt: skip
    samples = worker.make_samples(helpers.make_dataset()[0], 0)
    assert all(s.metrics["lab/accuracy_tier1"] == 0.25 for s in samples)


def test_a_correctness_reward_that_names_no_reward_function_is_refused(tmp_path, tokenizer, model_dir):
    with pytest.raises(ValueError, match=r"aer_correctness_reward='nope' is not one of the reward functions"):
        build(tmp_path, tokenizer, model_dir, [helpers.even_length_reward], aer_correctness_reward="nope")
    with pytest.raises(ValueError, match="method='ent_adv' does not train with AERAsyncGRPOConfig"):
        config(tmp_path, method="ent_adv")
    assert math.isclose(config(tmp_path, method="clip_higher").epsilon_high, 0.28)


@pytest.mark.slow
@pytest.mark.real
def test_the_cpu_async_recipe_trains_by_name(tmp_path, monkeypatch):
    """`aer-train --config smollm2_135m_instruct/gsm8k/aer_async`: SmolLM2-135M-Instruct (the wheel's GGUF) on GSM8K
    through TRL's asynchronous GRPO on this CPU, sampled by the local worker: AER's controller and lag telemetry."""
    from aer_trl.app.run import main
    from aer_trl.metrics import read_metrics

    monkeypatch.chdir(tmp_path)
    trainer = main(
        [
            "--config",
            "smollm2_135m_instruct/gsm8k/aer_async",
            "--output_dir",
            "run",
            "--max_steps",
            "2",
            "--num_generations",
            "2",
            "--per_device_train_batch_size",
            "2",
            "--max_completion_length",
            "8",
        ]
    )
    trainer.rollout_worker.stop()
    assert isinstance(trainer, AERAsyncGRPOTrainer)
    assert trainer.model.config._attn_implementation == async_support.AER_TREE_ATTENTION
    logs = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "loss" in r]
    assert len(logs) == 2 and all("aer/alpha" in r and "aer/entropy" in r for r in logs)
    assert any(k.startswith("aer/lag/") for r in logs for k in r)
    assert "AER-async GRPO" in (tmp_path / "run" / "README.md").read_text()


def recorded(worker) -> list[tuple[int, str, int]]:
    """What `worker` samples, as it samples it: (the group's place in the run, its prompt, the policy version)."""
    seen, make = [], worker.make_samples

    def recording(row, group_id):
        samples = make(row, group_id)
        seen.append((worker.start_group + group_id, row["prompt"], samples[0].model_version))
        return samples

    worker.make_samples = recording
    return seen


def test_a_killed_async_run_resumes_its_controller_prompt_order_and_versions(tmp_path, tokenizer, model_dir, caplog):
    """Free-running worker, checkpointed at step 2 and resumed to step 4: H0, H* and the α of step 2 come back from the
    checkpoint, and α moves on from there; the local worker goes on from the first group the checkpoint's run did not
    train, with the prompts an uninterrupted run samples there, and the policy versions count on (TRL keeps this
    rollout state for its own vLLM worker only, so the local one started over from prompt 0 and version 1 until
    2026-12-06). The samples themselves are new: which version samples a group depends on the two threads' timing
    (`local_rollout_lag` fixes it: the next test)."""
    rewards = [helpers.digit_count_reward, helpers.always_wrong]
    common = dict(
        aer_correctness_reward="always_wrong", aer_tau=2.0, aer_eta=0.05, save_strategy="steps", save_steps=2
    )
    whole, worker = build(tmp_path / "whole", tokenizer, model_dir, rewards, max_steps=4, **common)
    uninterrupted = recorded(worker)
    train(whole, worker)
    first, worker = build(tmp_path / "a", tokenizer, model_dir, rewards, max_steps=2, **common)
    train(first, worker)
    saved = first.aer_callback.controller
    state = json.loads((tmp_path / "a" / "checkpoint-2" / "rollout_state.json").read_text())
    assert state == {"prompt_index": 2, "model_version": first.model_version, "weights_published": True}
    assert first.model_version == 3  # the cold sync's version 1, one more after each step
    assert not (tmp_path / "a" / "checkpoint-2" / "rollout_inflight.json").exists()  # free-running: nothing kept
    resumed, worker = build(tmp_path / "a", tokenizer, model_dir, rewards, max_steps=4, **common)
    after = recorded(worker)
    with caplog.at_level(logging.WARNING, logger="aer_trl.async_grpo_trainer"):
        train(resumed, worker, tmp_path / "a" / "checkpoint-2")
    assert "the steps after it differ from the uninterrupted run's (local_rollout_lag gives" in caplog.text
    again = resumed.aer_callback.controller
    assert (again.initial_entropy, again.target) == (saved.initial_entropy, saved.target)
    assert [h["alpha"] for h in again.history] == pytest.approx([0.05, 0.1, 0.15, 0.2])  # 2 restored, 2 new
    assert again.iteration == 4
    prompts = {place: prompt for place, prompt, _ in uninterrupted}
    assert after[0][0] == 2 and all(prompts[place] == prompt for place, prompt, _ in after if place in prompts)
    # the versions count on as the uninterrupted run's: the resumed run's first sync publishes the checkpoint's
    # weights under the version they had (TRL numbers them anew for its own worker), then one more per step
    assert min(version for *_, version in after) == state["model_version"]
    assert resumed.model_version == whole.model_version == 5


def step_logs(trainer, after: int) -> dict[int, dict]:
    """Each training log after step `after`, without its timings and its epoch (transformers counts a resumed
    run's epoch anew where the data cannot be skipped, which TRL's asynchronous GRPO forces)."""
    timed = ("perf/", "sample/time_in_queue", "sample/rollout_queue", "train_runtime", "_per_second")
    return {
        h["step"]: {k: v for k, v in h.items() if not k.startswith(timed) and k != "epoch"}
        for h in trainer.state.log_history
        if "loss" in h and h["step"] > after
    }


def test_with_local_rollout_lag_a_killed_async_run_resumes_exactly(tmp_path, tokenizer, model_dir, caplog):
    """`local_rollout_lag` 2 (lockstep: group k sampled by the version two steps older than the one that trains
    it), 2 groups a step: resumed from the uninterrupted run's checkpoint at step 2, the run trains the groups the
    checkpoint kept (sampled by versions 1 and 2, which no longer exist) and then samples on: α, H0, H*, every
    logged value of steps 3 and 4 (losses, entropies, λ and counts by lag) and the parameters at the end are the
    uninterrupted run's. Changing the lag on resume is said."""
    rewards = [helpers.digit_count_reward, helpers.always_wrong]
    common = dict(
        aer_correctness_reward="always_wrong", aer_tau=2.0, aer_eta=0.05, save_strategy="steps", save_steps=1,
        max_steps=4, gradient_accumulation_steps=2, local_rollout_lag=2,
    )  # fmt: skip
    whole, worker = build(tmp_path / "whole", tokenizer, model_dir, rewards, **common)
    train(whole, worker)
    checkpoint = tmp_path / "whole" / "checkpoint-2"
    kept = json.loads((checkpoint / "rollout_inflight.json").read_text())
    assert sorted(map(int, kept["groups"])) == [4, 5, 6, 7]  # the groups of steps 3 and 4, by versions 1 and 2
    assert {s["model_version"] for g in kept["groups"].values() for s in g} == {1, 2}
    resumed, worker = build(tmp_path / "resumed", tokenizer, model_dir, rewards, **common)
    train(resumed, worker, checkpoint)
    a, b = whole.aer_callback.controller, resumed.aer_callback.controller
    assert len({h["alpha"] for h in a.history}) == 4, "α should move for this test to mean something"
    assert b.history == a.history and (b.initial_entropy, b.target, b.iteration) == (a.initial_entropy, a.target, 4)
    logs = step_logs(whole, after=2)
    assert logs[4]["aer/lag/2/samples"] > 0 and not any("aer/lag/3" in k for k in logs[4])  # lag 2 exactly
    again = step_logs(resumed, after=2)
    # TRL's collator records a micro-batch's rewards and sizes when it collates it, one micro-batch ahead of training
    # (accelerate reads ahead): the checkpoint's run logged step 3's first with step 2, the resumed run with step 3
    collated = ("reward", "sample/", "batch/", "completions/")
    assert {k: v for k, v in again[3].items() if not k.startswith(collated)} == {
        k: v for k, v in logs[3].items() if not k.startswith(collated)
    }
    assert again[4] == logs[4]
    helpers.assert_same_params(helpers.params(resumed.model), helpers.params(whole.model))
    # resumed twice: the resumed run's checkpoint at step 3 keeps the groups it replayed and has not trained yet
    kept = json.loads((tmp_path / "resumed" / "checkpoint-3" / "rollout_inflight.json").read_text())
    assert sorted(map(int, kept["groups"])) == [6, 7, 8, 9]  # steps 4 (replayed, version 2) and 5 (version 3)
    twice, worker = build(tmp_path / "twice", tokenizer, model_dir, rewards, **common)
    train(twice, worker, tmp_path / "resumed" / "checkpoint-3")
    assert twice.aer_callback.controller.history == a.history
    helpers.assert_same_params(helpers.params(twice.model), helpers.params(whole.model))

    changed, worker = build(tmp_path / "changed", tokenizer, model_dir, rewards, **{**common, "local_rollout_lag": 1})
    with caplog.at_level(logging.WARNING, logger="aer_trl.async_grpo_trainer"):
        train(changed, worker, checkpoint)
    assert "had local_rollout_lag=2, this one 1" in caplog.text and changed.state.global_step == 4

    # a checkpoint without its in-flight groups (a run without the schedule, a file lost): said, sampled anew, no hang
    bare = tmp_path / "bare" / "checkpoint-2"
    shutil.copytree(checkpoint, bare, ignore=shutil.ignore_patterns("rollout_inflight.json"))
    again, worker = build(tmp_path / "bare", tokenizer, model_dir, rewards, **common, weight_sync_timeout=60)
    with caplog.at_level(logging.WARNING, logger="aer_trl.async_grpo_trainer"):
        train(again, worker, bare)
    assert "has no rollout_inflight.json" in caplog.text and again.state.global_step == 4


def test_local_rollout_lag_is_checked_as_trl_checks_its_settings(tmp_path):
    with pytest.raises(ValueError, match=r"local_rollout_lag must be an integer from 1 .* got 0"):
        config(tmp_path, local_rollout_lag=0)
    with pytest.raises(ValueError, match=r"to max_staleness \(1; older samples are dropped\), got 2"):
        config(tmp_path, local_rollout_lag=2, max_staleness=1)
    with pytest.raises(ValueError, match="local_rollout_lag needs token_budget=0"):
        config(tmp_path, local_rollout_lag=1, token_budget=64)
    with pytest.raises(ValueError, match="local_rollout_lag needs weight_sync_steps=1"):
        config(tmp_path, local_rollout_lag=1, weight_sync_steps=2)
    with pytest.raises(ValueError, match="aer_max_lag must be an integer >= 0"):
        config(tmp_path, aer_max_lag=-1)


def test_the_schedule_keeps_each_group_within_one_step(tokenizer, model_dir):
    worker = LocalRolloutWorker(
        AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, helpers.make_dataset(), [helpers.always_wrong],
        num_generations=4, max_completion_length=8,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"samples of an optimizer step \(6: .*multiple of num_generations \(4\)"):
        worker.schedule(2, samples_per_step=6)
    worker.schedule(2, samples_per_step=8)  # 2 groups a step: steps 1, 1, 2, 2, 3, 3, ...
    assert [worker.version_for(k) for k in range(8)] == [1, 1, 1, 1, 1, 1, 2, 2]


# ----------------------------------------------------------------------------------------- one construction path
class Scorer:
    """A reward given as a callable instance (TRL names it by its class)."""

    def __call__(self, completions, **kwargs):
        return [0.0] * len(completions)


def test_the_async_trainer_is_built_as_the_other_two(tmp_path, model_dir, monkeypatch):
    """Through the shared constructor: `chat_template_path` reaches the tokenizer the local worker formats prompts
    with (the trainer's own), rewards given as a `functools.partial` and a callable instance are named as TRL names
    them (the worker's records, `aer_correctness_reward`, the queue's key), and TRL's two step callbacks are added
    without transformers' duplicate-callback warning."""
    import functools

    from transformers import trainer_callback

    warnings = []
    monkeypatch.setattr(trainer_callback.logger, "warning", lambda msg, *a, **k: warnings.append(str(msg)))
    args = config(
        tmp_path, local_rollouts=True, chat_template_path="plain", aer_correctness_reward="even_length_reward"
    )
    trainer = AERAsyncGRPOTrainer(
        model=model_dir, reward_funcs=[Scorer(), functools.partial(helpers.even_length_reward)], args=args,
        train_dataset=helpers.make_dataset(),
    )  # fmt: skip
    worker = trainer.rollout_worker
    assert worker.tokenizer is trainer.processing_class  # one tokenizer: the template set on it reaches the worker
    assert trainer.processing_class.chat_template == read_chat_template("plain")
    assert worker.reward_func_names == ["Scorer", "even_length_reward"]
    assert trainer.aer_core.correctness_index == 1 and trainer.rollout_queue.key == "rewards/even_length_reward"
    samples = worker.make_samples(helpers.make_dataset()[0], 0)
    assert {"rewards/Scorer", "rewards/even_length_reward"} <= set(samples[0].metrics)
    assert not [w for w in warnings if "there is already one" in w]


def test_what_the_local_worker_cannot_do_is_refused_at_construction(tmp_path, tokenizer, model_dir):
    worker = LocalRolloutWorker(
        AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, helpers.make_dataset(), [helpers.always_wrong],
        num_generations=4, max_completion_length=8,
    )  # fmt: skip
    with pytest.raises(
        ValueError, match=r"local_rollouts=True builds the rollout worker .* `rollout_worker` was given"
    ):
        AERAsyncGRPOTrainer(
            model=model_dir, reward_funcs=[helpers.always_wrong], args=config(tmp_path, local_rollouts=True),
            train_dataset=helpers.make_dataset(), processing_class=tokenizer, rollout_worker=worker,
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"vllm_logp_gap_limit=0.5: AERAsyncGRPOTrainer cannot honour it .*"):
        config(tmp_path, vllm_logp_gap_limit=0.5)
