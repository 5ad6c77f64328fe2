"""The bench's CPU speed-ups under DeepSpeed ZeRO-3 on two processes (gloo): the shared prompt forward through the
DeepSpeed engine (its `.config` is a dict: an H200 bug) and the shared prefill inside TRL's ZeRO-3 gathering, with
AER's groups split across ranks and α in lockstep (the library's own run: tests/test_distributed.py)."""

import pytest

from tests.test_distributed import ZERO3, check_group_accuracy_and_lockstep, launch

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_two_processes_deepspeed_zero3_with_the_shared_prompt_paths(tmp_path):
    ranks = launch(
        tmp_path,
        *ZERO3,
        script_args=["--max_steps", "3", "--share_prompt_forward", "true", "--share_prompt_generation", "true"],
    )
    assert ranks[0]["deepspeed"] and ranks[0]["sharded"] and ranks[1]["sharded"]
    assert ranks[0]["shared_forwards"] > 0 and ranks[1]["shared_forwards"] > 0
    assert ranks[0]["shared_rollouts"] == ranks[1]["shared_rollouts"] == 3
    check_group_accuracy_and_lockstep(ranks)
