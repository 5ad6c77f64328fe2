"""The answer verifier under a suspended job: how many correct answers it scores wrong while stopped and continued.

A child process checks the same 64 correct answers over and over through a `VerifierPool` (two workers, `--limit`
seconds each); this script stops the child's whole process group with SIGSTOP for `--stop` seconds every
`--every` seconds (a cluster's suspend, a paused queue, Ctrl-Z) and prints the statuses of all the checks. Every
answer is correct, so anything but `ok` is a verdict the suspend made wrong.

    python benchmarks/verifier_suspend.py                              # 4 s stops every 5.7 s, limit 5 s
    python benchmarks/verifier_suspend.py --stop 2.5 --every 3.4 --limit 2
    python benchmarks/verifier_suspend.py --package_root ../aer-hard   # another checkout's verifier, for comparison
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

CHILD = """
import collections, json, sys, time
sys.path.insert(0, sys.argv[1])
from aer_trl.app.verifier import VerifierPool
pool = VerifierPool(workers=2, timeout=float(sys.argv[3]))
answers = [{"text": f"\\\\boxed{{{7 * i}}}", "gold": str(7 * i)} for i in range(64)]
pool.check(answers[:2])  # the workers are up
print("ready", flush=True)
counts, end = collections.Counter(), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    counts.update(status for _, status in pool.check(answers))
pool.close()
print(json.dumps(counts), flush=True)
"""


def main() -> None:
    here = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stop", type=float, default=4.0, help="seconds each suspend lasts")
    parser.add_argument("--every", type=float, default=5.7, help="seconds from one suspend to the next")
    parser.add_argument("--limit", type=float, default=5.0, help="the verifier's hard limit per answer, seconds")
    parser.add_argument("--seconds", type=float, default=25.0, help="the child's own checking time (its clock)")
    parser.add_argument("--package_root", default=here, help="the checkout whose aer_trl is measured")
    args = parser.parse_args()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, os.path.abspath(args.package_root), str(args.seconds), str(args.limit)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the pool's workers are stopped with it
    )
    assert child.stdout.readline().strip() == "ready", "the child did not start"
    stops = 0
    while child.poll() is None:
        time.sleep(args.every - args.stop)
        try:
            os.killpg(child.pid, signal.SIGSTOP)
            time.sleep(args.stop)
            os.killpg(child.pid, signal.SIGCONT)
            stops += 1
        except ProcessLookupError:  # it ended meanwhile
            break
    counts = json.loads(child.stdout.read().strip().splitlines()[-1])
    wrong = sum(n for status, n in counts.items() if status != "ok")
    print(
        f"{args.package_root}: {sum(counts.values())} checks of correct answers, {stops} suspends of {args.stop} s "
        f"every {args.every} s, limit {args.limit} s: {counts} -> {wrong} scored wrong"
    )


if __name__ == "__main__":
    main()
