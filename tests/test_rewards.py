import threading
import time

import pytest

from pubswap.data.rewards import (
    boxed_choice,
    choice_reward,
    exact_match_reward,
    extract_choice,
    in_format,
    make_reward,
    math_reward,
)


@pytest.mark.parametrize(
    "response, answer, expected",
    [
        ("The answer is \\boxed{42}.", "42", 1.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("so we get \\boxed{1/2}", "\\frac{1}{2}", 1.0),
        ("\\boxed{4}", "-4", 0.0),
        ("First I thought 6, but the answer is \\boxed{5}", "6", 0.0),  # only the last box counts
        ("\\boxed{6} no wait \\boxed{5}", "5", 1.0),
        ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
        ("\\boxed{\\$5}", "\\$5", 1.0),  # MATH's money answers: the gold is parsed as \boxed{\$5}
        ("\\boxed{5}", "\\$5", 1.0),
        ("\\boxed{\\$5}", "5", 1.0),
        ("\\boxed{10\\%}", "10\\%", 1.0),
        ("", "3", 0.0),
        ("garbage }{}{\\\\\\frac{{{", "3", 0.0),
        ("\\boxed{3}", "", 0.0),
        (None, "3", 0.0),
    ],
)
def test_math_reward_strict(response, answer, expected):
    assert math_reward(response, answer) == expected


@pytest.mark.parametrize(
    "echo, answer",
    [
        ("Calculate 5 - 3.", "2"),  # basic_arithmetic: the question itself evaluates to the answer
        ("5 - 9 = -4", "-4"),
        ("I think 5. Final: 6", "6"),
        ("The answer is 7", "7"),
    ],
)
def test_strict_math_reward_credits_no_unboxed_answer(echo, answer):
    assert math_reward(echo, answer) == 0.0
    assert math_reward(echo, answer, lenient=True) == 1.0  # what the lenient mode (opt-in) credits
    assert make_reward("math", "lenient")(echo, answer) == 1.0
    assert math_reward(f"{echo} So \\boxed{{{answer}}}", answer) == 1.0


def test_gold_dollar_answer_used_to_never_match_and_now_does():
    # gold "\$5" was treated as already $-delimited and never parsed: even a perfect response scored 0
    for lenient in (False, True):
        assert math_reward("\\boxed{\\$5}", "\\$5", lenient=lenient) == 1.0
        assert math_reward("\\boxed{\\$6}", "\\$5", lenient=lenient) == 0.0


def test_math_reward_is_bounded_on_huge_garbage():
    t = time.perf_counter()
    assert math_reward("(" * 200_000 + "\\frac{" * 5000, "1") == 0.0
    assert math_reward("(" * 200_000 + "\\frac{" * 5000, "1", lenient=True) == 0.0
    assert math_reward("x" * 100_000 + " so \\boxed{9}", "9") == 1.0  # only the tail is parsed
    assert time.perf_counter() - t < 30  # generous bound: this would hang without truncation/timeouts


def test_math_reward_works_off_the_main_thread():
    out = []
    th = threading.Thread(
        target=lambda: out.extend(
            [math_reward("\\boxed{7}", "7"), math_reward("7", "7"), math_reward("\\boxed{8}", "7")]
        )
    )
    th.start()
    th.join(60)
    assert out == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "response, answer, strict, lenient",
    [
        ("\\boxed{ Paris }", "paris", 1.0, 1.0),
        ("Answer: Paris.", "paris", 0.0, 1.0),
        ("blah\nParis", "Paris", 0.0, 1.0),
        ("The final answer is London", "Paris", 0.0, 0.0),
        ("\\boxed{London}", "Paris", 0.0, 0.0),
        ("", "x", 0.0, 0.0),
    ],
)
def test_exact_match(response, answer, strict, lenient):
    assert exact_match_reward(response, answer) == strict
    assert exact_match_reward(response, answer, lenient=True) == lenient


@pytest.mark.parametrize(
    "response, strict, lenient",
    [
        ("\\boxed{D}", "D", "D"),
        ("\\boxed{(b)}", "B", "B"),
        ("so \\boxed{\\text{C}}.", "C", "C"),
        ("The answer is (B).", None, "B"),
        ("B", None, "B"),
        ("A) aspirin\nB) ibuprofen\nAnswer: C", None, "C"),
        ("**Answer: E**", None, "E"),
        ("Let me think. Answer is A. Wait, no: the answer is D", None, "D"),
        ("\\boxed{aspirin}", None, None),
        ("I cannot decide", None, None),
    ],
)
def test_choice_extraction(response, strict, lenient):
    assert boxed_choice(response) == strict
    assert extract_choice(response) == lenient


def test_choice_reward():
    assert choice_reward("\\boxed{c}", "C") == 1.0
    assert choice_reward("Answer: (c)", "C") == 0.0  # strict: the prompt asks for the letter in \boxed{}
    assert choice_reward("Answer: (c)", "C", lenient=True) == 1.0
    assert choice_reward("\\boxed{B}", "C") == 0.0
    assert choice_reward("\\boxed{B}", "not a letter") == 0.0
    assert choice_reward("\\boxed{B}", "(B)") == 1.0


def test_in_format():
    assert in_format("so \\boxed{12}", "math") and not in_format("so 12", "math")
    assert in_format("\\boxed{B}", "choice") and not in_format("\\boxed{aspirin}", "choice")


def test_make_reward():
    assert make_reward("math") is math_reward
    assert make_reward("choice", "lenient")("Answer: B", "B") == 1.0
    with pytest.raises(ValueError, match="unknown reward"):
        make_reward("bleu")
    with pytest.raises(ValueError, match="unknown reward mode"):
        make_reward("math", "loose")
