"""Where a completion's entropy sits, token by token (docs/real_llm.md, "Which tokens carry the entropy"). Pure
functions: logits and text in, numbers and class names out.

- `entropy_and_gradient(logits)`: each position's entropy H = −Σ p log p and the norm of H's gradient with respect
  to the logits, ∂H/∂z_k = −p_k (log p_k + H): how hard an entropy bonus pushes on that position's distribution.
- `token_classes(pieces)`: each token of a completion as `answer` (inside the last `\\boxed{...}`), `markup` (the
  `\\boxed{` and `}` around it), `working` (digits and operators before it), `words` (everything else) or `end`
  (the end-of-turn token).
"""

from __future__ import annotations

import torch

__all__ = ["CLASSES", "REPORTED", "entropy_and_gradient", "token_classes", "tokens_table"]

CLASSES = ("answer", "markup", "working", "words", "end")
REPORTED = ("answer", "markup", "working", "words")  # a stored completion does not say where it ended
BOX = "\\boxed{"
_WORKING = set("0123456789+-*×/=().,")


def entropy_and_gradient(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., V) logits → (...) entropy in nats and (...) L2 norm of the entropy's gradient with respect to the
    logits (a temperature, if any, is applied by the caller)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    entropy = -(p * logp).sum(-1)
    grad = -p * (logp + entropy.unsqueeze(-1))
    return entropy, grad.norm(dim=-1)


def token_classes(pieces: list[str], end_token: str | None = None) -> list[str]:
    """The class of each token of a completion, given each token's text (`pieces`, in order; their concatenation is
    the completion). A token that straddles two classes takes the first of answer, markup, working, words."""
    text = "".join(pieces)
    start = text.rfind(BOX)
    if start >= 0:
        close = text.find("}", start + len(BOX))
        close = len(text) if close < 0 else close
        answer = (start + len(BOX), close)
        markup = [(start, start + len(BOX)), (close, min(close + 1, len(text)))]
    else:
        answer, markup = (0, 0), []
    classes, pos = [], 0
    for piece in pieces:
        span = (pos, pos + len(piece))
        pos = span[1]

        def overlaps(a, b):
            return a[0] < b[1] and b[0] < a[1]

        if end_token is not None and piece == end_token:
            classes.append("end")
        elif overlaps(span, answer):
            classes.append("answer")
        elif any(overlaps(span, m) for m in markup):
            classes.append("markup")
        elif piece.strip() and set(piece.strip()) <= _WORKING and (start < 0 or span[1] <= start):
            classes.append("working")
        else:
            classes.append("words")
    return classes


def tokens_table(data: dict, order: list[str] | None = None) -> str:
    """Markdown from a tokens JSON: per model, each class's share of the tokens, of the entropy and of the bonus's
    gradient, and its mean entropy per token. Rows in `order` (names not in it after, as stored)."""
    lines = [
        f"Per-token entropy by token class, seed {data['seed']}: the first {data['samples']} stored held-out "
        "completions of each problem, read back through each model. Shares of the tokens / of the summed entropy / "
        "of the summed norm of the entropy's gradient (the bonus's push); mean entropy per token in nats.",
        "",
        "| model | " + " | ".join(f"{c}: tokens / H / ∇H share, mean H" for c in REPORTED) + " |",
        "|---" * (len(REPORTED) + 1) + "|",
    ]
    rank = {name: i for i, name in enumerate(order or [])}
    for name, sums in sorted(data["models"].items(), key=lambda item: rank.get(item[0], len(rank))):
        total = {k: sum(s[k] for s in sums.values()) or 1.0 for k in ("tokens", "entropy", "gradient")}
        cells = []
        for c in REPORTED:
            s = sums[c]
            mean = s["entropy"] / s["tokens"] if s["tokens"] else float("nan")
            cells.append(
                f"{100 * s['tokens'] / total['tokens']:.0f}% / {100 * s['entropy'] / total['entropy']:.0f}% / "
                f"{100 * s['gradient'] / total['gradient']:.0f}%, {mean:.3f}"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
