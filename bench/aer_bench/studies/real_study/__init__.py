"""The real-LLM study: GRPO against AER (and any other method or setting) on SmolLM2-135M-Instruct, the arithmetic
tiers as 2-shot chat questions, over seeds, with held-out pass@k per tier before and after training
(docs/real_llm.md).

    python -m aer_bench.studies.real_study --seeds 0                  # `make real`: one seed of GRPO and AER + figure
    python -m aer_bench.studies.real_study --seeds 0 1 2 --methods grpo aer clip_cov
    python -m aer_bench.studies.real_study --seeds 0 1 2 --aggregate_only
    ... --max_steps 20                                              # any other flag goes to every recipe
    python -m aer_bench.studies.real_study --study results/real_llm/dose/study.yaml results/real_llm/record/study.yaml
    python -m aer_bench.studies.real_study --study results/real_llm/record/study.yaml --aggregate_only   # no training

A study is a set of *arms* (a name, a recipe of `--recipes_dir`, settings over it) trained on the same seeds. With
`--methods`, each method is an arm with its recipe as it is (plus the command's flags). A study file (YAML) says
everything at once and keeps the study's records beside it (with `--study`, `--seeds` and `--methods` pick which of
its cells this queue trains, by seed and arm name; its tables keep every seed and arm):

    title: "Fixed α: what the entropy bonus does to the real model"
    seeds: [0, 1, 2]
    settings: {max_steps: 30}                    # over every arm's recipe
    recipes_dir: ../recipes                      # optional, relative to this file: the studies' own frozen recipes
    reference: grpo                              # paired differences against this arm
    figure: docs/img/real_llm_dose.png           # optional
    arms:
      grpo: {recipe: grpo}
      fixed-0.4: {recipe: aer, settings: {aer_adaptive: false, aer_alpha_init: 0.4, aer_alpha_max: null}}

A registered study whose remaining cells cannot train as registered (say, its precision on another machine) stays as
it was; a `deviation.yaml` beside it, written before any cell of the deviation, names another study file and the
seeds whose pairs that file trains (`study: ../hard_fp32/study.yaml`, `seeds: [32, 33]`). Its queue then leaves those
seeds to that file, and its tables read the primary endpoint over all its seeds, those pairs taken from the other
file (the verdict), with the registered pairs alone and the deviation's alone beside it.

Resumable at every level. A cell (arm × seed) trains in its own process under
`<output_dir>/train/<recipe>-<hash of its settings>/seed<k>/` (the recipe merged with the settings is written there
as `recipe.yaml` and is what trains; two arms of two studies with the same settings share one cell); a killed run
resumes from its newest complete checkpoint; a finished run (`run.json`, written last) is never rerun, and its
checkpoints are deleted (the final model stays). Held-out sampling goes through the evaluation harness into
`<output_dir>/eval/` (fingerprinted store: a killed evaluation resumes exactly). Every model, the untrained one
included, is evaluated on the same held-out problems with the same sampling seeds.

The records: once a cell is trained and evaluated, its compact record (`metrics.jsonl`, `run.json`, `passk.json`,
`recipe.yaml`) is written to `<records>/cells/<arm>/seed<k>/` (`<records>`: the study file's folder, else
`--output_dir`), with the untrained model's `base_passk.json`, and the tables are made from the records alone:
`study.md` (95% Student-t intervals over seeds, differences paired by seed), `study.json` (per cell: arm, seed,
the training summary, `target_distance`, `no_answer_share`, held-out pass@k) and the figure. A cell with a record is
never trained again, on any machine; a record made with other settings than the study now gives is an error.

The package, by responsibility: `spec` (the study file, arms, a cell's identity and folders), `cells` (training a
cell in its own process, held-out evaluation), `records` (a cell's compact record), `queue` (claims and the queue),
`tables` (statistics, `study.md`/`study.json`, docs blocks), `figures` (the figure), `cli` (the command line).
"""

from __future__ import annotations

from .cells import eval_arguments, held_out, train_cell
from .cli import cli, main
from .figures import plot, seed_count, tier_curve
from .queue import claim_cell, run_queue
from .records import evaluation_mismatch, export_record, no_answer_share, read_record, share_record
from .spec import (
    EXECUTION_KEYS,
    KS,
    RECIPES,
    RECORD_FILES,
    STUDY_KEYS,
    TIER_NAMES,
    Arm,
    Deviation,
    Study,
    cell_dir,
    load_deviation,
    load_study,
    parse_flags,
    record_dir,
    settings_hash,
    study_from_flags,
)
from .tables import (
    COLUMNS,
    aggregate,
    cell_summary,
    passk_columns,
    primary_endpoint,
    primary_lines,
    replace_block,
    solve_profile,
    solve_profile_lines,
    tables,
    training_summary,
    update_docs,
)

__all__ = [
    "RECIPES",
    "KS",
    "TIER_NAMES",
    "RECORD_FILES",
    "STUDY_KEYS",
    "parse_flags",
    "Arm",
    "Deviation",
    "Study",
    "EXECUTION_KEYS",
    "settings_hash",
    "load_deviation",
    "load_study",
    "study_from_flags",
    "cell_dir",
    "record_dir",
    "train_cell",
    "eval_arguments",
    "held_out",
    "no_answer_share",
    "evaluation_mismatch",
    "export_record",
    "read_record",
    "share_record",
    "seed_count",
    "tier_curve",
    "plot",
    "training_summary",
    "COLUMNS",
    "passk_columns",
    "primary_endpoint",
    "primary_lines",
    "solve_profile",
    "solve_profile_lines",
    "aggregate",
    "cell_summary",
    "tables",
    "replace_block",
    "update_docs",
    "claim_cell",
    "run_queue",
    "main",
    "cli",
]
