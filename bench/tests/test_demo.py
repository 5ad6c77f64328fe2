"""aer_bench.studies.demo: the whole lab pipeline in a few steps (warm start, GRPO and AER from their recipes, figure,
table), repeatable by seed."""

import json
from pathlib import Path

import pytest

from aer_bench.studies import demo
from aer_bench.training import train_recipe
from aer_trl.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_quick_runs_the_whole_pipeline(tmp_path, capsys):
    summary = demo.main(["--quick", "--output_dir", str(tmp_path / "demo"), "--lab_cache_dir", str(tmp_path / "lab")])
    out = tmp_path / "demo"
    printed = capsys.readouterr().out  # the story: a header per phase, then what was written where
    for header in ("== 1/4 warm start", "== 2/4 GRPO (seed 0): training into", "== 3/4 AER-GRPO (seed 0)",
                   "== 4/4 evaluation: held-out pass@k"):  # fmt: skip
        assert header in printed, header
    assert f"written to {out}/: figure.png, entropy.png" in printed
    assert (out / "figure.png").stat().st_size > 10_000
    assert (
        "| AER-GRPO (`aer`) | 1 |" in (out / "passk.md").read_text()
        and "| GRPO (`grpo`) | 1 |" in (out / "passk.md").read_text()
    )
    for method in ("grpo", "aer"):
        records = read_metrics(out / f"{method}-seed0" / "metrics.jsonl")
        assert [r["step"] for r in records if "loss" in r] == list(range(1, 9))
        logged = [r for r in records if "loss" in r]
        # H_t is measured over a whole rollout batch (its 4 steps), then repeated on every log
        assert [r["step"] for r in logged if "aer/entropy" in r] == list(range(4, 9))
        # rollout metrics come with the step that sampled them: 4 optimizer steps per rollout batch in the lab
        assert any(k.startswith("lab/accuracy_tier") for k in logged[0])
        assert (out / f"{method}-seed0" / "model.safetensors").exists()
    grpo_alphas = [r["aer/alpha"] for r in read_metrics(out / "grpo-seed0" / "metrics.jsonl")]
    assert set(grpo_alphas) == {0.0}  # the baseline never switches the bonus on
    assert set(summary["passk"]) == {"grpo", "aer"}
    assert json.loads((out / "results.json").read_text())["seeds"] == [0]


def test_the_phase_bar_shows_a_few_numbers_and_busy_cores_are_named(monkeypatch):
    """The demo's bar names its phase and shows reward, entropy and α (not every log's dict); on busy cores the
    demo says why it is slow and what to do, once."""
    from types import SimpleNamespace

    bar = demo.PhaseProgress("AER-GRPO (seed 0)")
    shown = {}
    bar.training_bar = SimpleNamespace(set_postfix=lambda values, refresh: shown.update(values))
    bar.on_log(None, None, None, logs={"reward": 0.4567, "aer/entropy": 0.21, "aer/alpha": 0.02, "x": 1.0})
    assert shown == {"reward": "0.457", "H": "0.21", "α": "0.02"}
    monkeypatch.delenv("AER_CPU_THREADS", raising=False)
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (7.5, 0.0, 0.0))
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    assert (
        "load 7.5 on 2 cores" in demo.busy_cores_advice() and "AER_CPU_THREADS=1 make demo" in demo.busy_cores_advice()
    )
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (0.2, 0.0, 0.0))
    assert demo.busy_cores_advice() is None


def test_the_figure_explains_itself(tmp_path):
    """One colour per method in every panel, bounded axes from 0, the α = 0 stretch shaded and said, the seeds named
    in the title, and the range over seeds drawn where there are several."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from aer_bench.studies import report

    def records(seed, alpha_from):
        return [
            {"step": s, "loss": 0.1, "reward": 0.3 + 0.01 * seed, "aer/entropy": 0.25 - 0.001 * s,
             "aer/alpha": 0.01 if s >= alpha_from else 0.0, "aer/target_entropy": 0.2,
             "completions/mean_length": 11.2 + 0.01 * (s % 3), "aer/bucket/hard/lambda": 0.0}
            for s in range(1, 11)
        ]  # fmt: skip

    runs = {"grpo": [records(0, 99), records(1, 99)], "aer": [records(0, 6), records(1, 6)]}
    passk = {m: [{"all": {1: 0.4, 2: 0.5}}, {"all": {1: 0.45, 2: 0.55}}] for m in runs}
    captured = {}
    real_savefig = plt.Figure.savefig

    def keep(fig, path, **kw):
        captured["fig"] = fig
        return real_savefig(fig, path, **kw)

    import unittest.mock

    with unittest.mock.patch.object(plt.Figure, "savefig", keep):
        report.plot_runs(runs, passk, tmp_path / "figure.png")
    fig = captured["fig"]
    assert "2 seeds" in fig._suptitle.get_text()
    panels = {ax.get_title().split(" (")[0].split("\n")[0]: ax for ax in fig.axes}
    length = panels["mean response length"]
    assert length.get_ylim()[0] == 0  # 11.20-11.22 is noise: drawn against its whole range
    colors = {line.get_label().split()[0]: line.get_color() for ax in fig.axes for line in ax.get_lines()
              if line.get_label().split()[0] in runs}  # fmt: skip
    assert colors == {"grpo": "C0", "aer": "C1"}  # every panel: one colour per method
    alpha = panels["AER global coefficient α"]
    assert any("trains exactly as GRPO" in t.get_text() for t in alpha.texts)
    assert any(len(c.get_paths()) for c in panels["policy entropy"].collections)  # the seeds' range, shaded


@pytest.mark.slow  # 6-9 s on 2 cores
def test_the_same_seed_gives_the_same_lab_run(tmp_path):
    """Repeatability: the lab's RL run (sampling, rewards, 4 off-policy steps per rollout, α) is a function of the
    seed: two runs agree on every logged number except wall-clock ones; another seed gives another run."""
    timing = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}

    def run(name, seed):
        overrides = [*demo.QUICK_OVERRIDES, "--max_steps", "8", "--lab_cache_dir", str(tmp_path / "lab")]
        train_recipe(demo.RECIPES / "aer.yaml", [*overrides, "--output_dir", str(tmp_path / name), "--seed", seed])
        return [
            {k: v for k, v in r.items() if k not in timing} for r in read_metrics(tmp_path / name / "metrics.jsonl")
        ]

    first, second, other = run("a", "0"), run("b", "0"), run("c", "1")
    assert len(first) == 9 and first == second
    assert [r.get("aer/entropy") for r in first] != [r.get("aer/entropy") for r in other]
