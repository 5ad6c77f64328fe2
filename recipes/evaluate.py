"""Evaluate checkpoints on math benchmarks: pass@k / mean@k, a Table-1 style table, k50 and a pass@k plot.

    python recipes/evaluate.py --config recipes/eval/paper.yaml --models runs/qwen3_4b_base-deepscaler-aer
    python recipes/evaluate.py --models path/to/ckpt --benchmarks my_set.jsonl --num_samples 8 --k_list 1 2 4 8

Interrupted runs resume from `<output_dir>/generations.jsonl`; `--rescore true` re-judges stored generations.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from aer_trl.app.evaluation.__main__ import main  # noqa: E402

if __name__ == "__main__":
    main()
