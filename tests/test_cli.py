"""The command lines a user meets first (`aer-train`, `aer-evaluate`): `--list` at once and without TRL, `--help`
that starts with how to name a recipe, recipes found by name from any folder, and mistakes answered in one paragraph
that names the field and what to do, without a traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aer_trl.app.cli import run_friendly
from aer_trl.app.resources import list_recipes, resolve_recipe, shipped_recipes

ROOT = Path(__file__).resolve().parents[1]


def python(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("module", "kind"), [("aer_trl.app.run", "train"), ("aer_trl.app.evaluation.__main__", "eval")]
)
def test_list_prints_every_shipped_recipe_by_hardware_with_its_whole_description_without_importing_trl(
    tmp_path, module, kind
):
    code = (
        f"import sys; from {module} import main; main(['--list']); print('trl' in sys.modules, 'torch' in sys.modules)"
    )
    done = python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    *lines, imported = done.stdout.strip().splitlines()
    assert imported == "False False"  # answered before anything heavy is imported
    assert lines[0] == "on a CPU (a laptop; minutes):" and "on GPUs:" in lines  # a laptop's recipes first
    cpu = lines[: lines.index("on GPUs:")]
    rows = [line for line in lines if line.startswith("  ") and not line.startswith("   ")]
    names = [row.split()[0] for row in rows]
    assert sorted(names) == sorted(shipped_recipes(kind)) and len(names) >= (30 if kind == "train" else 4)
    assert all(len(line) <= 119 for line in lines) and "…" not in done.stdout  # wrapped, never cut
    text = " ".join(line.strip() for line in lines)
    if kind == "train":
        assert not any(n.startswith(("eval/", "accelerate_configs/")) for n in names)
        assert [line.split()[0] for line in cpu if line.startswith("  ") and not line.startswith("   ")] == [
            f"smollm2_135m_instruct/gsm8k/{n}" for n in ("aer", "aer_async", "aer_rloo", "grpo")
        ]
        assert "chat template) on real GSM8K problems." in text  # the description's whole first sentence
        assert any(
            row.startswith("  qwen3_4b_base/deepscaler/grpo ") and "method 'grpo': Qwen/Qwen3-4B-Base" in row
            for row in rows
        )
    else:
        assert names == ["eval/cpu", "eval/appendix_llama3_1_8b", "eval/appendix_qwen3_30b_a3b", "eval/paper"]


def test_help_is_short_and_names_the_trainers_aer_settings_and_data_sets_without_importing_trl(tmp_path):
    from aer_trl.app.data_names import MATH_TABLES
    from aer_trl.config_docs import AER_GROUPS
    from aer_trl.families import FAMILIES

    done = python(
        "import sys; from aer_trl.app.run import main; main(['--help']); print('trl' in sys.modules)", tmp_path
    )
    assert done.returncode == 0, done.stderr
    *lines, imported = done.stdout.strip().splitlines()
    out = "\n".join(lines)
    assert imported == "False" and out.startswith("usage: aer-train --config NAME|PATH") and len(lines) < 60
    assert "aer-train --config smollm2_135m_instruct/gsm8k/aer" in out and "--help-all" in out
    assert all(f"  {kind} " in out and f.trainer_name in out for kind, f in FAMILIES.items())
    assert all(name in out for names in AER_GROUPS.values() for name in names)
    assert all(name in out for name in MATH_TABLES) and "AER_CPU_THREADS" in out


def test_help_all_prints_every_setting_after_the_usage(capsys):
    from aer_trl.app.run import main

    with pytest.raises(SystemExit):
        main(["--help-all"])
    out = capsys.readouterr().out
    assert out.startswith("usage: aer-train --config NAME|PATH") and "--num_generations" in out and "--aer_rho" in out


def test_recipes_are_found_by_name_from_any_folder_and_a_wrong_name_says_which_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_recipe("eval/paper", "eval").endswith("aer_trl/recipes/eval/paper.yaml")
    assert resolve_recipe("recipes/eval/paper.yaml", "eval") == resolve_recipe("eval/paper", "eval")
    with pytest.raises(FileNotFoundError, match=r"did you mean: qwen3_30b_a3b_base/deepscaler/aer, "):
        resolve_recipe("qwen3_30b_a3b_base/aer")  # a folder's recipes are named
    with pytest.raises(FileNotFoundError, match=r"aer-train --list prints all \d+"):
        resolve_recipe("list")
    with pytest.raises(FileNotFoundError, match=r"eval/paper"):
        resolve_recipe("eval/papr", "eval")
    assert "eval/paper" not in list_recipes("train")


def cli_error(tmp_path, *argv, module="aer_trl.app.run") -> str:
    """What the console script prints for `argv` (it must fail with status 2 and no traceback)."""
    done = python(f"import sys; from {module} import cli; sys.argv[1:] = sys.argv[1:]; cli()", tmp_path, *argv)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "AER_TRACEBACK=1" in done.stderr, done.stderr
    return done.stderr


def test_a_misspelt_key_names_the_closest_setting(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("method: aer\noutput_dir: out\naer_tua: 1.0\nuse_cpu: true\nbf16: false\n")
    err = cli_error(tmp_path, "--config", str(recipe))
    assert err.startswith("aer-train: error: aer_tua: no such setting in a recipe (AERScriptArguments, AERGRPOConfig")
    assert "did you mean aer_tau or " in err
    recipe.write_text("method: aer\noutput_dir: out\nuse_cpu: true\nbf16: false\n")
    assert "aer_rhoo: no such setting" in cli_error(tmp_path, "--config", str(recipe), "--aer_rhoo", "1")  # a flag


def test_an_unknown_recipe_name_and_a_misspelt_data_set_are_answered_at_once(tmp_path):
    err = cli_error(tmp_path, "--config", "smollm2_135m_instruct/gsm8k/aerr")
    assert "did you mean: smollm2_135m_instruct/gsm8k/aer" in err
    recipe = tmp_path / "r.yaml"
    recipe.write_text("method: aer\noutput_dir: out\ndataset_name: gsm8kk\nuse_cpu: true\nbf16: false\n")
    err = cli_error(tmp_path, "--config", str(recipe), "--model_name_or_path", str(tmp_path))
    assert "dataset_name: 'gsm8kk' is no known data set, Hub id or local file; did you mean 'gsm8k'?" in err
    assert "a Hub data set is owner/name" in err and "a local file ends in .jsonl" in err


def test_evaluation_mistakes_name_the_evaluations_own_settings(tmp_path, model_and_bench):
    model, _ = model_and_bench
    err = cli_error(tmp_path, "--models", model, "--benchmarks", "missing.jsonl",
                    module="aer_trl.app.evaluation.__main__")  # fmt: skip
    assert "benchmarks: local file missing.jsonl does not exist" in err and "dataset_name" not in err
    err = cli_error(tmp_path, "--models", "m", "--num_sample", "4", module="aer_trl.app.evaluation.__main__")
    assert "num_sample: no such setting in an evaluation recipe (EvalArguments); did you mean num_samples?" in err


def test_a_bug_keeps_its_traceback_and_the_variable_shows_a_users_one(monkeypatch, capsys):
    with pytest.raises(ZeroDivisionError):
        run_friendly("aer-train", lambda: 1 / 0)  # not a user's mistake: the traceback stays
    with pytest.raises(SystemExit) as exit_info:
        run_friendly("aer-train", lambda: (_ for _ in ()).throw(ValueError("aer_rho must be in [0, 1], got 2")))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("aer-train: error: aer_rho must be in [0, 1], got 2\n")
    monkeypatch.setenv("AER_TRACEBACK", "1")
    with pytest.raises(ValueError, match="aer_rho"):
        run_friendly("aer-train", lambda: (_ for _ in ()).throw(ValueError("aer_rho must be in [0, 1], got 2")))


def test_evaluation_says_where_its_outputs_are(tmp_path, model_and_bench, capsys):
    from aer_trl.app.evaluation.__main__ import main

    model, bench = model_and_bench
    out = tmp_path / "eval"
    main(["--models", model, "--benchmarks", bench, "--output_dir", str(out), "--num_samples", "2", "--k_list", "1",
          "2", "--max_new_tokens", "2"])  # fmt: skip
    printed = capsys.readouterr().out
    assert f"Outputs in {out}: table.md, metrics.json" in printed
    assert json.loads((out / "metrics.json").read_text())


def test_a_hub_id_offline_is_answered_at_once_with_the_known_names(monkeypatch):
    """With HF_HUB_OFFLINE=1 a Hub id that is not in the cache fails at once (no retries), saying why and what names
    and files would do."""
    import time

    from aer_trl.app.data import load_raw_table

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(FileNotFoundError, match=r"dataset_name: 'someone/nothing-here' could not be loaded from the "
                       r"Hub \(HF_HUB_OFFLINE=1: only the local cache is read\).*Known names: aime24"):  # fmt: skip
        load_raw_table("someone/nothing-here")
    assert time.monotonic() - start < 10  # datasets' online retries took 36 s
