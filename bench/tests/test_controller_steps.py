"""aer_bench.controller_steps: the proportional and PI steps of C3 and the gate (ours), against hand-computed values
and through training with the bench's config and trainer; the library's config and trainer refuse them by name."""

import bench_helpers
import pytest

from aer_bench.controller_steps import SteppedController, pi_step, proportional_step
from aer_trl import AERGRPOConfig, AERGRPOTrainer
from tests import helpers
from tests.helpers import alphas


def train_bench(tmp_path, tokenizer, **overrides):
    trainer = bench_helpers.make_trainer(tokenizer, bench_helpers.make_bench_config(tmp_path, **overrides))
    trainer.train()
    return trainer


def test_proportional_step_hand_computed():
    # α + η·(H* − H)/H*: below the target at most η up, less near it; above it down in proportion to the overshoot
    assert proportional_step(0.1, entropy=0.1, target=0.4, eta=0.05) == pytest.approx(0.1375)
    assert proportional_step(0.1, entropy=0.0, target=0.4, eta=0.05) == pytest.approx(0.15)
    assert proportional_step(0.1, entropy=0.4, target=0.4, eta=0.05) == pytest.approx(0.1)
    assert proportional_step(0.3, entropy=1.2, target=0.4, eta=0.05) == pytest.approx(0.2)
    assert proportional_step(0.1, entropy=1.6, target=0.4, eta=0.05) == 0.0  # clamped at 0
    assert proportional_step(0.19, entropy=0.0, target=0.4, eta=0.05, alpha_max=0.2) == 0.2
    with pytest.raises(ValueError, match="H\\* > 0"):
        proportional_step(0.1, entropy=0.1, target=0.0, eta=0.05)


def test_controller_with_a_proportional_step():
    ctrl = SteppedController(tau=0.5, eta=0.1, step="proportional")
    ctrl.observe(2.0)  # H0 = 2, H* = 1; α = max(0, 0 + 0.1·(1 − 2)/1) = 0
    assert ctrl.observe(0.5) == pytest.approx(0.05)
    assert ctrl.observe(3.0) == pytest.approx(0.0)  # overshoot 3·H* takes 2η off: clamped at 0
    with pytest.raises(ValueError, match="step must be one of"):
        SteppedController(step="pid")


def test_pi_step_hand_computed():
    # H* = 1: e = 0.5, I = 0 + 0.5, α = 0.1·0.5 + 0.02·0.5 = 0.06
    assert pi_step(0.0, 0.5, 1.0, kp=0.1, ki=0.02) == pytest.approx((0.06, 0.5))
    # then the entropy overshoots to 1.5: e = −0.5, I = 0.0, α = −0.05 → clipped to 0; the error pushes further below
    # 0, so the integral is frozen at 0.5
    assert pi_step(0.5, 1.5, 1.0, kp=0.1, ki=0.02) == pytest.approx((0.0, 0.5))
    # the integral alone holds α at the level that removed the error: e = 0 → α = ki·I
    assert pi_step(10.0, 1.0, 1.0, kp=0.1, ki=0.02) == pytest.approx((0.2, 10.0))
    with pytest.raises(ValueError, match="H\\* > 0"):
        pi_step(0.0, 0.5, 0.0, kp=0.1, ki=0.02)


def test_pi_step_does_not_wind_up_past_alpha_max():
    """Below the target for 100 iterations with α clamped at 0.3: the integral stops growing once α saturates, so one
    iteration above the target brings α off the clamp at once (a wound-up integral would hold it there for ~100)."""
    alpha, integral = 0.0, 0.0
    for _ in range(100):
        alpha, integral = pi_step(integral, 0.5, 1.0, kp=0.1, ki=0.02, alpha_max=0.3)
    assert alpha == pytest.approx(0.3) and integral < 0.3 / 0.02 + 1  # not 100 × 0.5 = 50
    alpha, integral = pi_step(integral, 1.2, 1.0, kp=0.1, ki=0.02, alpha_max=0.3)  # e = −0.2
    assert alpha < 0.3


def test_pi_has_no_steady_offset_where_a_proportional_step_does():
    """A plant whose entropy is H = 0.5 + α (H* = 1 is held at α = 0.5): the PI loop settles on H*; a purely
    proportional law (ki = 0) settles where kp·e = α, below H*."""

    def settle(kp, ki):
        alpha, integral, h = 0.0, 0.0, 0.5
        for _ in range(500):
            alpha, integral = pi_step(integral, h, 1.0, kp=kp, ki=ki)
            h = 0.5 + alpha
        return h

    assert settle(0.1, 0.02) == pytest.approx(1.0, abs=1e-3)
    assert settle(0.1, 0.0) < 0.6


def test_controller_pi_step_and_gate():
    c = SteppedController(tau=0.5, step="pi", kp=0.1, ki=0.02, gate=True)
    c.observe(2.0)  # H0 = 2, H* = 1; e = −1: α clipped at 0, integral frozen; H ≥ H*: gate shut
    assert (c.alpha, c.integral, c.gated, c.applied_alpha) == (0.0, 0.0, True, 0.0)
    c.observe(0.5)  # e = 0.5: α = 0.06, gate open
    assert c.alpha == pytest.approx(0.06) and not c.gated and c.applied_alpha == pytest.approx(0.06)
    c.observe(0.75)  # e = 0.25, I = 0.75: α = 0.025 + 0.015
    assert c.alpha == pytest.approx(0.04) and c.applied_alpha == pytest.approx(0.04)
    c.observe(1.0)  # at the target: α = ki·I = 0.015, but the gate shuts (H ≥ H*)
    assert c.alpha == pytest.approx(0.015) and c.gated and c.applied_alpha == 0.0
    assert [h["applied_alpha"] for h in c.history] == pytest.approx([0.0, 0.06, 0.04, 0.0])
    restored = SteppedController(tau=0.5, step="pi", kp=0.1, ki=0.02, gate=True)
    restored.load_state_dict(c.state_dict())
    assert (restored.integral, restored.gated, restored.applied_alpha) == (c.integral, True, 0.0)
    restored.observe(0.5)
    c.observe(0.5)
    assert restored.state_dict() == c.state_dict()


def test_method_aer_prop_moves_alpha_by_the_proportional_step_in_training(tmp_path, tokenizer):
    """Ours (method aer_prop): α_{t+1} = [α_t + η·(H* − H_t)/H*]_+ from the entropies the trainer measured."""
    trainer = train_bench(tmp_path, tokenizer, method="aer_prop", aer_fixed_target=5.0, aer_eta=0.01, max_steps=4)
    assert trainer.args.aer_step == "proportional"
    measured = [h["entropy"] for h in trainer.aer_callback.controller.history]
    expected, alpha = [], 0.0
    for h in measured:
        alpha = max(0.0, alpha + 0.01 * (5.0 - h) / 5.0)
        expected.append(alpha)
    assert alphas(trainer) == pytest.approx(expected, rel=1e-9)
    assert len(set(alphas(trainer))) == 4 and alphas(trainer) != pytest.approx([0.01, 0.02, 0.03, 0.04])


def test_method_aer_pi_steers_alpha_by_the_pi_law_and_the_gate_zeroes_the_applied_alpha(tmp_path, tokenizer):
    """Ours (method aer_pi): α_t = clip(kp·e_t + ki·Σe, 0, α_max) from the entropies the trainer measured, and the
    α the loss applies (logged aer/alpha) is 0 after a batch at or above H*."""
    trainer = train_bench(tmp_path, tokenizer, method="aer_pi", aer_fixed_target=5.0, max_steps=4)
    assert trainer.args.aer_step == "pi" and trainer.args.aer_gate
    measured = [h["entropy"] for h in trainer.aer_callback.controller.history]
    expected, integral = [], 0.0
    for h in measured:
        alpha, integral = pi_step(integral, h, 5.0, kp=0.1, ki=0.02)
        expected.append(alpha)
    assert alphas(trainer) == pytest.approx(expected, rel=1e-9) and all(a > 0 for a in expected)
    logged = [r["aer/alpha"] for r in trainer.state.log_history if "aer/alpha" in r and "train_runtime" not in r]
    assert logged == pytest.approx(expected)  # logged after step t's update: the α step t + 1 trains with

    shut = train_bench(tmp_path / "gate", tokenizer, method="aer_pi", aer_fixed_target=1e-3, max_steps=3)
    assert [h["applied_alpha"] for h in shut.aer_callback.controller.history] == [0.0, 0.0, 0.0]
    assert shut.aer_callback.alpha == 0.0


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"aer_step": "pid"}, "aer_step must be one of"),
        ({"aer_pi_kp": -0.1}, "aer_pi_kp must be a finite number >= 0"),
        ({"aer_pi_ki": float("nan")}, "aer_pi_ki must be a finite number >= 0"),
        ({"method": "aer_prop", "aer_step": "pi"}, "method='aer_prop' sets aer_step='proportional'"),
    ],
)
def test_bad_step_settings_are_refused_by_name(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        bench_helpers.make_bench_config(tmp_path, **overrides)


def test_the_library_refuses_the_benchs_steps_by_name(tmp_path, tokenizer):
    with pytest.raises(ValueError, match=r"method='aer_pi' sets \['aer_gate', 'aer_step'\], which AERGRPOConfig"):
        AERGRPOConfig(**helpers.config_kwargs(tmp_path, method="aer_pi"))
    args = bench_helpers.make_bench_config(tmp_path, method="aer_prop")
    with pytest.raises(TypeError, match="SteppedControllerMixin"):
        AERGRPOTrainer(model=helpers.make_model(tokenizer), reward_funcs=[helpers.even_length_reward], args=args)


@pytest.mark.parametrize("restore", [False, True], ids=["restore-off", "transformers-restores-callbacks"])
def test_the_stepped_controller_resumes_exactly(tmp_path, tokenizer, restore):
    """The PI integral and the gate are checkpointed: a run of aer_pi resumed at step 2 continues as the one never
    stopped, also where transformers rebuilds the callbacks from the checkpoint (a plain controller) and the run's
    own stepped one must be kept."""
    common = dict(method="aer_pi", aer_fixed_target=5.0, max_steps=4, save_strategy="steps", save_steps=2)
    full = train_bench(tmp_path / "full", tokenizer, **common)
    resumed = bench_helpers.make_trainer(
        tokenizer,
        bench_helpers.make_bench_config(
            tmp_path / "resumed", restore_callback_states_from_checkpoint=restore, **common
        ),
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert alphas(resumed) == alphas(full)
    assert resumed.aer_callback.controller.state_dict() == full.aer_callback.controller.state_dict()
    assert type(resumed.aer_callback.controller) is SteppedController
