"""math_accuracy_reward: a table of real answer formats, the final-answer policy, and outputs built to hang it."""

import threading
import time

import pytest

from aer_trl.app.rewards import (
    completion_text,
    extract_answer,
    infer_answer_format,
    judge_completions,
    math_accuracy_reward,
)
from aer_trl.app.verifier import join_digit_groups

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
    ("", "5", 0.0),
    ("garbage ))(( \\boxed{", "5", 0.0),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), CASES)
def test_reward_table(completion, gold, expected):
    assert math_accuracy_reward([completion], answer=[gold]) == [expected]


def test_conversational_completions_and_solution_column():
    completions = [
        [{"role": "assistant", "content": "Thus \\boxed{7}."}],
        [{"role": "assistant", "content": "\\boxed{8}"}],
    ]
    assert math_accuracy_reward(completions, solution=["7", "7"]) == [1.0, 0.0]


def test_unparseable_gold_gives_none():
    assert math_accuracy_reward(["\\boxed{5}"] * 3, answer=["???", "", None]) == [None, None, None]


def test_missing_gold_column_is_a_clear_error():
    with pytest.raises(ValueError, match="`answer` or `solution`"):
        math_accuracy_reward(["5"])


def test_safe_off_the_main_thread():
    out = []
    thread = threading.Thread(target=lambda: out.append(math_accuracy_reward(["\\boxed{7}", "6"], answer=["7", "7"])))
    thread.start()
    thread.join(30)
    assert out == [[1.0, 0.0]]


# ------------------------------------------------------------------------------------------- the answer policy
@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("Step 1: 9 + 9 = 18. Step 18: we", "18", 0.0),  # cut off before any \boxed{}: not credited
        ("\\boxed{20} ... wait, actually \\boxed{18}", "18", 1.0),  # the last boxed answer counts
        ("\\boxed{18} ... no: \\boxed{20}", "18", 0.0),
        ("the answer is \\boxed{18} and then \\boxed{2", "18", 0.0),  # the last box is cut off
        ("\\boxed{\\textbf{(C)}\\ 12}", "12", 1.0),  # answer-choice wrappers
        ("\\boxed{(C) 12}", "12", 1.0),
        ("\\boxed{\\textbf{(C)}}", "C", 1.0),
        ("\\boxed{１２}", "12", 1.0),  # fullwidth digits
        ("\\boxed{١٢}", "12", 1.0),  # Arabic-Indic digits
        ("\\boxed{1\u200b2}", "12", 1.0),  # a zero-width space
        ("\\boxed{1\u200b3}", "12", 0.0),
        ("\\boxed{3²}", "9", 1.0),  # a superscript is an exponent: NFKC alone made it 32
        ("\\boxed{3²}", "32", 0.0),
        ("\\boxed{10⁻²}", "0.01", 1.0),
        ("\\boxed{1010₂}", "10102", 0.0),  # a subscript (a base) is not glued to the number either
        ("\\boxed{2ⁿ⁺¹}", "2^{n+1}", 1.0),  # superscript letters and signs too
        ("\\boxed{2ⁿ}", "2n", 0.0),
        ("\\boxed{3^² + 3^{²}}", "18", 1.0),  # written inside LaTeX's own exponent: read once, not twice
        ("\\boxed{2½}", "2.5", 1.0),  # a vulgar fraction, here in a mixed number
        ("\\boxed{½}", "\\frac{1}{2}", 1.0),
        ("\\boxed{1\\,000}", "1000", 1.0),  # LaTeX's thin space between thousands: math-verify read 1·000 = 0
        ("\\boxed{1\\,000}", "0", 0.0),
        ("\\boxed{12\\,345}", "12345", 1.0),
        ("\\boxed{12\\,345.5}", "12345.5", 1.0),
        ("\\boxed{1~000}", "1000", 1.0),  # math-verify read 1
        ("\\boxed{1 000 000}", "1000000", 1.0),
        ("\\boxed{1\u202f000}", "1000", 1.0),  # a narrow no-break space (NFKC makes it a space)
        ("\\boxed{10000}", "10\\,000", 1.0),  # the gold's digit groups too
        ("\\boxed{0}", "1\\,000", 0.0),
        ("\\boxed{18.}", "18", 1.0),  # a full stop inside the box: math-verify found no number
        ("\\boxed{18~\\text{dollars}}", "18", 1.0),  # LaTeX's unbreakable space: math-verify found no number
        ("\\boxed{2~\\frac{1}{2}}", "2.5", 1.0),
    ],
)
def test_final_answer_policy(completion, gold, expected):
    assert math_accuracy_reward([completion], answer=[gold]) == [expected]


def test_answer_line_and_gsm8k_formats_follow_the_prompt():
    asks_answer = "Solve it. End with a line 'Answer: <number>'."
    asks_gsm8k = "Solve it. End with '#### <number>'."
    assert math_accuracy_reward(["x = 42\nAnswer: 42"], answer=["42"], prompts=[asks_answer]) == [1.0]
    assert math_accuracy_reward(["Answer: 41\nAnswer: 42."], answer=["42"], prompts=[asks_answer]) == [1.0]
    assert math_accuracy_reward(["so 42"], answer=["42"], prompts=[asks_answer]) == [0.0]
    assert math_accuracy_reward(["so\n#### 1,234"], answer=["#### 1234"], prompts=[asks_gsm8k]) == [1.0]
    # an explicit answer_format (argument or dataset column) wins over the prompt
    assert math_accuracy_reward(["Answer: 42"], answer=["42"], answer_format=["answer"]) == [1.0]
    assert math_accuracy_reward(["Answer: 42"], answer=["42"]) == [0.0]  # default: \boxed{} is asked for


@pytest.mark.parametrize(
    ("prompt", "fmt"),
    [
        ("Solve it. End with '#### <number>'.", "gsm8k"),
        ("Q: 3+4?\nA: 3+4=7\n#### 7\n\nQ: 2+2?", "gsm8k"),  # a solved example's marker line
        ("#### Problem\nWhat is 2+3? End with a line 'Answer: N'.", "answer"),  # a markdown heading is not the marker
        ("  #### Problem\nWhat is 2+3?", "boxed"),
        ("##### Note\nAnswer: N", "answer"),
        ("#### Problem\nEnd with '#### N'.", "gsm8k"),
    ],
)
def test_a_markdown_heading_in_the_prompt_is_not_the_gsm8k_marker(prompt, fmt):
    assert infer_answer_format(prompt) == fmt


def test_a_tool_calling_completion_is_read_from_its_assistant_turns():
    turns = [
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "calc"}}]},
        {"role": "tool", "content": "\\boxed{41}"},  # a tool's output is not the model's answer
        {"role": "assistant", "content": [{"type": "text", "text": "so \\boxed{42}"}]},
    ]
    assert completion_text(turns) == "\nso \\boxed{42}"
    assert math_accuracy_reward([turns], answer=["42"]) == [1.0]
    assert math_accuracy_reward([turns[:2]], answer=["41"]) == [0.0]


def test_a_conversational_prompt_is_read_whole_for_the_format_it_asks_for():
    """TRL's conversational prompts: the instruction is in the user (or system) turn. Only the assistant turns were
    read, so an `Answer:` prompt was judged as boxed and every completion scored 0."""
    asks = "Solve it. End with a line 'Answer: <number>'."
    chats = [
        [{"role": "system", "content": "You are a tutor."}, {"role": "user", "content": asks}],
        [{"role": "system", "content": asks}, {"role": "user", "content": "2+40?"}],
        [{"role": "user", "content": [{"type": "text", "text": asks}, {"type": "image"}]}],
    ]
    for chat in chats:
        assert infer_answer_format(chat) == "answer"
        assert math_accuracy_reward(["so\nAnswer: 42"], answer=["42"], prompts=[chat]) == [1.0]
    shots = [{"role": "user", "content": "3+4?"}, {"role": "assistant", "content": "3+4=7\n#### 7"}]
    assert infer_answer_format([*shots, {"role": "user", "content": "2+40?"}]) == "gsm8k"
    assert infer_answer_format([{"role": "user", "content": "2+40?"}]) == "boxed"


@pytest.mark.parametrize(
    "line",
    # what chat models write around the answer line: math-verify read the last five as no number
    [
        "**Answer:** 18",
        "**Final Answer:** $18$.",
        "- **Answer**: 18",
        "Answer: **18**",
        "Answer: `18`",
        "Answer: __18__.",
        "Answer: \\[ \\frac{36}{2} \\]",
        "**Answer:** \\(18\\)",
    ],
)
def test_answer_lines_are_read_through_markdown_and_math_delimiters(line):
    assert math_accuracy_reward([f"9 + 9\n{line}"], answer=["18"], answer_format=["answer"]) == [1.0]
    wrong = line.replace("18", "19").replace("36", "38")
    assert math_accuracy_reward([f"9 + 9\n{wrong}"], answer=["18"], answer_format=["answer"]) == [0.0]


@pytest.mark.parametrize("fmt, marker", [("answer", "Answer:"), ("answer", "Final answer:"), ("gsm8k", "####")])
def test_marker_lines_the_last_marker_wins_even_cut_off(fmt, marker):
    assert extract_answer(f"x\n{marker}  \n\n 42 \t\nmore", fmt) == "42"  # blank lines after the marker skipped
    assert extract_answer(f"{marker} 41\n{marker} 42 ", fmt) == "42"
    # a completion cut off right after its last marker is not credited with an earlier answer
    for tail in ("", " ", "\n", " \n  "):
        assert extract_answer(f"{marker} 42\n{marker}{tail}", fmt) == ""
        verdicts, counts = judge_completions([f"{marker} 42\n{marker}{tail}"], answer=["42"], answer_format=[fmt])
        assert verdicts == [0.0] and counts["unparsed"] == 1


@pytest.mark.parametrize("fmt, marker", [("answer", "Answer:"), ("gsm8k", "####")])
def test_a_marker_answer_that_a_cut_completion_ends_on_is_not_credited(fmt, marker):
    """`#### 12` cut by the length limit after `#### 1`: the gold 1 must not be credited. Only the last line of a cut
    completion is in doubt: a line ended by a newline, an uncut completion and a closed box are read as before."""
    assert extract_answer(f"so\n{marker} 1", fmt) == "1"
    assert extract_answer(f"so\n{marker} 1", fmt, cut=True) == ""
    assert extract_answer(f"so\n{marker} 1\n", fmt, cut=True) == "1"
    assert extract_answer(f"so\n{marker} 1\nand then some", fmt, cut=True) == "1"
    assert extract_answer(f"so\n{marker} \\boxed{{1}}", fmt, cut=True) == "1"
    assert extract_answer("so \\boxed{1}", "boxed", cut=True) == "1"  # a box needs its closing brace anyway
    text = f"so\n{marker} 1"
    verdicts, counts = judge_completions(
        [text, text], answer=["1", "1"], answer_format=[fmt] * 2, truncated=[True, False]
    )
    assert verdicts == [0.0, 1.0] and counts["unparsed"] == 1
    kwargs = dict(answer=["1"], answer_format=fmt)
    assert math_accuracy_reward([text], completion_truncated=[True], **kwargs) == [0.0]
    assert math_accuracy_reward([text], completion_truncated=[False], **kwargs) == [1.0]
    assert math_accuracy_reward([text], **kwargs) == [1.0]  # without the column (trl.GRPOTrainer): as before


OPEN_R1_SYSTEM = (
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively"
)


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>40+2=42</think><answer>42</answer>", 1.0),
        ("<think>40+2</think><answer> The answer is 42 </answer>", 1.0),
        ("<answer>\\boxed{42}</answer>", 1.0),
        ("<ANSWER>$42$</ANSWER>", 1.0),
        ("<answer>42</answer> wait <answer>41</answer>", 0.0),  # the last one counts
        ("<answer>41</answer> wait <answer>42", 0.0),  # a last one cut off before its closing tag is not skipped over
        ("<think>so 42</think>", 0.0),  # no tags: not credited
    ],
)
def test_answer_tags_as_open_r1_prompts_ask_for_them(completion, expected):
    """open-r1 and TRL's GRPO examples ask for `<answer>...</answer>` in the system turn; such completions all scored
    0 (the prompt was read as asking for `\\boxed{}`)."""
    chat = [{"role": "system", "content": OPEN_R1_SYSTEM}, {"role": "user", "content": "What is 40+2?"}]
    assert infer_answer_format(chat) == "answer_tag"
    assert math_accuracy_reward([completion], answer=["42"], prompts=[chat]) == [expected]
    assert math_accuracy_reward([completion], answer=["42"], answer_format=["answer_tag"]) == [expected]


def test_credit_unmarked_is_an_explicit_option():
    assert math_accuracy_reward(["so it is 18"], answer=["18"]) == [0.0]
    assert math_accuracy_reward(["so it is 18"], answer=["18"], credit_unmarked=True) == [1.0]
    verdicts, counts = judge_completions(["so it is 18", "\\boxed{18}"], answer=["18", "18"])
    assert verdicts == [0.0, 1.0] and dict(counts) == {"judged": 2, "unmarked": 1}


def test_reward_statistics_go_through_trls_log_metric():
    logged = {}
    rewards = math_accuracy_reward(
        ["so it is 18", "\\boxed{18}", "\\boxed{", "\\boxed{19}"],
        answer=["18"] * 4,
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert rewards == [0.0, 1.0, 0.0, 0.0]
    assert logged == {
        "rewards/math_accuracy/timeouts": 0.0,
        "rewards/math_accuracy/unparsed": 0.0,
        "rewards/math_accuracy/unmarked": 0.5,  # no box, and a box cut off before its closing brace
    }


def test_digit_groups_are_joined_only_where_written_as_thousands():
    assert join_digit_groups("1\\,000\\,000") == join_digit_groups("1\\ 000~000") == "1000000"
    assert join_digit_groups("1\\thinspace 000.5") == join_digit_groups("1 000.5") == "1000.5"
    assert join_digit_groups("0.000\\,1") == "0.0001"
    for kept in ("2 3", "1 0000", "1 000 0000", "x^2 100", "x_1 000", "3.141 592", "(1,\\,2)", "1, 000"):
        assert join_digit_groups(kept) == kept


def test_extract_answer_bounds_and_formats():
    assert extract_answer("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert extract_answer("no box here") is None
    assert extract_answer("#### 1,234\n", "gsm8k") == "1234"
    with pytest.raises(ValueError, match="answer_format"):
        extract_answer("x", "latex")


# ------------------------------------------------------------------------------------------- built to hang
ADVERSARIAL = {
    "power tower": ("\\boxed{9^{9^{9^{9}}}}", "1"),
    "10k nested braces": ("\\boxed{" + "{" * 10000 + "1" + "}" * 10000 + "}", "1"),
    "100k boxes": ("\\boxed{1}" * 100_000, "1"),
    "1 MB of digits": ("9" * 1_000_000 + " \\boxed{3}", "3"),
    # an answer-choice wrapper opened, then a run of spaces: its reader was quadratic here (hours at a million)
    "choice wrapper + 1M spaces": ("\\boxed{\\textbf{" + " " * 1_000_000 + "x}}", "1"),
    "choice + 1M spaces": ("\\boxed{\\textbf{(C" + " " * 1_000_000 + "x}}", "1"),
    # 200k digit groups, then one digit too many: not thousands, and found so in linear time
    "digit groups + 1 digit": ("\\boxed{1" + " 000" * 200_000 + "0}", "1"),
}
# marker lines: a run of whitespace after the marker (a lazy `(.+?)\s*$` took minutes on these)
MARKED = {
    "answer": [
        "Answer: 5" + " " * 1_000_000 + "x",
        "Answer:" + " \t" * 500_000,
        "Answer: 5\n" * 100_000,
        "Answer: \\text{" + " " * 1_000_000 + "x",
        "**Answer" + "*" * 1_000_000 + "x",  # emphasis after the marker word, never closed
        "Answer: " + "*_`" * 300_000 + "5" + "*_` " * 300_000,
    ],
    "gsm8k": ["#### 5" + " " * 1_000_000 + "x", "####" + " \t" * 500_000, "#### " * 200_000],
}
# a hang guard, not a speed target: a stuck check would never return; the hard limit (5 s per completion) ends
# it well before this even on a machine running the suite with many workers (the times are in README, "Reward")
LIMIT = 60.0


def _timed(completions, golds):
    start = time.monotonic()
    out = math_accuracy_reward(completions, answer=golds)
    return out, time.monotonic() - start


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_outputs_return_in_time_on_the_main_thread(name):
    completion, gold = ADVERSARIAL[name]
    math_accuracy_reward(["\\boxed{1}"], answer=["1"])  # start the verifier workers outside the timing
    out, elapsed = _timed([completion], [gold])
    assert len(out) == 1 and out[0] in (0.0, 1.0) and elapsed < LIMIT, (name, elapsed)
    if name in ("100k boxes", "1 MB of digits"):
        assert out == [1.0]  # the last boxed answer, found fast


@pytest.mark.parametrize("fmt", list(MARKED))
def test_marker_formats_read_adversarial_outputs_in_linear_time(fmt):
    start = time.monotonic()
    answers = [extract_answer(text, fmt) for text in MARKED[fmt]]
    assert time.monotonic() - start < LIMIT
    assert answers[0].startswith("5") and answers[0].endswith("x") and answers[1] == ""
    assert answers[2] == "5" if fmt == "answer" else answers[2].startswith("####")  # one marker, the rest its line
    if fmt == "answer":  # not a choice wrapper: left as written; no colon: no marker; the emphasis taken off
        assert answers[3:] == ["\\text{" + " " * 1_000_000 + "x", None, "5"]


def test_answer_tags_read_adversarial_outputs_in_linear_time():
    texts = [
        "<answer>5" + " " * 1_000_000 + "x</answer>",
        "<answer>" * 200_000 + "5</answer>",
        "<answer>" + "</ANSWER" * 300_000,  # never closed
        "<answer>" * 200_000,
        "<answer" * 300_000,
    ]
    start = time.monotonic()
    answers = [extract_answer(text, "answer_tag") for text in texts]
    assert time.monotonic() - start < LIMIT
    assert answers == ["5" + " " * 1_000_000 + "x", "5", None, None, None]


def test_adversarial_outputs_return_in_time_on_a_worker_thread():
    completions = [c for c, _ in ADVERSARIAL.values()] + ["\\boxed{7}"]
    golds = [g for _, g in ADVERSARIAL.values()] + ["7"]
    math_accuracy_reward(["\\boxed{1}"], answer=["1"])
    box = []
    thread = threading.Thread(target=lambda: box.append(_timed(completions, golds)))
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and box, "the reward hung on a worker thread"
    out, elapsed = box[0]
    assert out[-1] == 1.0 and out[2] == 1.0 and elapsed < 2 * LIMIT  # not serialised behind the slow ones
