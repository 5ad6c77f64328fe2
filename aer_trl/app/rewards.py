"""Verifiable math reward: 1.0 / 0.0 by math-verify, None when the gold answer cannot be parsed.

What counts as the final answer (the policy; docs/design.md says why):

- The answer format is the one the prompt asks for: `answer_format` when given (an argument or a dataset column),
  else read from the prompt (all of a conversation's messages; `\\boxed` → "boxed", `<answer>` → "answer_tag",
  `####` → "gsm8k" unless it is a markdown heading such as `#### Problem`, `Answer:` → "answer"), else "boxed"
  (every loader of `aer_trl.app.data` asks for `\\boxed{}`).
- "boxed": the answer is the content of the **last** `\\boxed{...}` (or `\\fbox{...}`) with balanced braces. A
  completion without one, or whose last one is cut off before its closing brace, is not credited.
- "answer_tag" (open-r1's and TRL's examples' `<think>...</think><answer>...</answer>`): the content of the **last**
  `<answer>...</answer>` (any case), or the last `\\boxed{}` inside it; a last one cut off before its closing tag is
  not credited.
- "answer": the rest of the last line that starts with `Answer:` (or `Final answer:`); "gsm8k": the rest of the last
  line starting with `####` (after the marker, blank lines are skipped). Without that line: not credited; a last marker
  with nothing after it (a completion cut off there) is not skipped over either: not credited, counted as unparsed.
  A completion cut off by the length limit (`completion_truncated`, which `AERGRPOTrainer` gives every reward function)
  whose last marker line runs to its end is not credited either (counted as unparsed): the cut may fall inside the
  answer (`#### 1` of `#### 12`), unless that answer is a complete `\\boxed{}`. A boxed answer needs its closing
  brace, so a cut one is never read.
  Markdown around the marker or the answer (`**Answer:** 18`, `- **Answer**: 18`, `Answer: **18**`, code ticks), a
  final full stop, dollar signs and `\\[...\\]` / `\\(...\\)` around the answer are taken off. Finding the marker is
  linear in the completion's length, whatever the model writes.
- `credit_unmarked=True` (opt-in) falls back, for completions without the marker, to math-verify's own extraction over
  the last 2,000 characters (the loose policy of many graders: "the last number wins", truncated text included).

Before parsing, the text is normalised: superscripts become an exponent (`3²` → `3^{2}`, `2ⁿ⁺¹` → `2^{n+1}`; NFKC alone
would read 32 and 2n+1), subscripts a subscript (`1010₂` → `1010_{2}`) and vulgar fractions a `\\frac` (`2½` →
`2\\frac{1}{2}`, a mixed number), then NFKC (fullwidth digits and letters), every Unicode decimal digit mapped to ASCII
(Arabic-Indic and others), zero-width characters and soft hyphens removed. Answer-choice wrappers such as
`\\textbf{(C)}\\ 12` or `(C) 12` are reduced to what follows the letter (or the letter alone). Digit groups are joined
in the extracted answer and the gold (`1\\,000`, `1~000`, `1 000` → `1000`; math-verify reads a space between digits as
a product: `1\\,000` was 0; any other `~` is a space), and a full stop after a boxed number dropped
(`\\boxed{18.}`). The extracted answer is bounded (`MAX_ANSWER_CHARS`): longer ones are not credited. Checking runs
in worker processes with a hard limit on each completion's CPU time on every thread (`aer_trl.app.verifier`), so no
model output can hang or crash the caller.

Timeouts, unparseable answers and missing markers are counted: `judge_completions` returns the counts with the
verdicts (the evaluation harness writes them to `metrics.json`), and in training `math_accuracy_reward` logs them
through TRL's `log_metric` as `rewards/math_accuracy/{timeouts,unparsed,unmarked}` (shares of the completions judged).
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping

from ..plugins import Registry
from .verifier import get_pool, join_digit_groups, parse_gold

__all__ = [
    "math_accuracy_reward",
    "register_reward",
    "get_reward",
    "rewards",
    "resolve_reward_funcs",
    "parse_gold",
    "completion_text",
    "extract_answer",
    "judge_completions",
    "normalize_text",
]

ANSWER_FORMATS = ("boxed", "answer", "gsm8k", "answer_tag")
# The answer checker's version, stored with every verdict the evaluation store keeps: verdicts of another version are
# judged again when scored. Raise it with any change that can turn a verdict (2: digit groups and `~`,
# `\\boxed{18.}`, markdown around answer lines; 3: the evaluation reads the format its prompt asks for, answer tags).
JUDGE_VERSION = 3
MAX_ANSWER_CHARS = 1000
UNMARKED_TAIL_CHARS = 2000

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_BOX = re.compile(r"\\(?:boxed|fbox)")
_FULL_STOP = re.compile(r"(?<=\d)\.$")


def _scripts(kind: str) -> dict[str, str]:
    """Unicode's superscript (`<super>`) or subscript (`<sub>`) characters of the BMP → what NFKC makes of them."""
    table = {}
    for code in range(0x80, 0x10000):
        parts = unicodedata.decomposition(chr(code)).split()
        if len(parts) == 2 and parts[0] == kind:
            table[chr(code)] = chr(int(parts[1], 16))
    return table


# superscript and subscript runs: NFKC alone glues them to what comes before (3² → 32, xⁿ → xn, 1010₂ → 10102)
_SUPER, _SUB = _scripts("<super>"), _scripts("<sub>")
_SCRIPTS = str.maketrans({**_SUPER, **_SUB})
_SCRIPT_RUN = re.compile(f"[{re.escape(''.join(_SUPER))}]+|[{re.escape(''.join(_SUB))}]+")
_VULGAR_FRACTION = re.compile("[\u00bc-\u00be\u2150-\u215e]")  # ¼ ½ ¾ ⅐ … ⅞: NFKC gives 1⁄2 (a fraction slash)
# Possessive `*+` throughout: whitespace is never given back, so a wrapper followed by a long run of spaces fails in
# linear time (`\textbf{` + n spaces took O(n²) steps with `\s*\(?\s*`).
_CHOICE = re.compile(
    r"^\s*+(?:\\text(?:bf|rm|normal)?\s*+\{\s*+\(?\s*+([A-E])\s*+\)?\s*+\}|\(\s*+([A-E])\s*+\))"
    r"((?:\\[ ,;:!]|~|\s)*+)(.*)$",
    re.S,
)
# The marker, the whitespace after it (never given back: `*+`), then the rest of that line, stripped in code: linear in
# the completion's length (a lazy `(.+?)\s*$` is quadratic in a run of spaces a model can emit).
_ANSWER_MARK = re.compile(r"(?im)^[ \t>*_#-]*(?:final\s+)?answer[*_]*+\s*[:：]\s*+([^\n]*)")  # `**Answer**:` too
_GSM8K_MARK = re.compile(r"(?m)####\s*+([^\n]*)")
# `####` alone (not in `#####`), and what stands before it on its line and the first thing after it
_HASHES = re.compile(r"(?m)^([ \t]*+)(?<!#)####(?!#)[ \t]*+([A-Za-z]?)|(?<!#)####(?!#)")
_TAG_OPEN, _TAG_CLOSE = re.compile(r"(?i)<answer>"), re.compile(r"(?i)</answer>")  # open-r1's `<answer>...</answer>`
_EMPHASIS = " \t*_`"  # markdown emphasis and code ticks around a marker line's answer

STAT_KEYS = ("timeouts", "unparsed", "unmarked")


def _script(match: re.Match) -> str:
    """A superscript run as an exponent, a subscript run as a subscript."""
    plain = match.group().translate(_SCRIPTS)
    before = match.string[max(0, match.start() - 2) : match.start()]
    if before.endswith(("^", "_", "^{", "_{")):  # already an exponent or subscript in LaTeX (x^², x^{²})
        return plain
    return ("^{" if match.group()[0] in _SUPER else "_{") + plain + "}"


def _vulgar_fraction(match: re.Match) -> str:
    numerator, denominator = unicodedata.normalize("NFKC", match.group()).split("\u2044")
    return f"\\frac{{{numerator}}}{{{denominator}}}"


def normalize_text(text: str) -> str:
    """Superscripts → an exponent (`3²` → `3^{2}`, not NFKC's `32`) and subscripts → a subscript (`1010₂` →
    `1010_{2}`), vulgar fractions → `\\frac` (`2½` → `2\\frac{1}{2}`, a mixed number to math-verify), then
    NFKC, Unicode decimal digits → ASCII, zero-width characters and soft hyphens removed."""
    if not text.isascii():
        text = _VULGAR_FRACTION.sub(_vulgar_fraction, _SCRIPT_RUN.sub(_script, text))
    text = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH)
    if text.isascii():
        return text
    return "".join(str(unicodedata.decimal(c)) if not c.isascii() and c.isdecimal() else c for c in text)


def _last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` with balanced braces; None when there is none or it is cut off."""
    starts = [m.start() for m in _BOX.finditer(text)]
    for start in reversed(starts):  # the last one that is complete; a cut-off last box is not skipped over
        i = _BOX.match(text, start).end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i >= len(text) or text[i] != "{":
            return None
        depth = 0
        for j in range(i, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j]
        return None
    return None


def _last_tagged(text: str) -> str | None:
    """Content of the last `<answer>...</answer>`; None when there is none or it is cut off before its closing tag."""
    opened = list(_TAG_OPEN.finditer(text))
    closed = _TAG_CLOSE.search(text, opened[-1].end()) if opened else None
    return None if closed is None else text[opened[-1].end() : closed.start()]


def _unwrap(answer: str) -> str:
    """A marker line's answer without what a chat model writes around it: markdown emphasis or code ticks (`**18**`,
    `` `18` ``), a final full stop, dollar signs, or display-math delimiters (`\\[18\\]`, `\\(18\\)`); math-verify read
    `**18**` and `\\[18\\]` as no number."""
    answer = answer.strip(_EMPHASIS).rstrip(".").strip(_EMPHASIS).strip("$").strip()
    for opening, closing in (("\\[", "\\]"), ("\\(", "\\)")):
        if answer.startswith(opening) and answer.endswith(closing) and len(answer) >= 4:
            return answer[2:-2].strip()
    return answer


def _strip_choice(answer: str) -> str:
    """`\\textbf{(C)}\\ 12` / `(C) 12` → `12`; `\\textbf{(C)}` alone → `C`."""
    match = _CHOICE.match(answer)
    if not match:
        return answer
    rest = match.group(4).strip()
    return rest if rest else (match.group(1) or match.group(2))


def _message_text(value, roles: tuple[str, ...] | None = None) -> str:
    """The text of a plain string, a message, or a conversation's messages of `roles` (None: all; a message without a
    role counts as the assistant's), with the text parts of multimodal contents."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    messages = value if isinstance(value, list) else [value]
    parts = []
    for m in messages:
        if not isinstance(m, dict) or (roles is not None and m.get("role", "assistant") not in roles):
            continue
        content = m.get("content") or ""  # None in a tool-call turn
        if isinstance(content, list):  # [{"type": "text", "text": ...}, {"type": "image"}, ...]
            content = "\n".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in content)
        parts.append(content if isinstance(content, str) else str(content))
    return "\n".join(parts)


def infer_answer_format(prompt) -> str:
    """The answer format a prompt asks for; a markdown heading (`#### Problem` on a line of its own) is not GSM8K's
    marker, while `#### 72` (a solved example), `'#### <number>'` and an inline `####` are."""
    text = _message_text(prompt)  # every turn: the instruction is in a user or system turn, a solved example anywhere
    if "\\boxed" in text:
        return "boxed"
    if _TAG_OPEN.search(text):
        return "answer_tag"
    if any(not (m.group(1) is not None and m.group(2)) for m in _HASHES.finditer(text)):
        return "gsm8k"  # a `####` that is not a heading (at a line's start, followed by a word)
    if re.search(r"(?i)answer\s*:", text):
        return "answer"
    return "boxed"


def extract_answer(text: str, answer_format: str = "boxed", cut: bool = False) -> str | None:
    """The final answer of a completion under `answer_format`, normalised; None when the completion has none. `cut`:
    the completion was cut off by the length limit, so a marker line that runs to its end gives "" (no answer) unless
    its answer is a complete `\\boxed{}`."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
    text = normalize_text(text)
    if answer_format == "boxed":
        answer = _last_boxed(text)
        if answer is not None:  # `\\boxed{18.}`: a full stop inside the box, read by math-verify as no number
            answer = _FULL_STOP.sub("", answer.strip())
    else:
        runs_to_end = False  # the answer line reaches the end of the text (a tag's answer is closed by its tag)
        if answer_format == "answer_tag":
            answer = _last_tagged(text)
        else:
            matches = list((_GSM8K_MARK if answer_format == "gsm8k" else _ANSWER_MARK).finditer(text))
            answer = matches[-1].group(1).rstrip() if matches else None
            runs_to_end = bool(matches) and matches[-1].end() == len(text)
            if answer is not None and answer_format == "gsm8k":
                answer = answer.replace(",", "")
        if answer is not None:
            answer = _unwrap(answer)
            inner = _last_boxed(answer)
            if inner is None and cut and runs_to_end:  # the cut may fall inside the answer
                answer = ""
            answer = answer if inner is None else inner
    if answer is None:
        return None
    return _strip_choice(join_digit_groups(answer.strip()))


def completion_text(completion) -> str:
    """The text of a completion: a plain string, or the assistant contents of a conversational completion."""
    return _message_text(completion, roles=("assistant",))


def _per_item(value, n: int) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value] * n


def math_accuracy_reward(
    completions,
    answer=None,
    solution=None,
    prompts=None,
    answer_format=None,
    credit_unmarked: bool = False,
    log_metric=None,
    completion_truncated=None,
    **kwargs,
) -> list[float | None]:
    """TRL reward function: 1.0 when math-verify finds the completion's final answer equal to the gold one.

    The gold comes from the dataset's `answer` column, or else `solution`; a gold that cannot be parsed gives None
    (TRL then leaves the completion out of the group statistics, and AER out of the group accuracy). The final answer
    is the one the prompt asks for (see the module docstring): by default the last complete `\\boxed{}`; the text
    before parsing is at most that answer (≤ `MAX_ANSWER_CHARS`), or with `credit_unmarked=True` the last
    `UNMARKED_TAIL_CHARS` characters of a completion without the marker. Never raises on model output and never takes
    more than the verifier's hard limit (5 s) per completion, on any thread. With TRL's `log_metric` (training), the
    shares of timeouts, unparsed answers and missing markers are logged as `rewards/math_accuracy/<count>`.
    `completion_truncated` (one bool per completion; `AERGRPOTrainer` passes it): which completions the length limit
    cut off, whose marker answer at the very end is then not credited (the module docstring says why).
    """
    rewards, counts = judge_completions(
        completions, answer, solution, prompts, answer_format, credit_unmarked, completion_truncated
    )
    if log_metric is not None and counts["judged"]:
        for key in STAT_KEYS:
            log_metric(f"rewards/math_accuracy/{key}", counts.get(key, 0) / counts["judged"])
    return rewards


def judge_completions(
    completions,
    answer=None,
    solution=None,
    prompts=None,
    answer_format=None,
    credit_unmarked: bool = False,
    truncated=None,
) -> tuple[list[float | None], Counter]:
    """`math_accuracy_reward`'s verdicts and its counts: judged, no_gold, timeouts, unparsed, unmarked."""
    golds = answer if answer is not None else solution
    if golds is None:
        raise ValueError("math_accuracy_reward needs an `answer` or `solution` column in the dataset")
    golds = list(golds)
    n = len(golds)
    if len(completions) != n:
        raise ValueError(f"math_accuracy_reward: {len(completions)} completions but {n} gold answers")
    formats = _per_item(answer_format, n)
    prompt_list = _per_item(prompts, n)
    credit = _per_item(credit_unmarked, n)
    cut = _per_item(truncated, n)

    rewards: list[float | None] = [0.0] * n
    requests, slots = [], []
    counts = Counter(judged=n)
    for i, (completion, gold) in enumerate(zip(completions, golds)):
        gold = None if gold is None else str(gold)
        if not parse_gold(gold):
            rewards[i] = None
            counts["no_gold"] += 1
            continue
        fmt = formats[i] or infer_answer_format(prompt_list[i])
        text = completion_text(completion)
        extracted = extract_answer(text, fmt, cut=bool(cut[i]))
        if extracted is None:
            if not credit[i]:
                counts["unmarked"] += 1
                continue
            requests.append({"text": normalize_text(text[-UNMARKED_TAIL_CHARS:]), "gold": gold})
        elif len(extracted) > MAX_ANSWER_CHARS or not extracted:
            counts["unparsed"] += 1
            continue
        else:
            wrapped = f"\\boxed{{{extracted}}}" if fmt == "boxed" else extracted
            requests.append({"text": wrapped, "gold": gold, "latex_wrap": fmt != "boxed"})
        slots.append(i)
    for i, (verdict, status) in zip(slots, get_pool().check(requests)):
        rewards[i] = verdict
        if status != "ok":
            counts["timeouts" if status == "timeout" else "unparsed"] += 1
    return rewards, counts


# Reward functions a recipe names (`reward_funcs`); more are added with `register_reward` (or an `aer_trl.rewards`
# entry point), or named by import path.
REWARDS: Registry[Callable] = Registry("reward", field="reward_funcs", group="aer_trl.rewards", check=callable)
REWARDS.register(math_accuracy_reward, name="math_accuracy")  # one name: TRL logs it by __name__, recipes name this


def register_reward(func: Callable, *, name: str | None = None, replace: bool = False) -> Callable:
    """Makes `func` known to recipes as `name` (default: its `__name__`; `reward_funcs: [name]`); `aer_trl.plugins`."""
    return REWARDS.register(func, name=name, replace=replace)


def get_reward(name: str) -> Callable:
    """The registered reward function `name`."""
    return REWARDS.get(name)


def rewards() -> Mapping[str, Callable]:
    """The registered reward functions by name (a read-only view)."""
    return REWARDS.view()


def resolve_reward_funcs(names: list[str]) -> list:
    """The functions `names` stand for: registered names or import paths 'module.function' (from the working folder
    too); an unknown name is an error that lists the known ones."""
    funcs = []
    for name in names:
        if name in REWARDS:
            funcs.append(REWARDS.get(name))
        elif "." in name:
            module_path, func_name = name.rsplit(".", 1)
            sys.path.insert(0, os.getcwd())
            try:
                funcs.append(getattr(importlib.import_module(module_path), func_name))
            except (ImportError, AttributeError) as err:
                raise ValueError(f"reward_funcs: cannot import {name!r}: {err}") from err
        else:
            close = difflib.get_close_matches(name, list(REWARDS.view()), n=1, cutoff=0.5)
            raise ValueError(
                f"reward_funcs: unknown reward {name!r}; known: {sorted(REWARDS.view())} or 'module.func'"
                + (f" (did you mean {close[0]!r}?)" if close else "")
            )
    if not funcs:
        raise ValueError("reward_funcs: at least one reward function is needed")
    return funcs
