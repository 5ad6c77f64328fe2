"""The bench's test builders over the library's (`tests.helpers`): its config (`BenchConfig`, with the research
variants' and CPU speed-ups' fields) and its trainer (`BenchGRPOTrainer`) on the same tiny model and prompts."""

from __future__ import annotations

import functools

from aer_bench.training import BenchConfig, BenchGRPOTrainer
from tests import helpers

make_bench_config = functools.partial(helpers.make_config, config_class=BenchConfig)
make_trainer = functools.partial(helpers.make_trainer, trainer_class=BenchGRPOTrainer)
