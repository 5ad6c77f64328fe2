"""aer_bench.analysis: per-token entropy and its gradient, hand-computed; token classes of a completion."""

import math

import torch

from aer_bench.analysis import REPORTED, entropy_and_gradient, token_classes, tokens_table


def test_entropy_and_gradient_hand_computed():
    # two equal logits: p = (1/2, 1/2), H = ln 2, ∂H/∂z_k = −p_k(log p_k + H) = 0 (the maximum of H over 2 outcomes)
    h, g = entropy_and_gradient(torch.tensor([[0.0, 0.0]]))
    assert math.isclose(h.item(), math.log(2), rel_tol=1e-6) and abs(g.item()) < 1e-7
    # p = (0.8, 0.2): H = −(.8 ln .8 + .2 ln .2) = 0.500402; grad = (−.8(ln .8 + H), −.2(ln .2 + H))
    z = torch.tensor([math.log(0.8), math.log(0.2)])
    h, g = entropy_and_gradient(z)
    H = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
    grad = [-0.8 * (math.log(0.8) + H), -0.2 * (math.log(0.2) + H)]
    assert math.isclose(h.item(), H, rel_tol=1e-6)
    assert math.isclose(g.item(), math.hypot(*grad), rel_tol=1e-5)
    # the gradient matches autograd's
    zz = z.clone().requires_grad_(True)
    p = torch.softmax(zz, -1)
    (-(p * p.log()).sum()).backward()
    assert math.isclose(zz.grad.norm().item(), g.item(), rel_tol=1e-5)


def test_token_classes_of_a_boxed_completion():
    pieces = ["7", "+", "5", " =", " 12", ".", " The", " answer", " is", " \\", "boxed", "{", "1", "2", "}.", "<end>"]
    classes = token_classes(pieces, end_token="<end>")
    assert classes == [
        "working", "working", "working", "working", "working", "working", "words", "words", "words",
        "markup", "markup", "markup", "answer", "answer", "markup", "end",
    ]  # fmt: skip


def test_token_classes_without_a_box_has_no_answer_or_markup():
    classes = token_classes(["The", " answer", " is", " **", "5", "**"])
    assert "answer" not in classes and "markup" not in classes
    assert classes[4] == "working"


def test_a_token_straddling_the_box_and_the_answer_is_the_answer():
    assert token_classes(["\\boxed{1", "3}"]) == ["answer", "answer"]


def test_tokens_table_rows_follow_the_given_order_not_the_jsons():
    sums = {c: {"tokens": 1.0, "entropy": 1.0, "gradient": 1.0} for c in REPORTED}
    data = {"seed": 1, "samples": 4, "models": {name: sums for name in ("b-arm", "grpo", "untrained")}}
    rows = [line.split(" | ")[0] for line in tokens_table(data, ["untrained", "grpo", "b-arm"]).splitlines()[4:]]
    assert rows == ["| untrained", "| grpo", "| b-arm"]
    assert "| 25% / 25% / 25%, 1.000 |" in tokens_table(data)
