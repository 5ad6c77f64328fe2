"""aer_bench.studies.real_study without training: study files, where a cell trains, what its held-out evaluation
samples with, and the tables made from committed records alone."""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import study_helpers
import yaml

from aer_bench.studies import real_study
from tests import helpers

ROOT = Path(__file__).resolve().parents[2]

KS = (1, 2, 4, 8, 16)


def _study(tmp_path, *flags, methods=("grpo", "aer")):
    args = argparse.Namespace(
        methods=list(methods),
        seeds=[0],
        output_dir=str(tmp_path),
        recipes_dir=str(real_study.RECIPES),
        eval_per_tier=16,
        eval_samples=16,
        recipe_overrides=list(flags),
    )
    return real_study.study_from_flags(args)


def test_parse_flags_reads_values_as_a_recipe_would():
    assert real_study.parse_flags(["--aer_tau", "0.3", "--aer_alpha_max=null", "--aer_adaptive", "false"]) == {
        "aer_tau": 0.3,
        "aer_alpha_max": None,
        "aer_adaptive": False,
    }
    assert real_study.parse_flags(["--prompt_system", "Answer: {x}"]) == {"prompt_system": "Answer: {x}"}
    assert real_study.parse_flags(["--eval_k_list", "1", "8"]) == {"eval_k_list": [1, 8]}
    # YAML 1.1's yes/no/on/off stay words: `--save_strategy no` is TRL's "no", not False
    assert real_study.parse_flags(["--save_strategy", "no", "--report_to", "on"]) == {
        "save_strategy": "no",
        "report_to": "on",
    }
    with pytest.raises(ValueError, match="needs a value"):
        real_study.parse_flags(["--aer_tau"])


def test_a_setting_is_a_new_cell_and_equal_settings_share_one(tmp_path):
    plain = _study(tmp_path)
    aer = plain.arm("aer")
    cell = real_study.cell_dir(plain, aer, 0, tmp_path)
    assert cell == real_study.cell_dir(_study(tmp_path), aer, 0, tmp_path)
    assert cell.parent != real_study.cell_dir(_study(tmp_path, "--aer_tau", "0.3"), aer, 0, tmp_path).parent
    assert cell.name == "seed0" and real_study.cell_dir(plain, aer, 1, tmp_path).parent == cell.parent
    # the same settings reached another way (an arm's settings instead of a flag) train in the same cell
    other = real_study.Study(
        arms=[real_study.Arm("renamed", "aer", {"aer_tau": 0.3})], seeds=[0], records=tmp_path / "other"
    )
    flagged = _study(tmp_path, "--aer_tau", "0.3")
    assert real_study.cell_dir(other, other.arms[0], 0, tmp_path) == real_study.cell_dir(
        flagged, flagged.arm("aer"), 0, tmp_path
    )


def test_execution_options_are_not_part_of_a_cells_identity(tmp_path):
    """`share_prompt_generation` changes how rollouts are computed, not which (same tokens for the same seed): a
    record made before it was switched on is the same cell; a setting of the experiment is not."""
    aer = _study(tmp_path).arm("aer")
    cell = real_study.cell_dir(_study(tmp_path), aer, 0, tmp_path)
    for value in ("true", "false"):
        assert real_study.cell_dir(_study(tmp_path, "--share_prompt_generation", value), aer, 0, tmp_path) == cell
    assert real_study.cell_dir(_study(tmp_path, "--share_prompt_forward", "false"), aer, 0, tmp_path) != cell


@pytest.mark.parametrize("exit_code", [0, 1])
def test_a_finished_cell_drops_its_checkpoints_and_a_failed_one_keeps_them_to_resume(tmp_path, monkeypatch, exit_code):
    study = _study(tmp_path)
    aer = study.arm("aer")
    commands = []

    def fake_training(command, **kwargs):  # what `aer_bench.run` leaves: checkpoints, then the final model
        commands.append(command)
        out = Path(command[command.index("--output_dir") + 1])
        (out / "checkpoint-30").mkdir(exist_ok=True)
        (out / "checkpoint-30" / "trainer_state.json").write_text("{}")
        if exit_code == 0:
            (out / "model.safetensors").write_text("weights")
        return exit_code

    monkeypatch.setattr(real_study.cells.subprocess, "call", fake_training)
    folder = real_study.cell_dir(study, aer, 0, tmp_path / "o")
    if exit_code:
        with pytest.raises(RuntimeError, match="aer seed 0 failed"):
            real_study.train_cell(study, aer, 0, tmp_path / "o")
        assert (folder / "checkpoint-30" / "trainer_state.json").is_file() and not (folder / "run.json").exists()
        with pytest.raises(RuntimeError):  # the next try resumes from it
            real_study.train_cell(study, aer, 0, tmp_path / "o")
        assert "--resume_from_checkpoint" in commands[-1]
        return
    real_study.train_cell(study, aer, 0, tmp_path / "o")
    assert (folder / "run.json").is_file() and (folder / "model.safetensors").is_file()
    assert not list(folder.glob("checkpoint-*"))
    # the record says what reproduces it: the code's commit, the packages' versions, the CPU and the threads
    import torch

    env = json.loads((folder / "run.json").read_text())["environment"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert env["commit"] == head and isinstance(env["tracked_changes"], bool)
    assert env["torch"] == torch.__version__ and env["trl"] and env["cpu"] and env["threads"] >= 1
    real_study.train_cell(study, aer, 0, tmp_path / "o")  # finished: not trained again
    assert len(commands) == 1


QUEUE = """
import sys
from pathlib import Path
from aer_bench.studies import real_study

study_file, fake_python = sys.argv[1], sys.argv[2]
sys.executable = fake_python  # train_cell starts `<python> -m aer_bench.run ...`: here a stand-in that sleeps
real_study.run_queue([real_study.load_study(study_file)], Path(study_file).parent / "o", evaluate_models=False,
                     seeds=[0], arms=["grpo"])
"""


def _wait_for(path, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, "the queue ended before its training started"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def test_a_cell_claimed_by_a_live_queue_is_left_to_it_and_a_dead_ones_claim_is_taken_over(tmp_path):
    """The claim is a lock, not a process id in a file: what the file says (a live queue's claim caught between its
    creation and its write, a reused id) does not matter, and a killed holder's claim is free at once."""
    study = real_study.load_study(study_helpers.write_study(tmp_path / "s"))
    arm = study.arm("grpo")
    claim = real_study.record_dir(study, arm, 0) / ".claim"
    claim.parent.mkdir(parents=True)
    with helpers.lock_held_elsewhere(claim):  # another queue's claim of the cell
        for text in ("", "garbage", "1", f"{os.getpid()}"):  # what a reader may find in the file of a live claim
            claim.write_text(text)
            assert real_study.claim_cell(study, arm, 0) is None
        mine = real_study.claim_cell(study, arm, 1)  # another cell is free
        assert mine is not None and real_study.claim_cell(study, arm, 1) is None  # and now held, also against us
        mine.release()
        assert real_study.claim_cell(study, arm, 1) is not None
    taken = real_study.claim_cell(study, arm, 0)  # its holder was killed: free
    assert taken is not None and taken.path.read_text() == f"{os.getpid()}\n"


@pytest.mark.slow  # ~12 s under the suite: a queue and its training process started, the queue killed
def test_a_queue_killed_alone_leaves_its_cell_to_the_training_it_started(tmp_path):
    """`kill PID` of a queue ends the queue, not the training it started: the cell stays claimed until that training
    ends too (a second queue used to start the same cell in the same folder, and both wrote its metrics.jsonl)."""
    study_file = study_helpers.write_study(tmp_path / "s")
    study = real_study.load_study(study_file)
    started = tmp_path / "training-started"
    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 120\n")
    fake_python.chmod(0o755)
    queue = subprocess.Popen([sys.executable, "-c", QUEUE, str(study_file), str(fake_python)], cwd=ROOT)
    training = None
    try:
        _wait_for(started, queue)
        training = next(p for p in Path("/proc").glob("[0-9]*") if _parent(p) == queue.pid)
        queue.kill()
        queue.wait()
        assert real_study.claim_cell(study, study.arm("grpo"), 0) is None  # its training still runs
    finally:
        queue.kill()
        if training is not None:
            os.kill(int(training.name), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (claim := real_study.claim_cell(study, study.arm("grpo"), 0)) is None and time.monotonic() < deadline:
        time.sleep(0.1)  # the killed training's process is reaped by init
    assert claim is not None


def _parent(proc: Path) -> int | None:
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def test_a_cell_recorded_by_another_study_is_copied_not_trained_again(tmp_path):
    first = real_study.load_study(study_helpers.write_study(tmp_path / "a"))
    second = real_study.load_study(study_helpers.write_study(tmp_path / "b"))
    again = second.arm("grpo")
    again.name = "grpo-again"  # the same settings under another name
    study_helpers.fake_study_record(first, first.arm("grpo"), 0, 0.6, 0.07, unmarked=2)
    assert real_study.share_record([first, second], second, again, 1) is None  # no record of seed 1
    copied = real_study.share_record([first, second], second, again, 0)
    assert copied == real_study.record_dir(second, again, 0)
    record = real_study.read_record(second, again, 0)
    assert record["run"]["arm"] == "grpo-again" and record["run"]["copied_from"].endswith("grpo/seed0")
    assert record["passk"] == real_study.read_record(first, first.arm("grpo"), 0)["passk"]
    assert real_study.share_record([first, second], second, second.arm("fixed"), 0) is None  # other settings


def test_a_record_evaluated_at_another_size_than_the_study_asks_is_never_mixed_into_its_tables(tmp_path, monkeypatch):
    """The study file's eval_per_tier raised after cells were recorded: their records (16 problems per tier) would
    be averaged with the new ones under a caption that says 32. Reading one is an error; the queue evaluates such a
    cell again, and another study's record of the same cell evaluated at another size is not copied."""
    import yaml

    small = real_study.load_study(study_helpers.write_study(tmp_path / "small"))
    study_helpers.fake_study_record(small, small.arm("grpo"), 0, 0.6, 0.07, unmarked=0)
    assert real_study.read_record(small, small.arm("grpo"), 0)["passk"]["num_samples"] == 16
    spec = yaml.safe_load((tmp_path / "small" / "study.yaml").read_text())
    (tmp_path / "small" / "study.yaml").write_text(yaml.safe_dump({**spec, "eval_per_tier": 32}))
    larger = real_study.load_study(tmp_path / "small" / "study.yaml")
    with pytest.raises(ValueError, match="16 problems per tier x 16 samples, while the study asks for 32 x 16"):
        real_study.read_record(larger, larger.arm("grpo"), 0)
    with pytest.raises(ValueError, match="32 x 16"):
        real_study.tables(larger)
    other = real_study.load_study(study_helpers.write_study(tmp_path / "other", eval_per_tier=32))
    assert real_study.share_record([larger, other], other, other.arm("grpo"), 0) is None
    queued = []
    monkeypatch.setattr(real_study.queue, "_run_cell", lambda st, arm, seed, *a: queued.append((arm.name, seed)))
    real_study.run_queue([larger], tmp_path / "o", seeds=[0], arms=["grpo"])
    assert queued == [("grpo", 0)]  # evaluated again
    real_study.run_queue([small], tmp_path / "o", seeds=[0], arms=["grpo"])
    assert queued == [("grpo", 0)]  # at the study's own size: recorded, nothing to do


def test_the_evaluation_samples_in_the_format_and_budget_the_cells_trained_with(tmp_path):
    study = _study(tmp_path)
    plain = real_study.eval_arguments(study, study.arm("aer"), ["m"], tmp_path)
    assert plain.max_new_tokens == 24 and plain.prompt_num_shots == 2 and "\\boxed{}" in plain.prompt_system
    flagged = _study(tmp_path, "--max_completion_length", "48", "--prompt_num_shots", "1")
    args = real_study.eval_arguments(flagged, flagged.arm("aer"), ["m"], tmp_path)
    assert args.max_new_tokens == 48 and args.prompt_num_shots == 1  # a study setting reaches the evaluation
    assert args.top_k == 0 and args.temperature == 1.0  # TRL samples the full distribution


def test_the_evaluation_takes_the_studys_problems_per_tier_from_the_split_its_cells_trained_without(tmp_path):
    study = _study(tmp_path, "--arithmetic_test_extra", "0", "0", "0", "32")
    study.eval_per_tier, study.eval_long_tokens = [16, 16, 16, 64], 48
    args = real_study.eval_arguments(study, study.arm("aer"), ["m"], tmp_path)
    assert args.arithmetic_test_per_tier == 32 and args.arithmetic_test_extra == [0, 0, 0, 32]
    assert args.arithmetic_eval_per_tier == [16, 16, 16, 64] and args.k_list == list(range(1, 17))
    longer = real_study.eval_arguments(study, study.arm("aer"), ["m"], tmp_path, 48)
    assert longer.max_new_tokens == 48 and args.max_new_tokens == 24


def test_primary_endpoint_by_rule_against_hand_computed_tests(tmp_path):
    """Differences 0, +6.25, +12.5, +18.75 points (hardest tier pass@16, AER − GRPO): mean 9.375, sd 8.07, t = 2.32
    on 3 degrees of freedom, two-sided p = 0.1027: no difference shown; sign test 3 up, 0 down, 1 tie: p = 0.25."""
    study = real_study.load_study(
        study_helpers.write_study(tmp_path / "s", seeds=[0, 1, 2, 3, 4], primary={"tier": 3, "k": 16})
    )
    cells = []
    for seed, diff in enumerate([0.0, 0.0625, 0.125, 0.1875]):
        for arm, value in (("grpo", 0.25), ("fixed", 0.25 + diff)):
            cells.append({"method": arm, "seed": seed, "passk": {"per_group": {"3": {"pass@16": value}}}})
    result = real_study.primary_endpoint(cells, study, "grpo")["arms"]["fixed"]
    assert result["mean"] == pytest.approx(9.375) and result["seeds"] == 4
    assert result["t_p"] == pytest.approx(0.1027, abs=1e-4)
    assert result["sign"] == {"up": 3, "down": 0, "ties": 1, "p": 0.25}
    assert result["verdict"] == "no difference shown"
    lines = "\n".join(real_study.primary_lines(real_study.primary_endpoint(cells, study, "grpo"), 5))
    assert "| fixed − grpo | 4 of 5 | 9.38 ± 13 | 0.103 | 3 / 0 / 1, 0.25 | no difference shown (interim" in lines
    cells += [
        {"method": "grpo", "seed": 4, "passk": {"per_group": {"3": {"pass@16": 0.25}}}},
        {"method": "fixed", "seed": 4, "passk": {"per_group": {"3": {"pass@16": 0.5}}}},
    ]
    five = real_study.primary_endpoint(cells, study, "grpo")["arms"]["fixed"]
    assert five["t_p"] < 0.05 and five["verdict"] == "higher"


def test_primary_endpoint_when_every_pair_differs_alike(tmp_path):
    """No spread among the differences: the same non-zero shift on every seed is a certain difference (t infinite,
    p = 0), not 'no difference shown'; every pair tied is no difference."""
    study = real_study.load_study(
        study_helpers.write_study(tmp_path / "s", seeds=[0, 1, 2, 3], primary={"tier": 3, "k": 16})
    )

    def cells(diff):
        return [
            {"method": arm, "seed": seed, "passk": {"per_group": {"3": {"pass@16": value}}}}
            for seed in range(4)
            for arm, value in (("grpo", 0.25), ("fixed", 0.25 + diff))
        ]

    down = real_study.primary_endpoint(cells(-0.0625), study, "grpo")["arms"]["fixed"]
    assert down["t_p"] == 0.0 and down["verdict"] == "lower" and down["sign"]["down"] == 4
    tied = real_study.primary_endpoint(cells(0.0), study, "grpo")["arms"]["fixed"]
    assert tied["verdict"] == "no difference shown" and tied["sign"]["ties"] == 4


def test_a_record_without_the_longer_budget_or_at_other_tier_sizes_is_evaluated_again(tmp_path):
    study = real_study.load_study(
        study_helpers.write_study(tmp_path / "s", eval_per_tier=[16, 16, 16, 64], eval_long_tokens=48)
    )
    groups = {t: {"num_problems": n} for t, n in zip("0123", (16, 16, 16, 64))}
    passk = {"num_samples": 16, "per_group": groups}
    assert "longer budget of 48 tokens (found: None)" in real_study.evaluation_mismatch(study, passk)
    passk["longer"] = {"fingerprint": {"max_new_tokens": 48}}
    assert real_study.evaluation_mismatch(study, passk) is None
    passk["per_group"]["3"]["num_problems"] = 16
    assert "16 problems per tier x 16 samples, while the study asks for 16/16/16/64" in (
        real_study.evaluation_mismatch(study, passk)
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"arms": {}}, "no arms"),
        ({"seeds": "0"}, "seeds"),
        ({"reference": "aer"}, "reference"),
        ({"steps": 3}, "unknown keys"),
        ({"arms": {"a": {"settings": {}}}}, "recipe"),
        ({"eval_per_tier": [16, 64]}, "eval_per_tier"),
        ({"eval_per_tier": 0}, "eval_per_tier"),
        ({"eval_long_tokens": "48"}, "eval_long_tokens"),
        ({"primary": {"tier": 4, "k": 16}}, "primary"),
        ({"primary": {"tier": 3, "k": 32}}, "primary k"),
        ({"primary": {"tier": 3, "k": 16}, "reference": None}, "reference arm"),
    ],
)
def test_a_bad_study_file_names_the_file_and_the_key(tmp_path, change, message):
    path = study_helpers.write_study(tmp_path / "s", **change)
    with pytest.raises(ValueError, match=message) as err:
        real_study.load_study(path)
    assert str(path) in str(err.value)


def test_tables_from_records_alone_and_stable_when_made_again(tmp_path):
    study = real_study.load_study(study_helpers.write_study(tmp_path / "s"))
    for seed, (g, f) in enumerate([(0.60, 0.62), (0.58, 0.63)]):
        study_helpers.fake_study_record(study, study.arm("grpo"), seed, g, 0.07, unmarked=2)
        study_helpers.fake_study_record(study, study.arm("fixed"), seed, f, 0.2, unmarked=10 + seed)
    base = {f"pass@{k}": 0.4 for k in KS}
    base.update(per_group={t: {"pass@1": 0.4} for t in "0123"}, num_problems=64, num_samples=16, reward_stats={})
    (study.records / "base_passk.json").write_text(json.dumps(base))
    real_study.tables(study)
    table = (study.records / "study.md").read_text()
    summary = json.loads((study.records / "study.json").read_text())
    cells = {(c["method"], c["seed"]): c for c in summary["cells"]}
    assert cells[("fixed", 1)]["no_answer_share"] == pytest.approx(11 / 1024)
    # target 0.2, second-half entropy 0.2: on target; GRPO's 0.07 is 65% below it
    assert cells[("fixed", 0)]["target_distance"] == pytest.approx(0.0)
    assert cells[("grpo", 0)]["target_distance"] == pytest.approx(0.65)
    assert summary["base"]["no_answer_share"] == 0.0
    assert "| fixed − grpo | 2 |" in table and "| untrained | – |" in table
    real_study.tables(study)
    assert (study.records / "study.md").read_text() == table  # made again from the same records: the same table


def test_a_record_made_with_other_settings_is_an_error_not_a_silent_mix(tmp_path):
    path = study_helpers.write_study(tmp_path / "s")
    study = real_study.load_study(path)
    study_helpers.fake_study_record(study, study.arm("fixed"), 0, 0.6, 0.2, unmarked=0)
    study_helpers.write_study(
        tmp_path / "s", arms={"grpo": {"recipe": "grpo"}, "fixed": {"recipe": "aer", "settings": {}}}
    )
    changed = real_study.load_study(path)
    with pytest.raises(ValueError, match="other settings"):
        real_study.read_record(changed, changed.arm("fixed"), 0)


def test_committed_studies_load_and_their_records_match_their_settings():
    """Every study under results/real_llm/ parses, and every record in it was made with the settings it states."""
    root = Path(__file__).resolve().parents[2] / "results" / "real_llm"
    paths = sorted(root.glob("*/study.yaml"))
    assert len(paths) >= 5, paths  # a moved folder must not leave this test checking nothing
    for path in paths:
        study = real_study.load_study(path)
        for arm in study.arms:
            for seed in study.seeds:
                real_study.read_record(study, arm, seed)  # raises on a mismatch or a missing file


def test_every_committed_study_table_regenerates_from_its_records_and_is_the_one_in_the_docs(tmp_path):
    """make real-results, checked: each committed study's tables made again from its records alone equal the
    committed study.md, and docs/real_llm.md shows that table."""
    import shutil

    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "real_llm.md").read_text()
    # every study with the frozen recipes they read, so that a deviation (deviation.yaml) finds its study file
    shutil.copytree(root / "results" / "real_llm", tmp_path, dirs_exist_ok=True)
    paths = sorted((root / "results" / "real_llm").glob("*/study.yaml"))
    assert sum((p.parent / "study.md").is_file() for p in paths) >= 5, paths  # never vacuous
    for path in paths:
        if not (path.parent / "study.md").is_file():
            continue
        copy = tmp_path / path.parent.name
        (copy / "study.md").unlink()  # made again below
        study = real_study.load_study(copy / "study.yaml")
        study.figure = None  # the figure is not compared
        real_study.tables(study)
        made = (copy / "study.md").read_text()
        assert made == (path.parent / "study.md").read_text(), f"{path.parent}: run make real-results"
        table_lines = [line for line in made.splitlines() if line.startswith("|")]
        missing = [line for line in table_lines if line not in docs]
        assert not missing, f"docs/real_llm.md lacks {path.parent.name}'s table (make real-results): {missing[:2]}"


def test_the_anchor_tables_in_the_docs_regenerate_from_the_committed_records():
    """make real-results' anchor block (docs/real_llm.md §3.4): the spread of H0 under aer_anchor_rollouts from the
    committed GRPO records and, where recorded, the probe's (results/real_llm/anchor/probe.json)."""
    from aer_bench.studies import anchor

    root = Path(__file__).resolve().parents[2]
    studies = [str(p) for p in sorted((root / "results" / "real_llm").glob("*/study.yaml"))]
    probe = root / "results" / "real_llm" / "anchor" / "probe.json"
    table = anchor.main([*studies, "--probe_record", str(probe)])
    block = (root / "docs" / "real_llm.md").read_text().split("<!-- study:anchor -->\n", 1)[1]
    assert block.split("<!-- /study:anchor -->", 1)[0] == table, "run make real-results"
    assert "| probe |" in table or not probe.is_file()


def test_the_probe_table_compares_the_anchors_on_the_same_seeds():
    from aer_bench.studies import anchor

    record = {
        "probe_prompts": 32, "rollout_prompts": 4, "num_generations": 8,
        "seeds": {"0": {"probe": 0.5, "first_rollout": 0.6}, "1": {"probe": 0.5, "first_rollout": 0.3},
                  "2": {"probe": 0.5, "first_rollout": 0.6}},
    }  # fmt: skip
    table = anchor.probe_table(record)
    assert "| first rollout batch | 4 | 0.500 | 0.173 | 0.35 |" in table
    assert "| probe | 32 | 0.500 | 0.000 | 0.00 |" in table


def test_seeds_and_methods_with_a_study_pick_the_cells_to_train_not_the_tables(tmp_path, monkeypatch):
    """`--study F --seeds 1 --methods b`: only arm b's seed-1 cell is queued; an unknown arm or seed is an error."""
    study = tmp_path / "s" / "study.yaml"
    study.parent.mkdir()
    arms = {"a": {"recipe": "grpo"}, "b": {"recipe": "aer"}}
    study.write_text(yaml.safe_dump({"title": "t", "seeds": [0, 1], "reference": "a", "arms": arms}))
    queued = []
    monkeypatch.setattr(real_study.queue, "_run_cell", lambda st, arm, seed, *a: queued.append((arm.name, seed)))
    real_study.main(["--study", str(study), "--seeds", "1", "--methods", "b", "--output_dir", str(tmp_path / "o")])
    assert queued == [("b", 1)]
    assert real_study.load_study(study).seeds == [0, 1]
    for bad in (["--methods", "c"], ["--seeds", "7"]):
        with pytest.raises(SystemExit):
            real_study.main(["--study", str(study), *bad, "--output_dir", str(tmp_path / "o")])


def test_the_coefficient_column_is_trls_entropy_coef_where_trls_bonus_trains_and_alpha_elsewhere():
    """TRL's adaptive entropy (skywork) logs its coefficient as `entropy_coef` while AER's α stays 0: the table's α
    column reads the coefficient that trained, not a zero."""
    step = {"reward": 0.5, "aer/entropy": 0.2, "aer/initial_entropy": 0.5, "aer/target_entropy": 0.2}
    trl = [{**step, "step": s, "aer/alpha": 0.0, "entropy_coef": 0.1 * s} for s in range(1, 11)]
    aer = [{**step, "step": s, "aer/alpha": 0.01 * s} for s in range(1, 11)]
    grpo = [{**step, "step": s, "aer/alpha": 0.0} for s in range(1, 11)]
    assert real_study.training_summary(trl)["alpha_last"] == pytest.approx(0.8)  # steps 6-10: 0.6..1.0
    assert real_study.training_summary(trl)["curves"]["alpha"][0] == (1, pytest.approx(0.1))
    assert real_study.training_summary(aer)["alpha_last"] == pytest.approx(0.08)
    assert real_study.training_summary(grpo)["alpha_last"] == 0.0


def test_a_queue_for_some_arms_still_copies_the_shared_records_of_the_others(tmp_path, monkeypatch):
    """`--methods fixed` over two studies: the second study's grpo cell, recorded by the first, is copied (its paired
    tables need it); nothing but `fixed` is trained."""
    first = real_study.load_study(study_helpers.write_study(tmp_path / "a"))
    second = real_study.load_study(study_helpers.write_study(tmp_path / "b"))
    study_helpers.fake_study_record(first, first.arm("grpo"), 0, 0.6, 0.07, unmarked=2)
    queued = []
    record = lambda st, arm, seed, *a: queued.append((st.records, arm.name, seed))  # noqa: E731
    monkeypatch.setattr(real_study.queue, "_run_cell", record)
    real_study.run_queue([first, second], tmp_path / "o", seeds=[0], arms=["fixed"])
    assert real_study.read_record(second, second.arm("grpo"), 0) is not None
    assert sorted(queued) == sorted([(first.records, "fixed", 0), (second.records, "fixed", 0)])


def test_a_tier_curve_averages_each_seeds_last_steps_and_runs_to_the_end_when_seeds_skip_steps():
    # a tier seen at odd steps by one seed and at even steps by the other: no step is common to both, yet every
    # step from 2 on has an observation of each seed within its last 5 steps
    odd = {1: 0.0, 3: 1.0, 5: 1.0, 7: 1.0}
    even = {2: 0.5, 4: 0.5, 6: 1.0, 8: 1.0}
    steps, values = real_study.tier_curve([odd, even])
    assert steps == [2, 3, 4, 5, 6, 7, 8]
    assert values[0] == pytest.approx((0.0 + 0.5) / 2)  # step 2: odd {1}, even {2}
    assert values[-1] == pytest.approx((1.0 + (0.5 + 1.0 + 1.0) / 3) / 2)  # step 8: odd {5, 7}, even {4, 6, 8}
    assert real_study.tier_curve([]) == ([], [])


def test_the_figure_carries_the_studys_title_and_each_tier_to_the_last_step(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))

    def cell(method, seed):
        curve = [(s, 0.1 * seed + 0.01 * s) for s in range(1, 13)]
        tiers = {f"tier{t}": [(s, 0.5) for s in range(1, 13) if (s + seed + int(t)) % 3 == 0] for t in "0123"}
        keys = ("reward", "entropy", "alpha", "hard_share", "length")
        return {"method": method, "seed": seed, "target": 0.2, "h0": 0.5, "curves": {k: curve for k in keys} | tiers}

    cells = [cell(m, seed) for m in ("grpo", "aer") for seed in (0, 1, 2)]
    real_study.plot(cells, None, tmp_path / "figure.png", KS, title="Rivals, 60 steps")
    (fig,) = figures
    assert fig._suptitle.get_text().startswith("Rivals, 60 steps:")  # not the last panel's title
    tier_panel = fig.axes[7]
    assert {max(line.get_xdata()) for line in tier_panel.get_lines()} >= {12}
    assert min(max(line.get_xdata()) for line in tier_panel.get_lines()) >= 10
    assert "grpo (3 seeds)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    plt.close(fig)


def test_the_tables_of_a_study_with_a_longer_budget_and_a_primary_endpoint(tmp_path):
    """The hard-problem study's tables: the no-answer share and pass@1 at the longer budget beside the trained one's,
    their paired differences, and the primary endpoint's row, interim until every seed is in."""
    study = real_study.load_study(
        study_helpers.write_study(tmp_path / "s", seeds=[0, 1, 2], eval_long_tokens=48, primary={"tier": 3, "k": 16})
    )
    for seed, (g, f) in enumerate([(0.30, 0.40), (0.35, 0.40)]):
        for arm, pass1, unmarked in (("grpo", g, 2), ("fixed", f, 20)):
            study_helpers.fake_study_record(study, study.arm(arm), seed, pass1, 0.2, unmarked=unmarked)
            path = real_study.record_dir(study, study.arm(arm), seed) / "passk.json"
            passk = json.loads(path.read_text())
            passk["longer"] = {
                **passk,
                "reward_stats": {"unmarked": unmarked // 2},
                "fingerprint": {"max_new_tokens": 48},
            }
            once, always = (6, 6 - 4 * seed) if arm == "fixed" else (2, 10 - 4 * seed)
            correct = [0] * 4 + [1] * once + [16] * always
            passk["per_group"]["3"]["correct"] = correct + [5] * (16 - len(correct))
            path.write_text(json.dumps(passk))
    real_study.tables(study)
    table = (study.records / "study.md").read_text()
    summary = json.loads((study.records / "study.json").read_text())
    assert "no answer at 48 tokens (%)" in table and "pass@1 at 48 tokens" in table
    assert "and again at 48 tokens" in table
    paired = summary["paired"]["fixed"]
    assert paired["no answer (%)"][0] == pytest.approx(100 * 18 / 1024)
    assert paired["no answer at 48 tokens (%)"][0] == pytest.approx(100 * 9 / 1024)
    # hardest tier pass@16 (the fake record: 2 x pass1): +20 and +10 points over 2 of 3 seeds
    primary = summary["primary"]["arms"]["fixed"]
    assert primary["mean"] == pytest.approx(15.0) and primary["sign"]["up"] == 2
    assert "| fixed − grpo | 2 of 3 | 15 ± 64 |" in table and "(interim: the study is not finished)" in table
    # how the hardest tier's 16 problems were solved (none / once / some / all of 16): grpo 4/2/0/10 and 4/2/4/6,
    # fixed 4/6/0/6 and 4/6/4/2 — descriptive, beside the pre-registered row
    assert "Descriptive, not pre-registered: the 2-digit × 1-digit tier's 16 held-out problems" in table
    assert "| grpo | 2 | 4 ± 0 | 2 ± 0 | 2 ± 25 | 8 ± 25 |" in table
    assert "| fixed − grpo | 2 | 0 ± 0 | 4 ± 0 | 0 ± 0 | -4 ± 0 |" in table
    assert summary["solve_profile"]["paired"]["fixed"]["once"] == [4.0, 0.0]


def test_solve_profile_against_hand_counts():
    """Per seed, the primary tier's problems solved in none, one, some and all of n = 16 samples, and the paired
    difference: grpo 1/1/1/1 and 2/0/0/2, fixed 0/2/1/1 and 1/1/1/1, so fixed − grpo is −1/+1/0/0 and −1/+1/+1/−1."""

    def cell(arm, seed, correct):
        return {"method": arm, "seed": seed, "passk": {"num_samples": 16, "per_group": {"3": {"correct": correct}}}}

    cells = [
        cell("grpo", 0, [0, 1, 16, 5]),
        cell("grpo", 1, [0, 0, 16, 16]),
        cell("fixed", 0, [1, 1, 3, 16]),
        cell("fixed", 1, [0, 2, 1, 16]),
    ]
    profile = real_study.solve_profile(cells, "3", "grpo")
    assert profile["problems"] == 4 and profile["samples"] == 16
    assert {b: profile["rows"]["grpo"][b][0] for b in ("none", "once", "some", "all")} == {
        "none": 1.5, "once": 0.5, "some": 0.5, "all": 1.5
    }  # fmt: skip
    paired = profile["paired"]["fixed"]
    assert paired["seeds"] == 2 and paired["none"] == (-1.0, 0.0) and paired["once"] == (1.0, 0.0)
    assert paired["some"][0] == 0.5 and paired["all"][0] == -0.5
    assert "grpo" not in profile["paired"]
    lines = "\n".join(real_study.solve_profile_lines(profile, "grpo"))
    assert "| model | seeds | solved in none | one | 2–15 | all 16 samples |" in lines
    assert "| fixed − grpo | 2 | -1 ± 0 | 1 ± 0 |" in lines


def test_the_tables_say_where_the_cells_trained_and_a_mixed_study_stands_out(tmp_path):
    """Each distinct environment of the cells' run.json gets a line naming its cells; a study whose cells trained on
    two kinds of CPU (another float path from the first step) says so in bold; a record without one is "not
    recorded"."""
    from aer_bench.studies.real_study.tables import seed_runs

    assert seed_runs([25, 20, 21, 22, 27, 28]) == "20–22, 25, 27–28" and seed_runs([3]) == "3"
    study = real_study.load_study(study_helpers.write_study(tmp_path / "s"))
    xeon = {"commit": "1ee4ab4156078d", "cpu": "Intel(R) Xeon(R) Processor", "threads": 2, "torch": "2.13.0+cpu"}
    epyc = {**xeon, "cpu": "AMD EPYC", "cpu_bf16_kernels": False, "tracked_changes": True}
    for seed in (0, 1):
        study_helpers.fake_study_record(study, study.arm("grpo"), seed, 0.6, 0.07, 2, environment=xeon)
    study_helpers.fake_study_record(study, study.arm("fixed"), 0, 0.6, 0.2, 2, environment=xeon)
    study_helpers.fake_study_record(study, study.arm("fixed"), 1, 0.6, 0.2, 2, environment=epyc)
    real_study.tables(study)
    table = (study.records / "study.md").read_text()
    assert "**Trained in 2 environments:**" in table
    assert "- 3 cells (fixed seeds 0; grpo seeds 0–1): commit 1ee4ab4, Intel(R) Xeon(R) Processor, 2 threads" in table
    assert "- 1 cell (fixed seeds 1): commit 1ee4ab4, AMD EPYC, bf16 kernels no, 2 threads, torch 2.13.0+cpu" in table
    assert "torch 2.13.0+cpu, with uncommitted changes to tracked files" in table
    summary = json.loads((study.records / "study.json").read_text())
    assert {c["environment"]["cpu"] for c in summary["cells"]} == {"AMD EPYC", "Intel(R) Xeon(R) Processor"}

    old = real_study.load_study(study_helpers.write_study(tmp_path / "old"))
    study_helpers.fake_study_record(old, old.arm("grpo"), 0, 0.6, 0.07, 2)
    real_study.tables(old)
    table = (old.records / "study.md").read_text()
    assert "Trained in one environment:" in table and "environment not recorded" in table


def _deviation(tmp_path, **dev_extra):
    """A registered study (seeds 0-3, primary: tier 3 pass@16) whose seeds 2-3 a deviation trains in study `dev`."""
    registered = study_helpers.write_study(tmp_path / "reg", seeds=[0, 1, 2, 3], primary={"tier": 3, "k": 16})
    spec = {"seeds": [2, 3], "settings": {"aer_tau": 0.4, "bf16": False}, **dev_extra}
    study_helpers.write_study(tmp_path / "dev", **spec)
    (registered.parent / "deviation.yaml").write_text(yaml.safe_dump({"study": "../dev/study.yaml", "seeds": [2, 3]}))
    return registered


def test_a_deviation_takes_its_seeds_pairs_from_its_own_study_and_the_verdict_reads_all_the_registered_seeds(tmp_path):
    """Hardest-tier pass@16 (twice pass@1 in these records): registered pairs +10, +20 (seeds 0-1), the deviation's
    +30, +10 (seeds 2-3). The verdict reads all four: mean 17.5, t on 3 degrees of freedom p = 0.0354, sign 4 up,
    p = 0.125; beside it the registered pairs alone (+15) and the deviation's alone (+20), with no verdict. The
    registered study's fixed-arm cell on seed 2, trained before the deviation (pass@16 20%), is in no pair."""
    study = real_study.load_study(_deviation(tmp_path))
    assert study.deviation.seeds == [2, 3] and study.deviation.study.settings["bf16"] is False
    dev = study.deviation.study
    for seed, (g, f) in enumerate([(0.30, 0.35), (0.30, 0.40)]):
        study_helpers.fake_study_record(study, study.arm("grpo"), seed, g, 0.07, unmarked=0)
        study_helpers.fake_study_record(study, study.arm("fixed"), seed, f, 0.2, unmarked=0)
    study_helpers.fake_study_record(study, study.arm("fixed"), 2, 0.10, 0.2, unmarked=0)  # before the deviation
    for seed, (g, f) in zip((2, 3), [(0.30, 0.45), (0.30, 0.35)]):
        study_helpers.fake_study_record(dev, dev.arm("grpo"), seed, g, 0.07, unmarked=0)
        study_helpers.fake_study_record(dev, dev.arm("fixed"), seed, f, 0.2, unmarked=0)
    for folder in (study.records, dev.records):  # solve_profile reads each problem's count of correct samples
        for path in folder.glob("cells/*/seed*/passk.json"):
            passk = json.loads(path.read_text())
            passk["per_group"]["3"]["correct"] = [0, 1, 16, 5]
            path.write_text(json.dumps(passk))
    real_study.tables(study)
    summary = json.loads((study.records / "study.json").read_text())
    primary = summary["primary"]
    verdict = primary["arms"]["fixed"]
    assert verdict["seeds"] == 4 and verdict["mean"] == pytest.approx(17.5)
    assert verdict["t_p"] == pytest.approx(0.03535, abs=1e-5) and verdict["verdict"] == "higher"
    assert verdict["sign"] == {"up": 4, "down": 0, "ties": 0, "p": 0.125}
    registered_alone, deviation_alone = primary["beside"].values()
    assert registered_alone["arms"]["fixed"]["mean"] == pytest.approx(15.0)
    assert deviation_alone["arms"]["fixed"]["mean"] == pytest.approx(20.0)
    assert summary["solve_profile"]["rows"]["fixed"]["seeds"] == 4  # the seed-2 cell of the registered study: out
    table = (study.records / "study.md").read_text()
    row = "| fixed − grpo | 0–3: 0–1 here, 2–3 from dev | 4 of 4 | 17.5 ± 15 | 0.0354 | 4 / 0 / 0, 0.125 | higher |"
    assert row in table
    assert "| fixed − grpo | 0–1 here alone | 2 | 15 ± 64 |" in table
    assert "| fixed − grpo | 2–3 from dev alone | 2 | 20 ± 1.3e+02 |" in table and "none: beside the verdict" in table
    assert "| fixed − grpo, 2–3 from dev alone | 2 |" in table  # the secondary endpoints, the same three ways
    assert "Deviation, written before its cells (reg/deviation.yaml)" in table


def test_a_queue_leaves_a_deviations_seeds_to_the_deviations_study(tmp_path, monkeypatch):
    registered = _deviation(tmp_path)
    queued = []
    monkeypatch.setattr(
        real_study.queue, "_run_cell", lambda st, arm, seed, *a: queued.append((st.records.name, arm.name, seed))
    )
    dev = str(tmp_path / "dev" / "study.yaml")
    real_study.main(["--study", str(registered), dev, "--methods", "fixed", "--output_dir", str(tmp_path / "o")])
    assert queued == [("reg", "fixed", 0), ("reg", "fixed", 1), ("dev", "fixed", 2), ("dev", "fixed", 3)]


@pytest.mark.parametrize(
    "deviation, dev_extra, error, message",
    [
        ({"study": "../dev/study.yaml"}, {}, ValueError, "exactly `study` and `seeds`"),
        ({"study": "../dev/study.yaml", "seeds": [7]}, {}, ValueError, r"seeds \[7\] are not seeds of the study"),
        ({"study": "../nowhere/study.yaml", "seeds": [2]}, {}, FileNotFoundError, "no file"),
        ({"study": "../dev/study.yaml", "seeds": [1]}, {}, ValueError, r"seeds \[1\] are not among"),
        ({"study": "../dev/study.yaml", "seeds": [2]}, {"reference": "fixed"}, ValueError, "same reference"),
        ({"study": "../dev/study.yaml", "seeds": [2]}, {"eval_samples": 8}, ValueError, "evaluates otherwise"),
        ({"study": "study.yaml", "seeds": [2]}, {}, ValueError, "one deviation deep"),  # itself: no endless loop
    ],
)
def test_a_bad_deviation_names_its_file_and_what_is_wrong(tmp_path, deviation, dev_extra, error, message):
    registered = _deviation(tmp_path, **dev_extra)
    (registered.parent / "deviation.yaml").write_text(yaml.safe_dump(deviation))
    with pytest.raises(error, match=message) as err:
        real_study.load_study(registered)
    assert str(registered.parent / "deviation.yaml") in str(err.value)


def test_the_hard_study_docs_recomputations_from_raw_records_print_what_the_docs_say(monkeypatch, capsys):
    """docs/real_llm.md §3.11's snippets that recompute the hard-problem study's primary endpoint from the raw
    passk.json records (every pair; without the resumed cells' pairs) print the figures written under them."""
    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "real_llm.md").read_text()
    marker = "    for drop in ((), (23, 26, 34), (23, 26, 34, 39)):"
    start = docs.rindex("    .venv/bin/python - <<'PY'\n", 0, docs.index(marker))
    end = docs.index("    PY\n", start)
    code = "\n".join(line[4:] for line in docs[start:end].split("\n")[1:])
    expected = []
    for line in docs[end:].split("\n")[1:]:
        if not line.startswith("    # "):
            break
        expected.append(line[6:])
    monkeypatch.chdir(root)  # the snippet reads results/ from the repository's root, as the docs run it
    exec(compile(code, "docs/real_llm.md", "exec"), {})
    assert capsys.readouterr().out.split("\n")[:-1] == expected and len(expected) == 3
