"""Prompts longer than `model.max_prompt_len` tokens are dropped before the split, and counted.

A prompt is measured as the engine sees it: the user message in the model's chat template with the
assistant's generation prompt. Cutting an over-long prompt instead (from the left) would drop the
template's start; VERL filters such prompts out (data.filter_overlong_prompts), and so do we: they
appear as `prompt_too_long` in the data report printed at start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pubswap.data.rows import Row, RowReport


def chat_prompt_ids(tokenizer, prompt: str, context: Sequence[dict] = ()) -> list[int]:
    """Token ids of `prompt` as the user turn of the chat template after the `context` turns (a one-shot
    example), ending with the assistant's prompt."""
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
