"""A parent that spawns one worker the way the evaluation's data-parallel runner does, then waits; the test kills the
parent on its own. `watch`: the worker calls `exit_with_parent` first, as `_shard_worker` does."""

import multiprocessing as mp
import sys
import time


def worker(watch: bool, ready) -> None:
    if watch:
        from aer_trl.app.evaluation.plan import exit_with_parent

        exit_with_parent(grace_s=5.0)
    ready.set()
    time.sleep(120)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=worker, args=(sys.argv[1] == "watch", ready))
    proc.start()
    ready.wait(120)
    print(proc.pid, flush=True)
    time.sleep(120)
