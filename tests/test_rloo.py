"""AERRLOOTrainer on CPU in one process: AER on RLOO's own loss. With λ = 0 it trains bit for bit as
`trl.RLOOTrainer`; the bonus is RLOO's loss minus mean(λ·H) on RLOO's scale; α moves once per rollout batch and
resumes exactly; wrong configs are refused by name. Two processes, ZeRO-3: test_distributed.py; vLLM: test_vllm.py."""

import json

import pytest
import torch
from trl import GRPOConfig, RLOOConfig, RLOOTrainer

from aer_trl import AERGRPOConfig, AERGRPOTrainer, AERRLOOConfig, AERRLOOTrainer
from tests import helpers
from tests.helpers import alphas, assert_same_params, fixed_batch, grads, manual_sequence_entropy, params


def rloo_config(output_dir, **overrides) -> AERRLOOConfig:
    """RLOO's KL penalty off (its default β = 0.05 loads a reference model by the policy's Hub id, which the tiny
    in-memory model has not); the equivalence test trains with it from a saved folder."""
    return helpers.make_config(output_dir, AERRLOOConfig, **{"beta": 0.0, **overrides})


def train_rloo(output_dir, tokenizer, reward_funcs=None, **overrides) -> AERRLOOTrainer:
    trainer = helpers.make_trainer(tokenizer, rloo_config(output_dir, **overrides), reward_funcs=reward_funcs)
    trainer.train()
    return trainer


def rloo_batch(tokenizer, lam, trainer):
    """`fixed_batch` as RLOO's loss reads it: sequence log-probs under the current policy as `old_logps`."""
    batch = fixed_batch(tokenizer, lam)
    batch.pop("num_items_in_batch")
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = RLOOTrainer._get_per_token_logps_and_entropies(
            trainer, trainer.model, ids, att, batch["completion_ids"].size(1)
        )
    batch["old_logps"] = (logps * batch["completion_mask"]).sum(1) - 0.05  # a ratio off 1, inside the clip range
    return batch


# ----------------------------------------------------------------------------------------- equivalence with RLOO
def test_lambda_zero_trains_exactly_like_trl_rloo(tmp_path, tokenizer):
    """AER with α held at 0 (η = 0): λ is identically zero, and parameters and every value TRL logs are RLOO's (with
    RLOO's KL penalty in the reward, β = 0.05, against a reference model loaded from the policy's folder)."""
    rewards = [helpers.even_length_reward, helpers.digit_count_reward]
    folder = helpers.save_model(tokenizer, tmp_path / "model")
    trainers = {}
    for name, trainer_class, config_class, extra in (
        ("aer", AERRLOOTrainer, AERRLOOConfig, {"aer_eta": 0.0}),
        ("rloo", RLOOTrainer, RLOOConfig, {}),
    ):
        args = config_class(**helpers.config_kwargs(tmp_path / name, max_steps=4, beta=0.05, **extra))
        trainers[name] = trainer_class(
            model=folder, reward_funcs=rewards, args=args, train_dataset=helpers.make_dataset(),
            processing_class=tokenizer,
        )  # fmt: skip
        before = params(trainers[name].model)
        trainers[name].train()
    aer, plain = trainers["aer"], trainers["rloo"]
    assert any(not torch.equal(before[n], p) for n, p in params(plain.model).items()), "RLOO did not train"
    assert_same_params(params(aer.model), params(plain.model))
    assert all(h["aer/lambda_mean"] == 0.0 for h in aer.state.log_history if "aer/lambda_mean" in h)
    compared = 0
    for ours, theirs in zip(aer.state.log_history, plain.state.log_history, strict=True):
        for key, value in theirs.items():
            if key in ("train_runtime", "train_samples_per_second", "train_steps_per_second", "step_time"):
                continue  # wall-clock
            assert ours[key] == value, key
            compared += 1
    assert compared > 20 and any("kl" in h for h in plain.state.log_history)


def test_loss_is_rloo_minus_mean_lambda_entropy_on_rloo_scale(tmp_path, tokenizer):
    """RLOO's loss is unscaled (transformers divides it by the accumulation steps), so is the bonus: with 2
    accumulation steps the loss is still RLOO's − mean(λ·H), and its gradient is RLOO's plus that of −mean(λ·H)."""
    trainer = helpers.make_trainer(tokenizer, rloo_config(tmp_path, gradient_accumulation_steps=2))
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 2
    lam = [0.6, 0.0, 0.3, 0.0]
    batch = rloo_batch(tokenizer, lam, trainer)
    plain = {k: v for k, v in batch.items() if k != "aer_lambda"}
    g_aer = grads(model, loss_aer := trainer.compute_loss(model, batch))
    g_rloo = grads(model, loss_rloo := RLOOTrainer.compute_loss(trainer, model, plain))
    bonus = (torch.tensor(lam) * manual_sequence_entropy(model, batch, 1.0)).mean()
    torch.testing.assert_close(loss_aer, loss_rloo - bonus, rtol=1e-5, atol=1e-6)
    g_bonus = grads(model, -bonus)
    assert any(g.abs().sum() > 0 for g in g_bonus.values())
    for name in g_rloo:
        torch.testing.assert_close(g_aer[name], g_rloo[name] + g_bonus[name], rtol=1e-4, atol=1e-6)
    easy = dict(batch, aer_lambda=torch.zeros(4))  # λ = 0: RLOO's gradient, bit for bit
    g_easy = grads(model, trainer.compute_loss(model, easy))
    assert all(torch.equal(g_easy[n], g_rloo[n]) for n in g_rloo)


@pytest.mark.parametrize("method", ["aer", "aer_c1", "aer_c2c3"])
def test_the_bonus_moves_rloo_and_alpha_follows_the_controller(tmp_path, tokenizer, method):
    """Every prompt hard (a reward that is never correct): the bonus changes the parameters RLOO trains to; α moves
    once per rollout batch as the controller says (or stays, for C1 only)."""
    rewards = [helpers.digit_count_reward, helpers.always_wrong]
    common = dict(aer_correctness_reward="always_wrong", max_steps=4, aer_tau=2.0, aer_eta=0.05)
    extra = {"aer_alpha_init": 0.5} if method == "aer_c1" else {}
    aer = train_rloo(tmp_path / method, tokenizer, rewards, method=method, **common, **extra)
    off = train_rloo(tmp_path / "off", tokenizer, rewards, **{**common, "aer_eta": 0.0})
    assert any(not torch.equal(p, params(off.model)[n]) for n, p in params(aer.model).items())
    history = aer.aer_callback.controller.history
    assert len(history) == 4  # one update per rollout batch
    if method == "aer_c1":
        assert set(alphas(aer)) == {0.5}
    else:  # τ = 2: the entropy is below H* = 2·H0, so α rises by η each batch after H0 is known
        assert alphas(aer) == pytest.approx([0.05, 0.1, 0.15, 0.2])
    logs = [h for h in aer.state.log_history if "aer/hard_fraction" in h]
    assert logs and all(h["aer/hard_fraction"] == 1.0 for h in logs)
    assert all("aer/entropy" in h and "aer/alpha" in h for h in logs)


def test_resume_continues_exactly(tmp_path, tokenizer):
    """Killed after a checkpoint and resumed: α, H0, H*, the iteration and the parameters at the end are the
    uninterrupted run's."""
    common = dict(
        aer_tau=1.0, aer_eta=0.01, aer_alpha_init=0.02, max_steps=6, save_strategy="steps", save_steps=3,
        learning_rate=5e-2,
    )  # fmt: skip
    full = train_rloo(tmp_path / "full", tokenizer, **common)
    ckpt = tmp_path / "full" / "checkpoint-3"
    saved = json.loads((ckpt / "trainer_state.json").read_text())["stateful_callbacks"]["AERCallback"]
    assert saved["attributes"]["controller_state"]["iteration"] == 3
    resumed = helpers.make_trainer(tokenizer, rloo_config(tmp_path / "resumed", **common))
    resumed.train(resume_from_checkpoint=str(ckpt))
    a, b = full.aer_callback.controller, resumed.aer_callback.controller
    assert len(set(alphas(full))) > 1, "the trajectory should move for this test to mean something"
    assert alphas(resumed) == alphas(full)
    assert (b.initial_entropy, b.target, b.iteration) == (a.initial_entropy, a.target, a.iteration)
    assert_same_params(params(resumed.model), params(full.model))


def test_lora_trains_the_adapter_with_the_bonus(tmp_path, tokenizer):
    from peft import LoraConfig

    args = rloo_config(tmp_path, aer_alpha_init=0.5, aer_correctness_reward=0, max_steps=2)
    trainer = helpers.make_trainer(
        tokenizer, args, reward_funcs=[helpers.always_wrong], peft_config=LoraConfig(r=4, target_modules=["q_proj"])
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert before and all("lora" in n for n in before)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert trainer.aer_callback.controller.iteration == 2


def test_the_card_names_the_rloo_trainer_and_method(tmp_path, tokenizer):
    trainer = train_rloo(tmp_path, tokenizer, max_steps=1)
    trainer.create_model_card(model_name="tiny-aer-rloo")
    card = (tmp_path / "README.md").read_text()
    assert "Training method: AER-RLOO" in card and "aer_trl.AERRLOOTrainer" in card
    assert "RLOO" in card and "AER-GRPO" not in card


# ----------------------------------------------------------------------------------------- refusals
def test_configs_of_the_other_trainer_are_refused_by_name(tmp_path, tokenizer):
    with pytest.raises(TypeError, match="AERGRPOTrainer needs `args` to be an aer_trl.AERGRPOConfig or a "
                       r"trl.GRPOConfig, got AERRLOOConfig \(AERRLOOConfig configures AERRLOOTrainer"):  # fmt: skip
        AERGRPOTrainer(helpers.make_model(tokenizer), [helpers.always_wrong], rloo_config(tmp_path))
    with pytest.raises(
        TypeError, match="AERRLOOTrainer needs `args` to be an aer_trl.AERRLOOConfig or a trl.RLOOConfig"
    ):
        AERRLOOTrainer(helpers.make_model(tokenizer), [helpers.always_wrong], helpers.make_config(tmp_path))
    with pytest.raises(TypeError, match="got GRPOConfig"):
        AERRLOOTrainer(
            helpers.make_model(tokenizer), [helpers.always_wrong], GRPOConfig(**helpers.config_kwargs(tmp_path))
        )


@pytest.mark.parametrize("method", ["grpo", "ent_adv", "clip_cov", "kl_cov", "entropy_coef", "skywork"])
def test_methods_that_need_grpo_are_refused_with_the_accepted_ones(tmp_path, method):
    with pytest.raises(ValueError, match=rf"method='{method}' does not train with AERRLOOConfig.*Accepted methods "
                       r"for AERRLOOConfig: \['rloo', 'clip_higher', 'aer'"):  # fmt: skip
        rloo_config(tmp_path, method=method)
    with pytest.raises(ValueError, match="method='rloo' does not train with AERGRPOConfig"):
        AERGRPOConfig(**helpers.config_kwargs(tmp_path, method="rloo"))


def test_a_plain_rloo_config_is_converted_and_method_rloo_is_trl_rloo(tmp_path, tokenizer, caplog):
    plain = RLOOConfig(**helpers.config_kwargs(tmp_path, max_steps=1, beta=0.0))
    trainer = AERRLOOTrainer(
        helpers.make_model(tokenizer), [helpers.even_length_reward], plain, train_dataset=helpers.make_dataset(),
        processing_class=tokenizer,
    )  # fmt: skip
    assert isinstance(trainer.args, AERRLOOConfig) and trainer.args.method == "aer"
    assert "AERRLOOTrainer got a trl.RLOOConfig" in caplog.text
    baseline = rloo_config(tmp_path, method="rloo")
    assert baseline.aer_measurements is False
    trainer = helpers.make_trainer(tokenizer, baseline)
    assert trainer._tag_names == RLOOTrainer._tag_names
    with pytest.raises(RuntimeError, match="aer_measurements is off"):
        trainer.aer_callback  # noqa: B018
