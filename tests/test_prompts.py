"""aer_trl.app.prompts: what a question becomes in front of a chat model."""

import pytest

from aer_trl.app.prompts import BOXED_INSTRUCTION, PromptFormat, draw_shots, format_prompt, solved_text

SHOTS = (
    ("What is 7+5?", "7+5 = 12. The answer is \\boxed{12}."),
    ("What is 23*4?", "23*4 = 92. The answer is \\boxed{92}."),
)


def test_plain_question_gets_system_shots_and_instruction_in_order():
    fmt = PromptFormat(system="Be brief.", instruction="Box it.", shots=SHOTS)
    assert format_prompt("What is 1+1?", fmt) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 7+5?\n\nBox it."},
        {"role": "assistant", "content": SHOTS[0][1]},
        {"role": "user", "content": "What is 23*4?\n\nBox it."},
        {"role": "assistant", "content": SHOTS[1][1]},
        {"role": "user", "content": "What is 1+1?\n\nBox it."},
    ]


def test_default_format_is_the_boxed_instruction_and_none_means_none():
    assert format_prompt(" q ", PromptFormat()) == [{"role": "user", "content": f"q\n\n{BOXED_INSTRUCTION}"}]
    for none in (None, "none", "", "None"):
        assert format_prompt("q", PromptFormat(instruction=none)) == [{"role": "user", "content": "q"}]


def test_a_conversation_keeps_every_turn_in_order():
    conversation = [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "\\boxed{4}"},
        {"role": "user", "content": "3+3?"},
    ]
    # no format: every turn as it was
    assert format_prompt(conversation, PromptFormat(instruction=None)) == conversation
    # its own system turn wins, the format's shots go after it, the instruction goes on its last user turn
    out = format_prompt(conversation, PromptFormat(system="ignored", instruction="Box it.", shots=SHOTS[:1]))
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert out[0]["content"] == "You add numbers." and out[1]["content"] == "What is 7+5?\n\nBox it."
    assert out[3:5] == conversation[1:3] and out[5]["content"] == "3+3?\n\nBox it."
    assert conversation[3]["content"] == "3+3?"  # the row itself is not modified


def test_bad_conversations_and_shots_are_named():
    with pytest.raises(ValueError, match="no user turn"):
        format_prompt([{"role": "system", "content": "x"}], PromptFormat())
    with pytest.raises(ValueError, match="role"):
        format_prompt([{"content": "x"}], PromptFormat())
    with pytest.raises(ValueError, match="prompt shots"):
        PromptFormat(shots=(("only a question",),))


def test_solved_text_rewrites_gsm8k_solutions_to_a_boxed_answer():
    assert solved_text("He has 3 <<1+2=3>>3 apples.\n#### 3") == "He has 3 3 apples.\nThe answer is \\boxed{3}."
    assert solved_text("#### 1,234") == "The answer is \\boxed{1234}."
    assert solved_text("42") == "The answer is \\boxed{42}."
    assert solved_text("so \\boxed{5}") == "so \\boxed{5}"


def test_draw_shots_is_fixed_by_its_own_seed():
    pool = [(f"q{i}", f"a{i}") for i in range(10)]
    assert draw_shots(pool, 2, seed=0) == draw_shots(pool, 2, seed=0) != draw_shots(pool, 2, seed=1)
    assert draw_shots(pool, 0) == ()
    with pytest.raises(ValueError, match="only 10"):
        draw_shots(pool, 11)
