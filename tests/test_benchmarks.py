"""The benchmark scripts keep working (quick mode). No timing is asserted: figures are printed, not tested."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_step_cost_quick(tmp_path, capsys):
    import step_cost

    rows = step_cost.main(["--quick", "--json", str(tmp_path / "rows.json")])
    assert len(rows) == 1 and rows[0]["grpo_ms"] > 0 and rows[0]["aer_ms"] > 0
    assert "time_ratio" in rows[0] and json.loads((tmp_path / "rows.json").read_text()) == rows
    assert "GRPO ms" in capsys.readouterr().out


def test_entropy_tracking_reads_demo_metrics(tmp_path, capsys):
    import entropy_tracking

    run = tmp_path / "aer-seed0"
    run.mkdir()
    records = [
        {"step": s, "aer/entropy": h, "aer/target_entropy": 0.2, "aer/initial_entropy": 0.5}
        for s, h in [(1, 0.5), (2, 0.3), (3, 0.22), (4, 0.18)]
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = entropy_tracking.main([str(tmp_path)])
    # second half: steps 3 and 4 -> distances 0.1 and 0.1
    assert abs(out["aer"][0]["median"] - 0.1) < 1e-9 and out["aer"][0]["within_15pct"] == 1.0
    assert "| aer | 1 |" in capsys.readouterr().out
