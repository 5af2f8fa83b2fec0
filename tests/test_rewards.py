import threading
import time

import pytest

from pubswap.rewards import choice_reward, exact_match_reward, extract_choice, make_reward, math_reward


@pytest.mark.parametrize("response, answer, expected", [
    ("The answer is \\boxed{42}.", "42", 1.0),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("so we get \\boxed{1/2}", "\\frac{1}{2}", 1.0),
    ("5 - 9 = -4", "-4", 1.0),
    ("\\boxed{4}", "-4", 0.0),
    ("First I thought 6, but the answer is \\boxed{5}", "6", 0.0),  # boxed wins over earlier numbers
    ("I think 5. Final: 6", "6", 1.0),  # no box: the last expression
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    ("", "3", 0.0),
    ("garbage }{}{\\\\\\frac{{{", "3", 0.0),
    ("\\boxed{3}", "", 0.0),
    (None, "3", 0.0),
])
def test_math_reward(response, answer, expected):
    assert math_reward(response, answer) == expected


def test_math_reward_is_bounded_on_huge_garbage():
    t = time.perf_counter()
    assert math_reward("(" * 200_000 + "\\frac{" * 5000, "1") == 0.0
    assert math_reward("x" * 100_000 + " so \\boxed{9}", "9") == 1.0  # only the tail is parsed
    assert time.perf_counter() - t < 30  # generous bound: this would hang without truncation/timeouts


def test_math_reward_works_off_the_main_thread():
    out = []
    th = threading.Thread(target=lambda: out.extend([math_reward("\\boxed{7}", "7"), math_reward("8", "7")]))
    th.start()
    th.join(60)
    assert out == [1.0, 0.0]


@pytest.mark.parametrize("response, answer, expected", [
    ("Answer: Paris.", "paris", 1.0),
    ("\\boxed{ 12 }", "12", 1.0),
    ("blah\nParis", "Paris", 1.0),
    ("The final answer is London", "Paris", 0.0),
    ("", "x", 0.0),
])
def test_exact_match(response, answer, expected):
    assert exact_match_reward(response, answer) == expected


@pytest.mark.parametrize("response, letter", [
    ("The answer is (B).", "B"),
    ("B", "B"),
    ("A) aspirin\nB) ibuprofen\nAnswer: C", "C"),
    ("\\boxed{D}", "D"),
    ("**Answer: E**", "E"),
    ("Let me think. Answer is A. Wait, no: the answer is D", "D"),
    ("I cannot decide", None),
])
def test_extract_choice(response, letter):
    assert extract_choice(response) == letter


def test_choice_reward():
    assert choice_reward("Answer: (c)", "C") == 1.0
    assert choice_reward("Answer: B", "C") == 0.0
    assert choice_reward("Answer: B", "not a letter") == 0.0
    assert choice_reward("Answer: B", "(B)") == 1.0


def test_make_reward():
    assert make_reward("math") is math_reward
    with pytest.raises(ValueError, match="unknown reward"):
        make_reward("bleu")
