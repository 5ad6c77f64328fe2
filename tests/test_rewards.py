"""math_accuracy_reward on a table of real answer formats, right and wrong (SPEC §4)."""

import threading

import pytest

from aer_trl.rewards import math_accuracy_reward

CASES = [
    # (completion, gold, expected)
    ("so the answer is \\boxed{19}", "19", 1.0),
    ("\\boxed{18}", "19", 0.0),
    ("\\boxed{\\frac{3}{4}}", "3/4", 1.0),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac12", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac{2}{3}}", "3/4", 0.0),
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}", 1.0),
    ("\\boxed{3\\sqrt{2}}", "\\sqrt{12}", 0.0),
    ("\\boxed{(1,2]}", "(1, 2]", 1.0),
    ("\\boxed{[1,2]}", "(1, 2]", 0.0),
    ("\\boxed{\\text{Monday}}", "\\text{Monday}", 1.0),
    ("\\boxed{Tuesday}", "\\text{Monday}", 0.0),
    ("\\boxed{30^\\circ}", "30^\\circ", 1.0),
    ("\\boxed{45^\\circ}", "30^\\circ", 0.0),
    ("\\boxed{1,234}", "1234", 1.0),
    ("\\boxed{1234}", "Natalia sold 1234 clips.\n#### 1,234", 1.0),
    ("\\boxed{1243}", "#### 1,234", 0.0),
    ("Answer: 42", "\\boxed{42}", 1.0),
    ("Answer: 24", "\\boxed{42}", 0.0),
    ("", "5", 0.0),
    ("garbage ))(( \\boxed{", "5", 0.0),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), CASES)
def test_reward_table(completion, gold, expected):
    assert math_accuracy_reward([completion], answer=[gold]) == [expected]


def test_conversational_completions_and_solution_column():
    completions = [[{"role": "assistant", "content": "Thus \\boxed{7}."}], [{"role": "assistant", "content": "8"}]]
    assert math_accuracy_reward(completions, solution=["7", "7"]) == [1.0, 0.0]


def test_unparseable_gold_gives_none():
    assert math_accuracy_reward(["5", "5", "5"], answer=["???", "", None]) == [None, None, None]


def test_missing_gold_column_is_a_clear_error():
    with pytest.raises(ValueError, match="`answer` or `solution`"):
        math_accuracy_reward(["5"])


def test_safe_off_the_main_thread():
    out = []
    thread = threading.Thread(target=lambda: out.append(math_accuracy_reward(["\\boxed{7}", "6"], answer=["7", "7"])))
    thread.start()
    thread.join(30)
    assert out == [[1.0, 0.0]]
