"""The lab's building blocks: the arithmetic generator, the char tokenizer, the tiny model and the warm start."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from aer_bench.lab.tasks import TIERS, format_completion, make_arithmetic_dataset, make_sft_dataset
from aer_bench.lab.warmstart import WarmStartConfig, build_warm_start
from aer_trl.app.rewards import math_accuracy_reward


def test_generator_is_deterministic_by_seed():
    a, b = make_arithmetic_dataset(50, seed=3), make_arithmetic_dataset(50, seed=3)
    assert a.to_dict() == b.to_dict()
    assert a.to_dict() != make_arithmetic_dataset(50, seed=4).to_dict()
    assert a.column_names == ["prompt", "answer", "difficulty"]


def test_generator_covers_every_tier_and_answers_are_right():
    ds = make_arithmetic_dataset(400, seed=0)
    assert set(ds["difficulty"]) == set(TIERS)
    for prompt, answer in zip(ds["prompt"], ds["answer"]):
        assert prompt.endswith("=")
        assert eval(prompt[:-1]) == int(answer)  # noqa: S307 - our own arithmetic strings


def test_answers_verify_with_the_math_reward():
    ds = make_arithmetic_dataset(40, seed=1)
    golds = list(ds["answer"])
    right = [format_completion(a) for a in golds]
    wrong = [format_completion(int(a) + 1) for a in golds]
    assert math_accuracy_reward(right, answer=golds) == [1.0] * 40
    assert math_accuracy_reward(wrong, answer=golds) == [0.0] * 40


def test_tier_selection_and_exclusion():
    train = make_arithmetic_dataset(30, seed=0, tiers=[0])
    assert set(train["difficulty"]) == {0}
    held_out = make_arithmetic_dataset(30, seed=1, tiers=[1, 3], exclude=set(train["prompt"]))
    assert set(held_out["difficulty"]) <= {1, 3} and not set(held_out["prompt"]) & set(train["prompt"])
    with pytest.raises(ValueError, match="unknown difficulty tiers"):
        make_arithmetic_dataset(3, tiers=[9])


def test_sft_noise_share():
    ds = make_sft_dataset(2000, seed=0, noise=0.3)
    golds = make_arithmetic_dataset(2000, seed=0)["answer"]
    wrong = sum(c != format_completion(g) for c, g in zip(ds["completion"], golds))
    assert 0.25 < wrong / 2000 < 0.35
    with pytest.raises(ValueError, match="noise"):
        make_sft_dataset(3, noise=1.0)


@pytest.mark.parametrize("text", ["12+7=\\boxed{19}", "Hello, World!\n(a*b)^2 ~ {x}", ""])
def test_char_tokenizer_round_trip(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tokenizer.decode(ids) == text


def test_tokenizer_and_model_save_and_load_like_hub_models(tmp_path, tokenizer, tiny_model):
    tiny_model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert tok.decode(tok("3*4=")["input_ids"]) == "3*4="
    ids = torch.tensor([tok("3*4=")["input_ids"]])
    torch.testing.assert_close(model(ids).logits, tiny_model(ids).logits)


def test_warm_start_is_built_once_and_cached(tmp_path):
    cfg = WarmStartConfig(hidden_size=32, num_layers=2, num_heads=2, num_examples=256, epochs=1.0, batch_size=64)
    path = build_warm_start(cfg, cache_dir=tmp_path, disable_tqdm=True)
    assert (path / "config.json").exists() and (path / "tokenizer.json").exists()
    assert json.loads((path / "lab_meta.json").read_text())["warm_start"]["num_examples"] == 256
    stamp = (path / "config.json").stat().st_mtime_ns
    assert build_warm_start(cfg, cache_dir=tmp_path) == path
    assert (path / "config.json").stat().st_mtime_ns == stamp  # reused, not retrained
    AutoModelForCausalLM.from_pretrained(path)


def test_the_warm_start_leaves_no_cpu_only_device_choice_behind(tmp_path):
    """The warm start trains with use_cpu=True; accelerate keeps a device choice process-wide, so a GPU run that
    followed in the same process got its accelerator on cpu and its model on cuda. It now resets what it set."""
    from accelerate.state import AcceleratorState, PartialState

    AcceleratorState._reset_state(reset_partial_state=True)
    cfg = WarmStartConfig(hidden_size=32, num_layers=2, num_heads=2, num_examples=64, epochs=1.0, batch_size=64)
    build_warm_start(cfg, cache_dir=tmp_path / "fresh", disable_tqdm=True, force=True)
    assert not PartialState._shared_state and not AcceleratorState._shared_state


def test_the_warm_start_restores_a_device_choice_made_before_it(tmp_path):
    """train_recipe parses the run's config (which picks the run's device) before the warm start: the warm start
    must train on cpu anyway and hand the run's choice back untouched (on an H200 the lab recipe trained with the
    accelerator on cpu and its batches on cuda). A 'meta' device stands for the GPU here: SFT would crash on it."""
    import torch
    from accelerate.state import AcceleratorState, PartialState

    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState()
    PartialState._shared_state["device"] = torch.device("meta")  # the run's choice, as a GPU run would have made it
    before = dict(PartialState._shared_state)
    try:
        cfg = WarmStartConfig(hidden_size=32, num_layers=2, num_heads=2, num_examples=64, epochs=1.0, batch_size=64)
        build_warm_start(cfg, cache_dir=tmp_path / "after_run_config", disable_tqdm=True, force=True)
        assert PartialState._shared_state == before and not AcceleratorState._shared_state
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
