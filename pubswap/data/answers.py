"""Where a response's answer is: the last \\boxed{...} of its tail. Shared by the rewards and by the
datasets that box their gold answers (and imported by both, so neither imports the other)."""

from __future__ import annotations

MAX_CHARS = 4000  # only the tail of a response is parsed: answers come last, garbage can be long


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}), braces matched to any depth; None if absent."""
    if not isinstance(text, str):
        return None
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0 or text[start:i].strip() not in ("\\boxed", "\\fbox"):
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip() or None
    return None  # unbalanced: a truncated response


def boxed(text: str) -> str:
    return f"\\boxed{{{text}}}"
