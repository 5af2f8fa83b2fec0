"""Verifiable rewards: 1.0 for a correct response, 0.0 otherwise. Never raises, bounded time per call.

- math:   math-verify parses the gold answer and the response (\\boxed{...} first, else the last
          expression) and checks symbolic equality. Only the response's tail (MAX_CHARS) is parsed,
          and math-verify's own timeouts bound parse and verify (signal-based: main thread only;
          elsewhere the call runs in a one-worker process pool that is killed on timeout).
- exact:  the extracted final answer equals the gold answer after whitespace/case normalisation.
- choice: the multiple-choice letter the response commits to equals the gold letter.
"""

from __future__ import annotations

import concurrent.futures as cf
import re
import threading
from collections.abc import Callable

MAX_CHARS = 4000  # only the tail of a response is parsed: answers come last, garbage can be long
TIMEOUT_S = 3


def _math_verify(response: str, answer: str, timeout_s: int) -> bool:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    main = threading.current_thread() is threading.main_thread()
    t = timeout_s if main else None  # signal.alarm only works on the main thread
    gold_text = answer if "\\boxed" in answer or "$" in answer else f"${answer}$"
    gold = parse(gold_text, parsing_timeout=t)
    if not gold:
        gold = parse(answer, extraction_config=[ExprExtractionConfig()], parsing_timeout=t)
    pred = parse(response, extraction_config=[LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()],
                 parsing_timeout=t)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=t))


_pool: cf.ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _off_main_thread(response: str, answer: str, timeout_s: int) -> bool:
    """Run math-verify in a worker process; kill it and answer False on timeout."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = cf.ProcessPoolExecutor(max_workers=1)
        pool = _pool
    future = pool.submit(_math_verify, response, answer, timeout_s)
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


def math_reward(response: str, answer: str, timeout_s: int = TIMEOUT_S) -> float:
    if not isinstance(response, str) or not isinstance(answer, str) or not answer.strip():
        return 0.0
    response = response[-MAX_CHARS:]
    try:
        if threading.current_thread() is threading.main_thread():
            return float(_math_verify(response, answer, timeout_s))
        return float(_off_main_thread(response, answer, timeout_s))
    except Exception:  # math-verify / sympy / antlr can throw on anything; a bad response scores 0
        return 0.0


_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_ANSWER_IS = re.compile(r"(?:final answer|answer)\s*(?:is|:)?\s*[:=]?\s*(.+)", re.IGNORECASE)


def extract_final_answer(response: str) -> str:
    """The last \\boxed{...}, else what follows the last 'answer:' / 'answer is', else the last line."""
    response = response[-MAX_CHARS:]
    boxed = _BOXED.findall(response)
    if boxed:
        return boxed[-1]
    matches = list(_ANSWER_IS.finditer(response))
    if matches:
        return matches[-1].group(1).splitlines()[0] if matches[-1].group(1) else ""
    lines = [ln for ln in response.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _normalize(text: str) -> str:
    return " ".join(text.strip().strip("$").strip().rstrip(".").lower().split())


def exact_match_reward(response: str, answer: str) -> float:
    if not isinstance(response, str) or not isinstance(answer, str) or not answer.strip():
        return 0.0
    return float(_normalize(extract_final_answer(response)) == _normalize(answer))


_LETTER_PATTERNS = [
    re.compile(r"\\boxed\s*\{\s*\(?([A-J])\)?\s*\}"),
    re.compile(r"answer\s*(?:is|:)?\s*[:=]?\s*\(?\**([A-J])\**\)?(?![A-Za-z])", re.IGNORECASE),
    re.compile(r"^\s*\(?([A-J])\)?[.):]?\s*$", re.MULTILINE),
    re.compile(r"^\s*\(?([A-J])[.)]\s", re.MULTILINE),
]


def extract_choice(response: str) -> str | None:
    """The letter a response commits to: boxed, then 'answer: X', then a line that is just a letter."""
    response = response[-MAX_CHARS:]
    for pattern in _LETTER_PATTERNS:
        found = pattern.findall(response)
        if found:
            return found[-1].upper()
    return None


def choice_reward(response: str, answer: str) -> float:
    if not isinstance(response, str) or not isinstance(answer, str):
        return 0.0
    gold = answer.strip().strip("()").upper()
    if len(gold) != 1 or not "A" <= gold <= "J":
        return 0.0
    return float(extract_choice(response) == gold)


REWARDS: dict[str, Callable[[str, str], float]] = {
    "math": math_reward,
    "exact": exact_match_reward,
    "choice": choice_reward,
}


def make_reward(name: str) -> Callable[[str, str], float]:
    try:
        return REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; known: {sorted(REWARDS)}") from None
