"""studies.tradeoff: every recorded cell by its distance to H* and its answers lost, from the studies' records."""

import json
from pathlib import Path

import pytest
import study_helpers

from aer_bench.studies import real_study, tradeoff


def _study_with_records(folder: Path, cells: dict[tuple[str, int], tuple[float, int]]):
    """A study (arms grpo and fixed, seeds 0-1) whose cells have (second-half entropy, unmarked completions)."""
    study = real_study.load_study(study_helpers.write_study(folder))
    for (arm, seed), (entropy, unmarked) in cells.items():
        study_helpers.fake_study_record(study, study.arm(arm), seed, 0.6, entropy, unmarked=unmarked)
    real_study.tables(study)
    return study


def test_each_cell_is_placed_against_its_studys_reference_on_the_same_seed(tmp_path):
    # H* = 0.2: `fixed` seed 0 sits on it (distance 0) and loses 30 of 1024 answers where GRPO lost 10 (+1.95
    # points: out of the format bar); seed 1 is 25% above H* with GRPO's answers (in the format bar, off target)
    study = _study_with_records(
        tmp_path / "s",
        {("grpo", 0): (0.07, 10), ("fixed", 0): (0.2, 30), ("grpo", 1): (0.07, 0), ("fixed", 1): (0.25, 0)},
    )
    found, also, reference = tradeoff.points([study])
    by_seed = {p.seed: p for p in found}
    assert [p.arm for p in found] == ["s/fixed", "s/fixed"] and not also
    assert by_seed[0].distance == pytest.approx(0.0) and by_seed[0].no_answer_excess == pytest.approx(2000 / 1024)
    assert by_seed[0].on_target and not by_seed[0].format_kept
    assert by_seed[1].distance == pytest.approx(0.25) and by_seed[1].on_target and by_seed[1].format_kept
    assert reference == pytest.approx([0.65, 0.65])
    text = tradeoff.table(found, also, reference)
    assert "| s/fixed | 2 | 2 | 1 | 1 |" in text
    assert "| s/fixed | 2 | 2 | 1 | 1 | 2 | 1 |" in text  # a constant entropy: its floor is 0, the bar decides
    assert "2 hold H* by the bar (distance ≤ 0.25), 1 of them with the answer format kept" in text
    assert "s/fixed seed 1" in text


def test_a_cell_within_its_own_spread_of_h_star_counts_as_near_it_as_measurable():
    # floor: the median |H − med H|/med H of the run itself; a distance under it is as near H* as the batches allow
    assert tradeoff.Point("a", 0, distance=0.4, floor=0.45, no_answer_excess=0.0, pass1_diff=0.0).within_floor
    assert not tradeoff.Point("a", 0, distance=0.4, floor=0.3, no_answer_excess=0.0, pass1_diff=0.0).within_floor
    assert tradeoff.Point("a", 0, distance=0.2, floor=0.1, no_answer_excess=0.0, pass1_diff=0.0).within_floor


def test_noise_not_drift_is_the_yardstick_for_within_its_own_noise():
    """A drifting run has a wide spread around its own median (the floor) but little batch-to-batch noise: it is not
    'at H* within its noise' for drifting."""
    drifting = tradeoff.Point("a", 0, distance=0.4, floor=0.45, no_answer_excess=0.0, pass1_diff=0.0, noise=0.1)
    assert drifting.within_floor and not drifting.within_noise
    noisy = tradeoff.Point("a", 0, distance=0.4, floor=0.45, no_answer_excess=0.0, pass1_diff=0.0, noise=0.42)
    assert noisy.within_noise
    assert tradeoff.noise({"curves": {"entropy": [[t, 1 + 0.01 * t] for t in range(1, 61)]}}) < 1e-9  # a ramp


def test_an_arm_two_studies_train_alike_is_one_arm_and_each_seed_counts_once(tmp_path):
    cells = {("grpo", 0): (0.07, 0), ("fixed", 0): (0.3, 0)}
    first = _study_with_records(tmp_path / "a", cells)
    second = _study_with_records(tmp_path / "b", cells)
    found, also, reference = tradeoff.points([first, second])
    assert [(p.arm, p.seed) for p in found] == [("a/fixed", 0)]
    assert also == {"a/grpo": ["b/grpo"], "a/fixed": ["b/fixed"]} and len(reference) == 1
    assert "| a/fixed = b/fixed | 1 |" in tradeoff.table(found, also, reference)


def _confirmation(folder: Path, cells: dict[tuple[str, int], tuple[float, int]]):
    study = real_study.load_study(study_helpers.write_study(folder, seeds=[0, 1, 2, 3, 4]))
    for (arm, seed), (entropy, unmarked) in cells.items():
        study_helpers.fake_study_record(study, study.arm(arm), seed, 0.6, entropy, unmarked=unmarked)
    real_study.tables(study)
    return study


def test_a_confirmation_is_read_by_its_rule_and_only_when_every_pair_is_in(tmp_path):
    # H* = 0.2; 5 seeds: the bar is on target on at least 4 (0.8 of 5) and at most 1 point of answers lost on average
    cells = {("grpo", s): (0.07, 0) for s in range(5)}
    cells |= {("fixed", s): (0.2, 0) for s in range(4)}
    none = real_study.load_study(study_helpers.write_study(tmp_path / "none", seeds=[0, 1, 2, 3, 4]))
    assert "0 of 5 seed pairs recorded" in tradeoff.verdict(none)  # no record yet, no study.json
    partial = _confirmation(tmp_path / "partial", cells)
    assert tradeoff.verdict(partial).endswith("4 of 5 seed pairs recorded; it is read when all are.\n")

    met = _confirmation(tmp_path / "met", {**cells, ("fixed", 4): (0.3, 0)})  # seed 4: distance 0.5
    text = tradeoff.verdict(met)
    assert "on 4 of 5 seeds (the bar: at least 4;" in text and "+0.00 points" in text and "**The bar is met.**" in text
    assert "noise), which is not the bar: 4)" in text  # a constant entropy has no noise: the 0.25 bar decides
    # seed by seed: seed 4 sits above H* (0.3 against 0.2) on every batch of the second half; GRPO (0.07) is 0.65 off
    assert "| 4 | 0.50 | 0.65 | 0% | 0.00 | +0.0 | +0.0 | +0.0 |" in text
    assert "no answer above grpo's on 0, below on 0 (p = 1)" in text  # every pair tied: no evidence either way

    # seed 3 loses 60 of 1024 answers: 5.86 points, 1.17 on average over the 5 seeds
    costly = _confirmation(tmp_path / "costly", {**cells, ("fixed", 3): (0.2, 60), ("fixed", 4): (0.3, 0)})
    text = tradeoff.verdict(costly)
    assert "+1.17 points" in text and "above it on 1 of 5 seeds" in text
    assert "**The bar is not met** (the answer format)" in text
    assert "| 3 | 0.00 | 0.65 | 0% | 0.00 | +5.9 |" in text
    assert "no answer above grpo's on 1, below on 0 (p = 1)" in text

    below = _confirmation(tmp_path / "below", {**cells, ("fixed", 4): (0.1, 0)})  # under H* on every batch
    assert "| 4 | 0.50 | 0.65 | 100% |" in tradeoff.verdict(below)

    missed = _confirmation(tmp_path / "missed", {**cells, ("fixed", 3): (0.3, 0), ("fixed", 4): (0.3, 0)})
    assert "on 3 of 5 seeds" in tradeoff.verdict(missed) and "not met** (the target)" in tradeoff.verdict(missed)


def test_a_confirmation_with_more_than_one_arm_beside_the_reference_is_refused(tmp_path):
    arms = {"grpo": {"recipe": "grpo"}, "a": {"recipe": "aer"}, "b": {"recipe": "aer"}}
    study = real_study.load_study(study_helpers.write_study(tmp_path, arms=arms))
    with pytest.raises(ValueError, match="one arm beside 'grpo'"):
        tradeoff.verdict(study)


def test_the_tradeoff_table_in_the_docs_regenerates_from_the_committed_records():
    root = Path(__file__).resolve().parents[2]
    studies = [str(p) for p in sorted((root / "results" / "real_llm").glob("*/study.yaml"))]
    table = tradeoff.main(studies)
    block = (root / "docs" / "real_llm.md").read_text().split("<!-- study:tradeoff -->\n", 1)[1]
    assert block.split("<!-- /study:tradeoff -->", 1)[0] == table, "run make real-results"
    read = tradeoff.verdict(real_study.load_study(root / "results" / "real_llm" / "confirm" / "study.yaml"))
    block = (root / "docs" / "real_llm.md").read_text().split("<!-- study:verdict -->\n", 1)[1]
    assert block.split("<!-- /study:verdict -->", 1)[0] == read, "run make real-results"
    assert json.loads((root / "results" / "real_llm" / "record" / "study.json").read_text())["cells"]
