# Copyright 2026 The aer_trl authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
#
# A stand-in for TRL's tests/test_rloo_trainer.py, written for aer_trl's tests in TRL's style (TRL's own file is not
# shipped with this repository): it loads TRL's Hub ids and data set the way TRL's tests do, so the harness
# benchmarks/trl_suite.py --suite rloo is exercised end to end offline.
import torch
from datasets import load_dataset
from trl import RLOOConfig, RLOOTrainer

from .testing_utils import TrlTestCase


class TestRLOOTrainer(TrlTestCase):
    def test_training(self):
        dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")
        assert dataset[0]["prompt"] == "Beautiful is better than"
        training_args = RLOOConfig(
            output_dir=self.tmp_dir,
            learning_rate=0.1,
            per_device_train_batch_size=3,
            num_generations=3,
            max_completion_length=8,
            max_steps=1,
            report_to="none",
        )  # beta 0.05, RLOO's default: the reference model is loaded by the policy's Hub id
        trainer = RLOOTrainer(
            model="trl-internal-testing/tiny-Qwen2ForCausalLM-2.5",
            reward_funcs="trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5",
            args=training_args,
            train_dataset=dataset,
        )
        previous = {n: p.clone() for n, p in trainer.model.named_parameters()}
        trainer.train()
        assert trainer.state.log_history[-1]["train_loss"] is not None
        assert "kl" in trainer.state.log_history[0]
        assert any(not torch.equal(p, trainer.model.get_parameter(n)) for n, p in previous.items())

    def test_the_trainer_is_trls_own(self):
        assert RLOOTrainer.__module__.startswith("trl.")
