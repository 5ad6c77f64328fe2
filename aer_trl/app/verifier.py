"""Checking model answers against gold answers in worker processes with a hard limit on each check's CPU time.

math-verify's own timeouts use SIGALRM, which works only on a process's main thread and cannot interrupt long C-level
work (a huge integer power, say). Model output can be built to hit either case, and TRL calls reward functions from
other threads. So every check runs in a small pool of worker processes (this file run by itself, JSON lines over
pipes; no `multiprocessing`, so nothing re-imports the user's script, and the worker runs this file alone, without
importing torch or TRL): each answer gets `timeout` seconds of its worker's CPU time, after which that worker is
killed and replaced and the answer scores 0 with status `timeout`. CPU time, not the wall-clock: a worker that could
not run (a busy machine, a suspended job) has not used its time, so a verdict does not depend on the machine's load.
A worker that neither answers nor works is given up after `_BACKSTOP` times the limit on the wall-clock (time in which
the pool's own process stood still not counted). Answers are spread over the workers, so one slow answer does not
hold up the others.

Workers: `AER_VERIFY_WORKERS` (default: min(4, CPU count)). Inside a worker math-verify also runs with its own
timeouts, made to count CPU time there (`_cpu_alarms`), so most pathological inputs end well before the hard limit.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import selectors
import subprocess
import sys
import threading
import time
from collections import deque
from functools import lru_cache

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0  # seconds per answer, hard
_STARTUP_TIMEOUT = 120.0  # importing sympy in a fresh worker; not charged to any answer
_STOOD_STILL = 1.0  # a wait that ends this many seconds after it was due: the pool's process stood still
_BACKSTOP = 10  # x the time limit, on the wall-clock: an answer whose worker neither answers nor works is given up


class _Worker:
    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-u", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        self.buffer = b""
        self.ready = False
        self.task: int | None = None
        self.budget = self.cpu_start = self.look_at = self.deadline = 0.0
        self.started = time.monotonic()
        self._process = None

    def cpu(self) -> float:
        """The worker's CPU time so far (user + system, seconds); infinite once it is gone."""
        import psutil

        try:
            self._process = self._process or psutil.Process(self.proc.pid)
            times = self._process.cpu_times()
        except psutil.Error:
            return math.inf
        return times.user + times.system

    def send(self, task: int, request: dict, timeout: float) -> None:
        now = time.monotonic()
        self.task, self.budget, self.cpu_start = task, timeout, self.cpu()
        self.look_at, self.deadline = now + timeout, now + _BACKSTOP * timeout  # CPU time runs no faster than wall
        self.proc.stdin.write((json.dumps({"id": task, **request}) + "\n").encode())
        self.proc.stdin.flush()

    def late(self, now: float) -> bool:
        """Its answer has used its budget of CPU time (or `_BACKSTOP` times it on the wall-clock), or it did not start
        within `_STARTUP_TIMEOUT`. Its CPU time is read only once the budget could have been used up."""
        if self.task is None:
            return not self.ready and now >= self.started + _STARTUP_TIMEOUT
        if now >= self.deadline:
            return True
        if now < self.look_at:
            return False
        used = self.cpu() - self.cpu_start
        if not used < self.budget:  # also when the worker is gone (inf, or nan if it was gone at `send`)
            return True
        self.look_at = now + self.budget - used
        return False

    def read_lines(self) -> list[dict] | None:
        """Lines the worker has written; None when it has exited."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # already gone
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except Exception:
                pass


class VerifierPool:
    """A pool of verifier processes; `check(requests)` returns one (verdict, status) per request, in order."""

    def __init__(self, workers: int | None = None, timeout: float = DEFAULT_TIMEOUT):
        from aer_trl.hardware import env_count  # here: the worker runs this file alone, outside the package

        self.size = workers or env_count("AER_VERIFY_WORKERS") or min(4, os.cpu_count() or 1)
        self.timeout = timeout
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        for worker in self._workers:
            worker.kill()
        self._workers = []

    def check(self, requests: list[dict], timeout: float | None = None) -> list[tuple[float, str]]:
        if not requests:
            return []
        timeout = self.timeout if timeout is None else timeout
        with self._lock:  # one caller at a time; within a call the answers run in parallel
            return self._run(requests, timeout)

    def _run(self, requests: list[dict], timeout: float) -> list[tuple[float, str]]:
        results: list[tuple[float, str] | None] = [None] * len(requests)
        pending = deque(range(len(requests)))
        entry = time.monotonic()
        for worker in self._workers:  # started by an earlier call (a replacement): its start-up is timed from this
            worker.started = max(worker.started, entry)  # call on, not across whatever the job did in between
        while len(self._workers) < min(self.size, len(requests)):
            self._workers.append(_Worker())
        selector = selectors.DefaultSelector()
        for worker in self._workers:
            selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
        try:
            while pending or any(w.task is not None for w in self._workers):
                for worker in self._workers:
                    if worker.ready and worker.task is None and pending:
                        i = pending.popleft()
                        try:
                            worker.send(i, requests[i], timeout)
                        except (BrokenPipeError, OSError):
                            pending.appendleft(i)
                            self._replace(worker, selector)
                now = time.monotonic()
                waits = [min(w.look_at, w.deadline) - now for w in self._workers if w.task is not None]
                waits += [w.started + _STARTUP_TIMEOUT - now for w in self._workers if not w.ready]
                wait = max(0.0, min(waits)) if waits else 1.0
                self._take(selector.select(timeout=wait), results, selector)
                waited, now = time.monotonic() - now, time.monotonic()
                if waited > wait + _STOOD_STILL:  # this process stood still in its wait (SIGSTOP to the job, a
                    for worker in self._workers:  # cluster's suspend, Ctrl-Z), and most likely its workers with it:
                        worker.deadline += waited  # the wait is not charged to their wall-clock limits
                        worker.started += waited
                # Before a worker is judged late, read what every worker wrote up to `now`: this process may have
                # stood still since the select above (suspended with SIGSTOP or a laptop's sleep, starved on a busy
                # machine), and an answer or a start-up line that came meanwhile is not late; it would have scored
                # a correct answer 0 as `timeout`, or stopped training with "did not start".
                if any(w.late(now) for w in self._workers):
                    self._take(selector.select(timeout=0), results, selector)
                for worker in [w for w in self._workers if w.late(now)]:
                    if not worker.ready:
                        raise RuntimeError("the answer-verifier worker (python -m aer_trl.app.verifier) did not start")
                    results[worker.task] = (0.0, "timeout")
                    self._replace(worker, selector)
        finally:
            selector.close()
            # Left by an exception (Ctrl-C in a notebook): an answer still in flight belongs to no later call, and
            # its reply would land in that call's slot of the same index. Those workers go; the next call starts new.
            for worker in [w for w in self._workers if w.task is not None]:
                worker.kill()
                self._workers.remove(worker)
        return results  # type: ignore[return-value]

    def _take(self, events, results: list, selector) -> None:
        """Read the lines of the workers in `events` (from `selector.select`): start-up lines and answers."""
        for key, _ in events:
            worker = key.data
            lines = worker.read_lines()
            if lines is None:  # the worker died (out of memory, a crash inside sympy...)
                if worker.task is not None:
                    results[worker.task] = (0.0, "error")
                self._replace(worker, selector)
                continue
            for msg in lines:
                if msg.get("ready"):
                    worker.ready = True
                elif msg.get("id") == worker.task:
                    results[worker.task] = (float(msg["verdict"]), msg["status"])
                    worker.task = None

    def _replace(self, worker: _Worker, selector) -> None:
        try:
            selector.unregister(worker.proc.stdout)
        except (KeyError, ValueError):
            pass
        worker.kill()
        fresh = _Worker()
        self._workers[self._workers.index(worker)] = fresh
        selector.register(fresh.proc.stdout, selectors.EVENT_READ, fresh)


_POOL: VerifierPool | None = None
_POOL_LOCK = threading.Lock()


def get_pool() -> VerifierPool:
    """The process-wide pool (started on first use, closed at exit; a forked child starts its own)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or getattr(_POOL, "_pid", None) != os.getpid():
            _POOL = VerifierPool()
            _POOL._pid = os.getpid()  # type: ignore[attr-defined]
            atexit.register(_POOL.close)
        return _POOL


# ----------------------------------------------------------------------------------------------- gold answers
# Digit groups: math-verify reads a space between digits as a product, so `1\,000` (LaTeX's thin space, SI's thousands
# separator) was 1·000 = 0: a model's 1,000 was not credited for a gold 1000, and was for a gold 0.
_DIGIT_SPACING = re.compile(r"(?<=\d)(?:\\[,:; ]|\\thinspace\b ?|~)(?=\d)")  # LaTeX's spaces between two digits
# a run of digit groups separated by single spaces, taken whole (linear: runs never overlap), joined when it is written
# as thousands (`1 000 000`, NFKC's space for U+2009 and U+202F); not after `^` or `_` (`x^2 100` is x²·100)
_SPACED_RUN = re.compile(r"(?<![\d.^_])\d++(?: \d++)++")
_THOUSANDS = re.compile(r"\d{1,3}(?: \d{3})+")


def _join_thousands(match: re.Match) -> str:
    run = match.group()
    return run.replace(" ", "") if _THOUSANDS.fullmatch(run) else run


def join_digit_groups(text: str) -> str:
    """`1\\,000`, `1~000`, `1\\ 000`, `1 000` → `1000`: a LaTeX space between two digits is dropped, and plain spaces
    only in a run written as thousands (`2 3` and `1 0000` stay as they are); any other `~` (LaTeX's unbreakable
    space, which math-verify did not read: `18~\\text{dollars}`, `2~\\frac{1}{2}`) is a space. For gold answers and
    extracted final answers, not whole completions."""
    text = _DIGIT_SPACING.sub("", text).replace("~", " ")
    return _SPACED_RUN.sub(_join_thousands, text) if " " in text else text


_GSM8K_GOLD = re.compile(r"####\s*(.+?)\s*$", re.S)
_ANSWER_LINE = re.compile(r"(?:final\s+)?answer\s*[:：]\s*(.+?)\s*$", re.I | re.S)


_GOLD_TIMEOUT = 5  # seconds: math-verify's own limit on parsing a gold answer
_ANSWER_TIMEOUT = 3  # seconds of CPU time: math-verify's own limits, in a worker, on a parse and on each comparison
_CPU_ALARMS = False  # True in a worker: math-verify's alarms count CPU time there (`_cpu_alarms`)


def _cpu_alarms() -> None:
    """Make math-verify's own timeouts count this process's CPU time (a worker, which runs nothing else). They arm
    `signal.alarm`, a wall-clock timer: a worker suspended mid-check found it run out as it went on and scored a
    correct answer 0 as unparsed. Here `signal.alarm` arms ITIMER_PROF instead, which stands still with the process,
    and its SIGPROF raises math-verify's TimeoutException, as math-verify's SIGALRM handler does."""
    import signal

    from math_verify.errors import TimeoutException

    global _CPU_ALARMS

    def expired(signum, frame):
        raise TimeoutException("Operation timed out!")

    signal.signal(signal.SIGPROF, expired)
    signal.alarm = lambda seconds: math.ceil(signal.setitimer(signal.ITIMER_PROF, seconds)[0])
    _CPU_ALARMS = True


class _NoTimeoutLine(logging.Filter):
    """Drops math-verify's "Timeout is disabled ... you must provide the logic for timeout interruption yourself":
    said where this module parses without math-verify's own limit (off the main thread), which is where the limit is
    this module's (the pool's hard limit on answers; gold answers are trusted data, parsed once): the line would read
    as the opposite of what the package does."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


def _quiet_math_verify() -> None:
    for name in ("math_verify.parser", "math_verify.grader"):
        log = logging.getLogger(name)
        if not any(isinstance(f, _NoTimeoutLine) for f in log.filters):
            log.addFilter(_NoTimeoutLine())


def _parse(text: str, timeout: int) -> list:
    """math-verify's `parse` under its own limit of `timeout` seconds. In a worker that is CPU time (`_cpu_alarms`).
    Off the main thread, where SIGALRM cannot work, there is none (the pool's hard limit applies). On the training
    process's main thread (gold answers: trusted data, parsed once and cached) it is wall-clock: a limit that ran out
    while this thread stood still (a suspended job; its CPU time did not advance) is not a verdict, so the parse runs
    again, up to three times."""
    from math_verify import parse

    if _CPU_ALARMS:
        return parse(text, parsing_timeout=timeout)
    if threading.current_thread() is not threading.main_thread():
        _quiet_math_verify()
        return parse(text, parsing_timeout=None)
    for _ in range(3):
        wall, cpu = time.monotonic(), time.thread_time()
        parsed = parse(text, parsing_timeout=timeout)
        if parsed or time.monotonic() - wall < timeout or time.thread_time() - cpu > timeout / 2:
            break
    return parsed


@lru_cache(maxsize=65536)
def parse_gold(gold: str) -> tuple:
    """Parse a gold answer (`\\boxed{}`, `Answer: X`, GSM8K's `#### X` or a bare expression); () if unparseable."""
    if gold is None:
        return ()
    text = join_digit_groups(str(gold).strip())
    if not text:
        return ()
    match = _GSM8K_GOLD.search(text)
    if match:
        text = match.group(1).replace(",", "")
    elif "\\boxed" not in text:
        match = _ANSWER_LINE.search(text)
        if match:
            text = match.group(1)
    try:
        if "\\boxed" in text or "$" in text:
            parsed = _parse(text, _GOLD_TIMEOUT)
        else:
            parsed = _parse(f"${text}$", _GOLD_TIMEOUT) or _parse(text, _GOLD_TIMEOUT)
    except Exception:
        return ()
    if all(isinstance(x, str) for x in parsed) and not any(ch.isalnum() for x in parsed for ch in x):
        return ()  # only math-verify's string fallback of something with no letters or digits ("???", "-")
    return tuple(parsed)


# ----------------------------------------------------------------------------------------------- worker side
def _verify_one(request: dict) -> tuple[int, str]:
    """One answer against its gold, in a worker: math-verify's own limits (`_ANSWER_TIMEOUT` of CPU time) end a slow
    parse or comparison without losing the worker; the pool's hard limit ends what they cannot interrupt."""
    from math_verify import verify

    gold = parse_gold(request["gold"])
    if not gold:
        return 0, "no_gold"
    text, limit = request["text"], _ANSWER_TIMEOUT
    pred = (_parse(f"${text}$", limit) or _parse(text, limit)) if request.get("latex_wrap") else _parse(text, limit)
    if not pred:
        return 0, "unparsed"
    return (1 if verify(list(gold), pred, timeout_seconds=limit) else 0), "ok"


def _serve() -> None:  # pragma: no cover - runs in the worker process
    logging.disable(logging.CRITICAL)
    _cpu_alarms()  # imports math_verify: before saying ready, so start-up is not charged to an answer

    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            verdict, status = _verify_one(request)
        except Exception:
            verdict, status = 0, "error"
        out.write(json.dumps({"id": request["id"], "verdict": verdict, "status": status}) + "\n")
        out.flush()


if __name__ == "__main__":  # pragma: no cover
    _serve()
