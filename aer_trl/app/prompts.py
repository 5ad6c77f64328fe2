"""How a question becomes the prompt a chat model sees: system line, few-shot turns, instruction. One function
(`format_prompt`) serves training (`aer_trl.app.data`) and evaluation (`aer_trl.app.evaluation`), so a model is
evaluated on exactly the format it was trained on.

- A plain-text question becomes `[system?] + shots + user(question + instruction?)`.
- A conversational prompt (a list of `{"role", "content"}` turns) keeps every turn, in order: a system line from
  the format is added only where it has none, the format's shots go after its system turn and before its own
  turns, and the instruction is appended to its last user turn.
- Shots are solved examples `(question, solution)` drawn from a separate pool (`draw_shots`), never from the rows
  being trained or evaluated on (loaders drop rows whose question is a shot), and fixed by `shots_seed`, not by the
  training seed: every seed of a study sees the same shots.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field

__all__ = [
    "BOXED_INSTRUCTION",
    "PromptArguments",
    "PromptFormat",
    "draw_shots",
    "format_prompt",
    "prompt_settings",
    "solved_text",
]

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
_NONE = ("", "none", "null")


@dataclass(frozen=True)
class PromptFormat:
    """A prompt format. `instruction` None means none; `shots` is a tuple of (question, solution) pairs."""

    system: str | None = None
    instruction: str | None = BOXED_INSTRUCTION
    shots: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self):
        for name in ("system", "instruction"):
            value = getattr(self, name)
            if isinstance(value, str) and value.strip().lower() in _NONE:
                object.__setattr__(self, name, None)
        shots = tuple(tuple(s) for s in self.shots)
        bad = [s for s in shots if len(s) != 2 or not all(isinstance(x, str) and x.strip() for x in s)]
        if bad:
            raise ValueError(
                f"prompt shots: each shot is a (question, solution) pair of non-empty texts, got {bad[:2]}"
            )
        object.__setattr__(self, "shots", shots)

    def user_turn(self, question: str) -> str:
        question = question.strip()
        return question if self.instruction is None else f"{question}\n\n{self.instruction}"

    def summary(self) -> str:
        parts = [f"{len(self.shots)}-shot chat" if self.shots else "zero-shot chat"]
        parts.append(f"system line {json.dumps(self.system)}" if self.system else "no system line")
        parts.append(f"instruction {json.dumps(self.instruction)}" if self.instruction else "no instruction")
        return ", ".join(parts)


def format_prompt(question, fmt: PromptFormat) -> list[dict]:
    """The conversational prompt for `question` (text, or a conversation whose turns are all kept)."""
    shot_turns = []
    for q, solution in fmt.shots:
        shot_turns += [{"role": "user", "content": fmt.user_turn(q)}, {"role": "assistant", "content": solution}]
    if isinstance(question, list):
        turns = [dict(m) for m in question]
        bad = [m for m in turns if not isinstance(m, dict) or "role" not in m or "content" not in m]
        if bad:
            raise ValueError(f"prompt: a conversation is a list of {{'role', 'content'}} turns, got {bad[0]!r}")
        head = [turns.pop(0)] if turns and turns[0]["role"] == "system" else []
        if not head and fmt.system:
            head = [{"role": "system", "content": fmt.system}]
        last_user = max((i for i, m in enumerate(turns) if m["role"] == "user"), default=None)
        if last_user is None:
            raise ValueError("prompt: the conversation has no user turn to answer")
        turns[last_user]["content"] = fmt.user_turn(str(turns[last_user]["content"]))
        return head + shot_turns + turns
    head = [{"role": "system", "content": fmt.system}] if fmt.system else []
    return head + shot_turns + [{"role": "user", "content": fmt.user_turn(str(question))}]


_GSM8K_FINAL = re.compile(r"\n?####\s*(.+?)\s*$", re.S)
_CALC = re.compile(r"<<[^>]*>>")


def solved_text(solution: str, answer: str | None = None) -> str:
    """A solved example's assistant turn ending in `The answer is \\boxed{...}.`: a GSM8K-style solution's
    `#### N` line (and its `<<calculator>>` marks) is rewritten; a bare answer becomes the whole turn."""
    solution = _CALC.sub("", solution.strip())
    match = _GSM8K_FINAL.search(solution)
    if match:
        body, final = solution[: match.start()].strip(), match.group(1).replace(",", "").strip()
        return f"{body}\nThe answer is \\boxed{{{final}}}." if body else f"The answer is \\boxed{{{final}}}."
    if "\\boxed" in solution:
        return solution
    final = (answer if answer is not None else solution).strip()
    return (
        f"The answer is \\boxed{{{final}}}." if solution == final else f"{solution}\nThe answer is \\boxed{{{final}}}."
    )


def draw_shots(pool: list[tuple[str, str]], k: int, seed: int = 0) -> tuple[tuple[str, str], ...]:
    """`k` solved examples from `pool`, the same for a given `seed` (not the training seed)."""
    if k < 0:
        raise ValueError(f"prompt_num_shots must be >= 0, got {k}")
    if k == 0:
        return ()
    unique = list(dict.fromkeys((q.strip(), s.strip()) for q, s in pool))
    if len(unique) < k:
        raise ValueError(f"prompt_num_shots={k}: the shot pool has only {len(unique)} solved examples")
    return tuple(random.Random(seed).sample(unique, k))


@dataclass
class PromptArguments:
    """The prompt format, shared by training (`AERScriptArguments`) and evaluation (`EvalArguments`). Unset fields
    take the data source's defaults (`docs/real_llm.md` for the arithmetic source's)."""

    prompt_system: str | None = field(
        default=None,
        metadata={"help": "System line of every prompt; 'none' for none. Unset: the data source's default."},
    )
    prompt_instruction: str | None = field(
        default=None,
        metadata={
            "help": "Instruction appended to every question (and to each shot's question); 'none' for none. Unset: "
            "the data source's default (math data: the step-by-step \\boxed{} instruction)."
        },
    )
    prompt_num_shots: int | None = field(
        default=None,
        metadata={
            "help": "Few-shot examples (user/assistant turns) before the question, drawn from prompt_shots_pool, "
            "never from the rows trained or evaluated on. Unset: the data source's default (0 for math data)."
        },
    )
    prompt_shots_pool: str | None = field(
        default=None,
        metadata={
            "help": "Where shots come from: a data set name, Hub id or local file with question/answer columns "
            "(answers like GSM8K's '#### N' are rewritten to end in \\boxed{N}). Unset: the source's own pool."
        },
    )
    prompt_shots_seed: int = field(
        default=0,
        metadata={
            "help": "Which shots are drawn from the pool; independent of the training seed, so every seed of "
            "a study sees the same shots."
        },
    )


def prompt_settings(source) -> dict:
    """The `PromptArguments` fields set on `source` (an object with those attributes, or a dict such as a recipe)."""
    from dataclasses import fields

    get = source.get if isinstance(source, dict) else (lambda k, d=None: getattr(source, k, d))
    return {f.name: get(f.name) for f in fields(PromptArguments) if get(f.name) is not None}
