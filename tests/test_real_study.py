"""aer_trl.studies.real_study without training: where a cell lives and what its held-out evaluation samples with."""

from types import SimpleNamespace

from aer_trl.studies import real_study


def _args(tmp_path, *flags):
    return SimpleNamespace(
        recipes_dir=str(real_study.RECIPES),
        methods=["grpo", "aer"],
        output_dir=str(tmp_path),
        eval_samples=16,
        eval_per_tier=16,
        recipe_overrides=list(flags),
    )


def test_a_recipe_flag_is_a_new_cell(tmp_path):
    plain = real_study.cell_dir("aer", 0, _args(tmp_path))
    assert plain == real_study.cell_dir("aer", 0, _args(tmp_path))
    assert plain.parent != real_study.cell_dir("aer", 0, _args(tmp_path, "--aer_tau", "0.3")).parent
    assert plain.name == "seed0" and real_study.cell_dir("aer", 1, _args(tmp_path)).parent == plain.parent


def test_the_evaluation_samples_in_the_format_and_budget_the_cells_trained_with(tmp_path):
    plain = real_study.eval_arguments(_args(tmp_path), ["m"])
    assert plain.max_new_tokens == 24 and plain.prompt_num_shots == 2 and "\\boxed{}" in plain.prompt_system
    flagged = real_study.eval_arguments(
        _args(tmp_path, "--max_completion_length", "48", "--prompt_num_shots", "1"), ["m"]
    )
    assert flagged.max_new_tokens == 48 and flagged.prompt_num_shots == 1  # a study flag reaches the evaluation
    assert flagged.top_k == 0 and flagged.temperature == 1.0  # TRL samples the full distribution
