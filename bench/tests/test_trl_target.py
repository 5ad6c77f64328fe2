"""aer_bench.trl_target: `aer_trl_target_ratio` anchors TRL's adaptive entropy target at AER's H0 (the first rollout
batch's, a probe's, or a resumed checkpoint's), on a copy of the caller's config; the library has no such field."""

import inspect
import math

import bench_helpers
import pytest
from trl import GRPOTrainer

from aer_trl import AERGRPOConfig
from tests import helpers


def _trainer(args):
    return bench_helpers.make_trainer(
        helpers.make_tokenizer(), args, reward_funcs=[helpers.even_length_reward, helpers.digit_count_reward]
    )


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0.9, 1.05])  # the tiny model's entropy stays above 0.9·H0, below 1.05·H0
def test_trls_adaptive_entropy_with_its_target_anchored_at_h0(tmp_path, ratio):
    """`aer_trl_target_ratio` (method skywork): TRL's adaptive entropy control trains exactly as with
    entropy_target = ratio × H0 given from the start, H0 being the first rollout batch's entropy."""
    common = dict(method="skywork", aer_measurements=True, max_steps=4, entropy_coef_delta=0.05)
    config = bench_helpers.make_bench_config(tmp_path / "a", aer_trl_target_ratio=ratio, **common)
    user_target = config.entropy_target
    anchored = _trainer(config)
    anchored.train()
    h0 = anchored.aer_callback.controller.history[0]["entropy"]
    assert anchored.args.entropy_target == pytest.approx(ratio * h0)
    assert config.entropy_target == user_target and anchored.args is not config  # the caller's config as given
    given = _trainer(bench_helpers.make_bench_config(tmp_path / "g", entropy_target=ratio * h0, **common))
    given.train()
    coefs = [[r["entropy_coef"] for r in t.state.log_history if "entropy_coef" in r] for t in (anchored, given)]
    assert coefs[0] == coefs[1]
    assert coefs[0] == pytest.approx([0.0] * 4 if ratio < 1 else [0.05, 0.1, 0.15, 0.2])  # down, or up each step
    losses = [[r["loss"] for r in t.state.log_history if "loss" in r] for t in (anchored, given)]
    assert losses[0] == losses[1]
    with pytest.raises(ValueError, match="aer_trl_target_ratio anchors"):
        bench_helpers.make_bench_config(tmp_path / "x", method="grpo", aer_trl_target_ratio=0.4)


def test_trl_reads_the_entropy_target_from_args_at_every_step():
    """`aer_trl_target_ratio` (method skywork) sets `args.entropy_target` after the first rollout batch: TRL must read
    it from `self.args` when it applies its adaptive entropy bonus, not from a copy taken at construction."""
    source = inspect.getsource(GRPOTrainer._compute_loss)
    assert "self.args.entropy_target" in source
    assert "self.entropy_target" not in inspect.getsource(GRPOTrainer.__init__)


def test_a_resumed_run_anchors_where_the_run_never_stopped_did(tmp_path, tokenizer):
    common = dict(
        method="skywork", aer_measurements=True, max_steps=4, entropy_coef_delta=0.05, aer_trl_target_ratio=1.05,
        save_strategy="steps", save_steps=2,
    )  # fmt: skip
    full = bench_helpers.make_trainer(tokenizer, bench_helpers.make_bench_config(tmp_path / "full", **common))
    full.train()
    resumed = bench_helpers.make_trainer(tokenizer, bench_helpers.make_bench_config(tmp_path / "resumed", **common))
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert resumed.args.entropy_target == full.args.entropy_target != math.inf  # anchored, not the placeholder
    coefs = [[r["entropy_coef"] for r in t.state.log_history if "entropy_coef" in r] for t in (full, resumed)]
    assert coefs[1] == coefs[0]  # steps 1-2 from the checkpoint's history, 3-4 trained again


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"method": "skywork", "aer_measurements": True, "aer_trl_target_ratio": 0.0}, "must be a finite number > 0"),
        ({"method": "grpo", "aer_trl_target_ratio": 0.4}, "aer_trl_target_ratio anchors"),
    ],
)
def test_bad_ratio_settings_are_refused_by_name(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        bench_helpers.make_bench_config(tmp_path, **overrides)
    with pytest.raises(TypeError, match="aer_trl_target_ratio"):
        AERGRPOConfig(**helpers.config_kwargs(tmp_path, **overrides))
