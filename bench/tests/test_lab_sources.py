"""aer_bench.lab.sources: the `lab` and `arithmetic` sources, registered with the library's registry by name."""

import pytest

from aer_bench.lab.sources import first_per_tier
from aer_bench.lab.tasks import arithmetic_splits
from aer_bench.training import BenchEvalArguments
from aer_bench.training import BenchScriptArguments as AERScriptArguments
from aer_trl.app.data import get_source, resolve_format


def test_arithmetic_splits_are_disjoint_on_every_tier_and_fixed():
    splits = arithmetic_splits(train_size=2000, test_per_tier=32, seed=3)
    train, test = set(splits["train"]["question"]), set(splits["test"]["question"])
    shots = {q for q, _ in splits["shots"]}
    assert not train & test and not train & shots and not test & shots
    assert sorted(set(splits["test"]["difficulty"])) == [0, 1, 2, 3] and len(test) == 128
    # the held-out split does not depend on the training seed; the training problems do
    other = arithmetic_splits(train_size=2000, test_per_tier=32, seed=4)
    assert other["test"]["question"] == splits["test"]["question"]
    assert other["train"]["question"] != splits["train"]["question"]
    with pytest.raises(ValueError, match="tier 0 has fewer than"):
        arithmetic_splits(train_size=10, test_per_tier=100, tiers=[0])


def test_more_held_out_problems_of_a_tier_keep_the_first_ones_and_the_few_shot_examples():
    """`test_extra` widens one tier's held-out set (the hard-problem study: 64 problems of 2-digit x 1-digit): its
    first 32 problems and the shot pool stay those drawn without it, and training draws from none of them."""
    plain = arithmetic_splits(train_size=2000, test_per_tier=32, seed=3)
    wider = arithmetic_splits(train_size=2000, test_per_tier=32, seed=3, test_extra=[0, 0, 0, 32])
    assert wider["shots"] == plain["shots"]
    tiers = wider["test"]["difficulty"]
    assert [tiers.count(t) for t in range(4)] == [32, 32, 32, 64]

    def tier(split, t):
        return [q for q, d in zip(split["test"]["question"], split["test"]["difficulty"]) if d == t]

    assert tier(wider, 3)[:32] == tier(plain, 3) and len(set(tier(wider, 3))) == 64
    assert all(tier(wider, t) == tier(plain, t) for t in range(3))
    train, shots = set(wider["train"]["question"]), {q for q, _ in wider["shots"]}
    assert not train & set(wider["test"]["question"]) and not shots & set(wider["test"]["question"])
    assert train & set(tier(wider, 3)[32:]) == set()
    with pytest.raises(ValueError, match="arithmetic_test_extra: one number >= 0 per tier"):
        arithmetic_splits(train_size=10, test_extra=[0, 32])


def test_the_evaluation_takes_the_first_problems_of_each_tier_with_the_trainings_shots():
    args = BenchEvalArguments(
        models=["m"], arithmetic_test_extra=[0, 0, 0, 32], arithmetic_eval_per_tier=[16, 16, 16, 64]
    )
    source = get_source("arithmetic")
    fmt = resolve_format(source, args)
    training = AERScriptArguments(dataset_name="arithmetic", arithmetic_test_extra=[0, 0, 0, 32])
    assert fmt.shots == resolve_format(source, training).shots
    table = first_per_tier(arithmetic_splits(train_size=8, test_extra=[0, 0, 0, 32])["test"], [16, 16, 16, 64])
    assert [table["difficulty"].count(t) for t in range(4)] == [16, 16, 16, 64]
    full = arithmetic_splits(train_size=8, test_extra=[0, 0, 0, 32])["test"]
    assert table["question"][:16] == full["question"][:16]
    assert len(source.load("test", args, fmt)) == 112
    with pytest.raises(ValueError, match="tier 3 has 64 held-out problems, 65 asked"):
        first_per_tier(full, [1, 1, 1, 65])
    with pytest.raises(ValueError, match="one number per tier"):
        first_per_tier(full, [16])


def test_arithmetic_source_defaults_to_the_chosen_2_shot_format():
    source = get_source("arithmetic")
    args = AERScriptArguments(dataset_name="arithmetic", lab_train_size=64)
    fmt = resolve_format(source, args)
    assert len(fmt.shots) == 2 and fmt.instruction is None and "\\boxed{}" in fmt.system
    data = source.load("train", args, fmt)
    roles = [m["role"] for m in data[0]["prompt"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert set(data.column_names) >= {"prompt", "answer", "difficulty"}
    # every training seed sees the same shots; another shots seed, other shots
    again = resolve_format(source, AERScriptArguments(dataset_name="arithmetic", lab_data_seed=5))
    assert again.shots == fmt.shots
    assert resolve_format(source, AERScriptArguments(prompt_shots_seed=1)).shots != fmt.shots


def test_lab_source_refuses_a_prompt_format():
    with pytest.raises(ValueError, match="raw text prompts"):
        resolve_format(get_source("lab"), AERScriptArguments(prompt_num_shots=2))


def test_the_lab_sources_bring_their_own_model():
    """`lab` and `arithmetic` name a default model (the warm-started toy, SmolLM2 from its wheel): a run needs none."""
    from trl import ModelConfig

    from aer_trl.app.data import get_source
    from aer_trl.app.training import check_model_given

    for name in ("lab", "arithmetic"):
        check_model_given(get_source(name), ModelConfig())
