"""The real-LLM lab (issue: a real LLM that learns): SmolLM2-135M-Instruct on the arithmetic tiers with few-shot
chat prompts. A few-shot conversational data set keeps its turns through loading, training and evaluation; the
chosen 2-shot format earns reward on the first step; one AER step on the real model moves α as the controller says."""

import json
import shutil
from pathlib import Path

import pytest

from aer_trl.core_algos import update_alpha

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "smollm2_135m_instruct" / "arithmetic" / "aer.yaml"
pytestmark = [pytest.mark.real, pytest.mark.slow]

SEEN_PROMPTS: list = []


def recording_reward(completions, prompts=None, answer=None, **kwargs):
    """Records the prompts the trainer hands to reward functions (what the policy was prompted with)."""
    SEEN_PROMPTS.extend(prompts)
    return [0.0] * len(completions)


def train(argv):
    from aer_bench import run as train_script  # aer_trl.app.run with the arithmetic source's classes

    return train_script.main(argv)


@pytest.fixture(scope="module")
def arithmetic_step(smollm2, tmp_path_factory):
    """One AER step of the arithmetic recipe (its 2-shot format) on the real model: 2 prompts x 8 completions."""
    out = tmp_path_factory.mktemp("arith") / "aer"
    trainer = train(
        [
            "--config",
            str(RECIPE),
            "--model_name_or_path",
            str(smollm2),
            "--output_dir",
            str(out),
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "16",
            "--lab_train_size",
            "64",
            "--save_strategy",
            "no",
            "--aer_alpha_init",
            "0.01",
            "--aer_eta",
            "0.01",
            "--aer_fixed_target",
            "100",  # far above any entropy: the controller must raise α by η
        ]
    )
    yield out, trainer
    shutil.rmtree(out.parent, ignore_errors=True)  # a real model's run: ~0.5-2 GB of weights and optimizer state


def test_the_chosen_format_earns_reward_on_the_first_step(arithmetic_step):
    out, trainer = arithmetic_step
    step = next(r for r in trainer.state.log_history if "reward" in r)
    assert step["reward"] > 0  # seed 0: the 2-shot format gives the policy a learning signal from step 1
    assert step["rewards/math_accuracy/unmarked"] < 0.5  # most completions end in a \boxed{} answer
    card = (out / "README.md").read_text()
    assert "2-shot chat" in card and "arithmetic" in card  # the format is written in the model card


def test_one_aer_step_on_the_real_model_moves_alpha_as_the_controller_says(arithmetic_step):
    _, trainer = arithmetic_step
    history = trainer.aer_callback.controller.history
    assert len(history) == 1
    entropy = history[0]["entropy"]
    assert 0 < entropy < 100
    expected = update_alpha(0.01, entropy, 100.0, 0.01, alpha_max=0.2)
    assert trainer.aer_callback.alpha == pytest.approx(expected) == pytest.approx(0.02)


def test_a_few_shot_conversation_keeps_its_turns_through_loading_training_and_evaluation(smollm2, tmp_path):
    from transformers import AutoTokenizer

    from aer_trl.app.evaluation import EvalArguments
    from aer_trl.app.evaluation.plan import load_problems

    conversation = [
        {"role": "system", "content": "You are a calculator."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "2+2 = 4. The answer is \\boxed{4}."},
    ]
    rows = [
        {"prompt": [*conversation, {"role": "user", "content": f"What is {i}+1?"}], "answer": str(i + 1)}
        for i in range(4)
    ]
    data = tmp_path / "fewshot.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    SEEN_PROMPTS.clear()
    train(
        [
            "--model_name_or_path",
            str(smollm2),
            "--dataset_name",
            str(data),
            "--prompt_instruction",
            "none",
            "--reward_funcs",
            f"{__name__}.recording_reward",
            "--output_dir",
            str(tmp_path / "run"),
            "--use_cpu",
            "true",
            "--bf16",
            "false",
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "4",
            "--num_generations",
            "2",
            "--max_completion_length",
            "4",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
        ]
    )
    assert SEEN_PROMPTS and all(p[:3] == conversation and p[3]["content"].endswith("+1?") for p in SEEN_PROMPTS)

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    args = EvalArguments(models=[str(smollm2)], benchmarks=[str(data)], num_samples=1, k_list=[1])
    problems = load_problems(str(data), args, tokenizer)
    text = problems[0].text
    order = [
        text.index(s) for s in ("You are a calculator.", "What is 2+2?", "The answer is \\boxed{4}.", "What is 0+1?")
    ]
    assert order == sorted(order) and "Please reason step by step" in text  # evaluation's default instruction
    bare = load_problems(str(data), EvalArguments(**{**args.__dict__, "prompt_instruction": "none"}), tokenizer)
    assert "Please reason" not in bare[0].text and bare[0].text.endswith("assistant\n")
