"""Verifiable math reward (SPEC §4): 1.0 / 0.0 by math-verify, None when the gold answer cannot be parsed."""

from __future__ import annotations

import logging
import re
import threading
from functools import lru_cache

from math_verify import parse, verify

# Off the main thread math-verify runs without its SIGALRM timeout and warns on every call; once is enough.
logging.getLogger("math_verify").setLevel(logging.ERROR)

__all__ = ["math_accuracy_reward", "parse_gold", "completion_text"]

_GSM8K_GOLD = re.compile(r"####\s*(.+?)\s*$", re.S)
_ANSWER_LINE = re.compile(r"(?:final\s+)?answer\s*[:：]\s*(.+?)\s*$", re.I | re.S)


def _timeouts() -> dict:
    # math-verify's timeouts use SIGALRM, which only works on the main thread: elsewhere run without one.
    on_main = threading.current_thread() is threading.main_thread()
    return {"parsing_timeout": 5 if on_main else None}


@lru_cache(maxsize=65536)
def parse_gold(gold: str) -> tuple:
    """Parse a gold answer (`\\boxed{}`, `Answer: X`, GSM8K's `#### X` or a bare expression); () if unparseable."""
    if gold is None:
        return ()
    text = str(gold).strip()
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
            parsed = parse(text, **_timeouts())
        else:
            parsed = parse(f"${text}$", **_timeouts()) or parse(text, **_timeouts())
    except Exception:
        return ()
    if all(isinstance(x, str) for x in parsed) and not any(ch.isalnum() for x in parsed for ch in x):
        return ()  # only math-verify's string fallback of something with no letters or digits ("???", "-")
    return tuple(parsed)


def completion_text(completion) -> str:
    """The text of a completion: a plain string, or the assistant contents of a conversational completion."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, list):
        parts = [
            m.get("content", "")
            for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        ]
        return "\n".join(p if isinstance(p, str) else str(p) for p in parts)
    return str(completion)


def _score(text: str, gold: tuple) -> float:
    try:
        pred = parse(text, **_timeouts())
        if not pred:
            return 0.0
        on_main = threading.current_thread() is threading.main_thread()
        return 1.0 if verify(list(gold), pred, timeout_seconds=5 if on_main else None) else 0.0
    except Exception:  # never raise on model output
        return 0.0


def math_accuracy_reward(completions, answer=None, solution=None, **kwargs) -> list[float | None]:
    """TRL reward function: 1.0 when math-verify finds the completion's final answer equal to the gold one.

    The gold comes from the dataset's `answer` column, or else `solution`; a gold that cannot be parsed gives None
    (TRL then leaves the completion out of the group statistics, and AER out of the group accuracy).
    """
    golds = answer if answer is not None else solution
    if golds is None:
        raise ValueError("math_accuracy_reward needs an `answer` or `solution` column in the dataset")
    rewards: list[float | None] = []
    for completion, gold in zip(completions, golds, strict=True):
        parsed_gold = parse_gold(None if gold is None else str(gold))
        rewards.append(None if not parsed_gold else _score(completion_text(completion), parsed_gold))
    return rewards
