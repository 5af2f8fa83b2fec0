"""Prompts longer than `model.max_prompt_len` tokens are dropped before the split, and counted.

A prompt is measured as the engine sees it: the user message in the model's chat template with the
assistant's generation prompt (or, for a model without a chat template, the plain text). Cutting an
over-long prompt instead (from the left) would drop the template's start; VERL filters such prompts
out (data.filter_overlong_prompts), and so do we: they appear as `prompt_too_long` in the data report
printed at start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pubswap.data.instructions import alpaca_prompt
from pubswap.data.rows import Row, RowReport


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def uses_chat_template(tokenizer, prompt_format: str) -> bool:
    """model.prompt_format resolved for this tokenizer: chat, plain, or auto (chat if it has a template)."""
    if prompt_format == "chat" and not has_chat_template(tokenizer):
        raise ValueError(
            "model.prompt_format: chat, but the model's tokenizer has no chat template (a base model); "
            "use plain or auto"
        )
    return prompt_format == "chat" or (prompt_format == "auto" and has_chat_template(tokenizer))


def plain_prompt(prompt: str, context: Sequence[dict] = ()) -> str:
    """A base model's prompt: the `context` turns as text (each question on its line, each answer followed
    by a blank line), then the prompt and a newline, where the model's answer starts."""
    shots = "".join(m["content"] + ("\n\n" if m["role"] == "assistant" else "\n") for m in context)
    return f"{shots}{prompt}\n"


def _pairs(context: Sequence[dict]) -> list[tuple[str, str]]:
    """(question, answer) pairs of alternating user/assistant turns."""
    users = [m["content"] for m in context if m["role"] == "user"]
    answers = [m["content"] for m in context if m["role"] == "assistant"]
    return list(zip(users, answers))


def prompt_ids(tokenizer, prompt: str, context: Sequence[dict] = (), prompt_format: str = "auto") -> list[int]:
    """Token ids of `prompt` after the `context` turns (a one-shot example): as the user turn of the chat
    template ending with the assistant's prompt, or (a model without a chat template, or
    prompt_format plain) as plain text after the tokenizer's own special tokens (e.g. BOS)."""
    if prompt_format == "alpaca":
        return list(tokenizer(alpaca_prompt(prompt, _pairs(context)), add_special_tokens=True)["input_ids"])
    if not uses_chat_template(tokenizer, prompt_format):
        return list(tokenizer(plain_prompt(prompt, context), add_special_tokens=True)["input_ids"])
    messages = [*({"role": m["role"], "content": m["content"]} for m in context), {"role": "user", "content": prompt}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def drop_long_prompts(
    rows: Sequence[Row], report: RowReport, count_tokens: Callable[[Row], int], max_len: int
) -> list[Row]:
    """The rows whose prompt (with its context) has at most `max_len` tokens; the others are counted."""
    kept = []
    for i, row in enumerate(rows):
        if count_tokens(row) <= max_len:
            kept.append(row)
            continue
        report.rejected["prompt_too_long"] += 1
        examples = report.examples.setdefault("prompt_too_long", [])
        if len(examples) < 5:
            examples.append(i)
    report.kept = len(kept)
    return kept
