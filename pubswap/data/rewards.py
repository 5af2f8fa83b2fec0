"""Verifiable rewards: 1.0 for a correct response, 0.0 otherwise. Never raises, bounded time per call.

Strict (the default, as VERL's MATH scorer): only an answer in the format the prompt asks for counts,
the LAST \\boxed{...} of the response. A response without one scores 0, whatever else it says, so a
policy cannot score by echoing the question ("Calculate 5 - 3." holds the expression 2).

- math:   math-verify checks the boxed answer against the gold answer, both parsed as \\boxed{...}
          (so a gold `\\$5` matches `\\boxed{\\$5}` and `\\boxed{5}`).
- exact:  the boxed answer equals the gold answer after whitespace/case normalisation.
- choice: the boxed answer is the gold letter (`\\boxed{B}`, `\\boxed{(B)}`, `\\boxed{\\text{B}}`).

Lenient (`data.reward_mode: lenient`, an explicit opt-in): also credit an unboxed answer, the last
expression (math), what follows "answer:" or the last line (exact), or a letter the response commits to
in words (choice). It inflates rewards: an echoed question often scores.

Only the response's tail (MAX_CHARS) is parsed, and math-verify's own timeouts bound parse and verify
(signal-based: main thread only; elsewhere the call runs in a one-worker process pool that is killed on
timeout).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import re
import threading
from collections.abc import Callable

from pubswap.data.answers import MAX_CHARS, boxed, last_boxed

TIMEOUT_S = 3
MODES = ("strict", "lenient")


def _math_verify(response: str, answer: str, timeout_s: int, lenient: bool) -> bool:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    main = threading.current_thread() is threading.main_thread()
    t = timeout_s if main else None  # signal.alarm only works on the main thread
    latex = [LatexExtractionConfig(boxed_match_priority=0)]
    gold = parse(answer if "\\boxed" in answer else boxed(answer), extraction_config=latex, parsing_timeout=t)
    if not gold:  # a plain expression math-verify's LaTeX grammar does not take ("2**3")
        gold = parse(answer, extraction_config=[ExprExtractionConfig()], parsing_timeout=t)
    if lenient:
        pred = parse(response, extraction_config=[*latex, ExprExtractionConfig()], parsing_timeout=t)
    else:
        answer_text = last_boxed(response)
        if answer_text is None:
            return False
        pred = parse(boxed(answer_text), extraction_config=latex, parsing_timeout=t)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=t))


_pool: cf.ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _off_main_thread(response: str, answer: str, timeout_s: int, lenient: bool) -> bool:
    """Run math-verify in a worker process; kill it and answer False on timeout."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = cf.ProcessPoolExecutor(max_workers=1)
        pool = _pool
    future = pool.submit(_math_verify, response, answer, timeout_s, lenient)
    try:
        return future.result(timeout=timeout_s * 2 + 1)
    except Exception:
        with _pool_lock:
            if _pool is pool:
                for proc in list(getattr(pool, "_processes", {}).values()):
                    proc.kill()
                pool.shutdown(wait=False, cancel_futures=True)
                _pool = None
        return False


def math_reward(response: str, answer: str, timeout_s: int = TIMEOUT_S, lenient: bool = False) -> float:
    if not isinstance(response, str) or not isinstance(answer, str) or not answer.strip():
        return 0.0
    response = response[-MAX_CHARS:]
    try:
        if threading.current_thread() is threading.main_thread():
            return float(_math_verify(response, answer, timeout_s, lenient))
        return float(_off_main_thread(response, answer, timeout_s, lenient))
    except Exception:  # math-verify / sympy / antlr can throw on anything; a bad response scores 0
        return 0.0


_ANSWER_IS = re.compile(r"(?:final answer|answer)\s*(?:is|:)?\s*[:=]?\s*(.+)", re.IGNORECASE)


def extract_final_answer(response: str) -> str:
    """Lenient: the last \\boxed{...}, else what follows the last 'answer:' / 'answer is', else the last line."""
    response = response[-MAX_CHARS:]
    found = last_boxed(response)
    if found is not None:
        return found
    matches = list(_ANSWER_IS.finditer(response))
    if matches:
        return matches[-1].group(1).splitlines()[0] if matches[-1].group(1) else ""
    lines = [ln for ln in response.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _normalize(text: str) -> str:
    return " ".join(text.strip().strip("$").strip().rstrip(".").lower().split())


def exact_match_reward(response: str, answer: str, lenient: bool = False) -> float:
    if not isinstance(response, str) or not isinstance(answer, str) or not answer.strip():
        return 0.0
    given = extract_final_answer(response) if lenient else last_boxed(response[-MAX_CHARS:])
    return float(given is not None and _normalize(given) == _normalize(answer))


_BOXED_LETTER = re.compile(r"^\(?\s*([A-J])\s*\)?\.?$", re.IGNORECASE)
_TEXT_WRAP = re.compile(r"^\\(?:text|textbf|mathrm)\s*\{(.*)\}$")
_LETTER_PATTERNS = [  # lenient: what a response commits to in words, in this order of precedence
    re.compile(r"answer\s*(?:is|:)?\s*[:=]?\s*\(?\**([A-J])\**\)?(?![A-Za-z])", re.IGNORECASE),
    re.compile(r"^\s*\(?([A-J])\)?[.):]?\s*$", re.MULTILINE),
    re.compile(r"^\s*\(?([A-J])[.)]\s", re.MULTILINE),
]


def boxed_choice(response: str) -> str | None:
    """The letter in the response's last \\boxed{...} (`B`, `(B)`, `B.`, `\\text{B}`), else None."""
    content = last_boxed(response[-MAX_CHARS:])
    if content is None:
        return None
    wrapped = _TEXT_WRAP.match(content)
    found = _BOXED_LETTER.match((wrapped.group(1) if wrapped else content).strip())
    return found.group(1).upper() if found else None


def extract_choice(response: str) -> str | None:
    """Lenient: the boxed letter, then 'answer: X', then a line that is just a letter."""
    letter = boxed_choice(response)
    if letter is not None:
        return letter
    response = response[-MAX_CHARS:]
    for pattern in _LETTER_PATTERNS:
        found = pattern.findall(response)
        if found:
            return found[-1].upper()
    return None


def choice_reward(response: str, answer: str, lenient: bool = False) -> float:
    if not isinstance(response, str) or not isinstance(answer, str):
        return 0.0
    gold = answer.strip().strip("()").upper()
    if len(gold) != 1 or not "A" <= gold <= "J":
        return 0.0
    return float((extract_choice(response) if lenient else boxed_choice(response)) == gold)


def in_format(response: str, reward: str) -> bool:
    """Whether the response gives an answer in the asked format (a \\boxed{} answer; a boxed letter for
    `choice`), right or wrong: the share of such responses tells format learning from accuracy."""
    if not isinstance(response, str):
        return False
    if reward == "choice":  # every other verifier reads the last \boxed{}
        return boxed_choice(response) is not None
    if reward == "code":  # a fenced code block
        from pubswap.data.code_tasks import extract_code

        return extract_code(response) is not None
    return last_boxed(response[-MAX_CHARS:]) is not None


REWARDS: dict[str, Callable[..., float]] = {
    "math": math_reward,
    "exact": exact_match_reward,
    "choice": choice_reward,
}


def make_row_reward(data, seed: int) -> Callable[..., float]:
    """reward(response, row) for a run's DataConfig: `data.reward` in `data.reward_mode`; the
    reasoning_gym reward scores with the row's own task verifier (pubswap/data/reasoning_gym_tasks.py)."""
    lenient = data.reward_mode == "lenient"
    if data.verifier == "reasoning_gym":
        from pubswap.data.reasoning_gym_tasks import ReasoningGymReward

        verifier = ReasoningGymReward(data.tasks, seed, lenient=lenient)
        return lambda response, row: verifier(response, row.answer, row.ref)
    if data.verifier == "code":  # the row's tests run with its code in the sandbox
        return make_benchmark_reward("code")
    fn = make_reward(data.verifier, data.reward_mode)
    return lambda response, row: fn(response, row.answer)


def make_benchmark_reward(scoring: str) -> Callable[..., float]:
    """reward(response, row) for a benchmark scored by sampling (pubswap/data/board_evals.py), strict:
    code runs the row's tests in the sandbox, math checks the last \\boxed{} with math-verify."""
    if scoring == "code":
        from pubswap.data.code_tasks import code_reward

        return lambda response, row: code_reward(response, row.answer, row.ref)
    if scoring == "math":
        return lambda response, row: math_reward(response, row.answer)
    raise ValueError(f"no sampled reward for scoring {scoring!r} (code, math)")


def make_reward(name: str, mode: str = "strict") -> Callable[[str, str], float]:
    """The reward function `name` in `mode` ("strict": only the asked-for format counts; "lenient")."""
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; known: {sorted(REWARDS)}")
    if mode not in MODES:
        raise ValueError(f"unknown reward mode {mode!r}; known: {MODES}")
    return REWARDS[name] if mode == "strict" else functools.partial(REWARDS[name], lenient=True)
