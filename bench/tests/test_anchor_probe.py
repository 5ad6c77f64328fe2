"""aer_bench.anchor_probe: `aer_anchor_probe` measures H0 on the untrained policy before step 1, once; its settings
are checked by name; the library's config has no such field."""

import bench_helpers
import pytest

from aer_trl import AERGRPOConfig
from tests import helpers
from tests.helpers import alphas


def spy_on_generate(trainer):
    """Records each `_generate` call's prompts and completion lengths."""
    calls, generate = [], trainer._generate

    def spy(prompts):
        out = generate(prompts)
        calls.append((list(prompts), [len(c) for c in out[1]]))
        return out

    trainer._generate = spy
    return calls


def test_probe_anchors_h0_before_step_1_and_leaves_the_rollout_metrics_alone(tmp_path, tokenizer):
    args = bench_helpers.make_bench_config(tmp_path, aer_anchor_probe=6, aer_tau=2.0, aer_eta=0.01, max_steps=2)
    trainer = bench_helpers.make_trainer(tokenizer, args)
    calls = spy_on_generate(trainer)
    trainer.train()
    (probe, probe_lengths), (step1, step1_lengths), _ = calls
    assert len(probe) == 6 * 4 and len(set(probe)) == 6  # 6 prompts x num_generations, from the training set
    assert set(probe) <= set(helpers.make_dataset()["prompt"])
    logs = [h for h in trainer.state.log_history if "aer/entropy" in h]
    h0 = logs[0]["aer/anchor_probe_entropy"]
    assert trainer.aer_callback.initial_entropy == pytest.approx(h0, rel=1e-6) and h0 > 0
    assert abs(h0 - logs[0]["aer/entropy"]) > 1e-6  # not the first rollout batch's
    assert logs[0]["aer/target_entropy"] == pytest.approx(2 * h0, rel=1e-6)  # τ = 2
    assert alphas(trainer)[0] == 0.01  # α moves from the first rollout batch on: H0 is known before it
    # step 1 logs its own rollout batch only, as it would without the probe
    assert logs[0]["completions/mean_length"] == pytest.approx(sum(step1_lengths) / len(step1_lengths))
    prompt_tokens = sum(len(tokenizer(p)["input_ids"]) for p in step1)
    assert logs[0]["num_tokens"] == prompt_tokens + sum(step1_lengths)


def test_probe_is_not_taken_again_on_resume(tmp_path, tokenizer):
    common = dict(aer_anchor_probe=4, aer_tau=1.0, aer_eta=0.01, max_steps=4, save_strategy="steps", save_steps=2)
    full = bench_helpers.make_trainer(tokenizer, bench_helpers.make_bench_config(tmp_path / "full", **common))
    full.train()
    resumed = bench_helpers.make_trainer(tokenizer, bench_helpers.make_bench_config(tmp_path / "resumed", **common))
    calls = spy_on_generate(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert len(calls) == 2  # steps 3 and 4, no probe
    assert resumed.aer_callback.initial_entropy == full.aer_callback.initial_entropy
    assert alphas(resumed) == alphas(full)


def test_probe_leaves_truncated_completions_out_when_training_does(tmp_path, tokenizer):
    """With mask_truncated_completions, the probe measures H0 over the completions that ended, as H_t is measured:
    the same probe completions (same seed) give another H0 than without the mask."""
    runs = []
    for masked in (False, True):
        args = bench_helpers.make_bench_config(
            tmp_path / str(masked), aer_anchor_probe=16, mask_truncated_completions=masked, max_steps=1
        )
        trainer = bench_helpers.make_trainer(tokenizer, args)
        calls = spy_on_generate(trainer)
        trainer.train()
        runs.append((calls[0], trainer.aer_callback.initial_entropy))
    (probe, lengths), h0 = runs[0]
    assert runs[1][0] == (probe, lengths)  # the same completions
    assert 0 < sum(n < 8 for n in lengths) < len(lengths)  # some ended, some were cut at max_completion_length
    assert runs[1][1] > 0 and abs(runs[1][1] - h0) > 1e-4


def test_trls_adaptive_entropy_anchored_at_a_probe(tmp_path, tokenizer):
    """`aer_trl_target_ratio` with `aer_anchor_probe`: TRL's target is ratio × the probe's H0, as AER's H* would be."""
    args = bench_helpers.make_bench_config(
        tmp_path, method="skywork", aer_measurements=True, max_steps=2, aer_trl_target_ratio=0.5, aer_anchor_probe=4
    )
    trainer = bench_helpers.make_trainer(tokenizer, args)
    trainer.train()
    probe = trainer.state.log_history[0]["aer/anchor_probe_entropy"]
    assert trainer.aer_callback.initial_entropy == pytest.approx(probe)
    assert trainer.args.entropy_target == pytest.approx(0.5 * probe)
    assert trainer.aer_callback.controller.history[0]["entropy"] != pytest.approx(probe, abs=1e-7)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"aer_anchor_probe": -1}, "aer_anchor_probe must be an integer >= 0"),
        ({"aer_anchor_probe": 2.5}, "aer_anchor_probe must be an integer >= 0"),
        ({"aer_anchor_probe": 8, "aer_anchor_rollouts": 2}, "two anchors for H0"),
        ({"aer_anchor_probe": 8, "method": "grpo"}, "aer_anchor_probe measures AER's H0"),
    ],
)
def test_bad_probe_settings_are_refused_by_name(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        bench_helpers.make_bench_config(tmp_path, **overrides)


def test_the_probe_is_the_benchs_not_the_librarys(tmp_path):
    assert bench_helpers.make_bench_config(tmp_path).aer_anchor_probe == 0  # off unless asked for
    with pytest.raises(TypeError, match="aer_anchor_probe"):
        AERGRPOConfig(**helpers.config_kwargs(tmp_path, aer_anchor_probe=4))
