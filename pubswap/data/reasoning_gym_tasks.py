"""The offline default task family: procedural, seeded reasoning-gym tasks, one topic per task.

The settings are deliberately easy (one-digit operands, two terms, one or two animals) so that a
135M-parameter instruct model gets non-zero reward; the topics differ enough in form (arithmetic,
equations, counting) to make a Dirichlet topic split heterogeneous. Answers are integers, so the
`math` reward verifies them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pubswap.data.rows import Row, RowReport, validate_rows
from pubswap.seeding import derive_seed

# task name -> reasoning_gym config overrides
EASY_TASKS: dict[str, dict] = {
    "chain_sum": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
    "basic_arithmetic": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=("+", "-", "*")),
    "simple_equations": dict(min_terms=2, max_terms=2, min_value=1, max_value=10),
    "leg_counting": dict(min_animals=1, max_animals=2, max_instances=2),
    "letter_counting": dict(min_words=3, max_words=5),
}

INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{}."


def format_prompt(question: str) -> str:
    return f"{question.strip()}\n{INSTRUCTION}"


def reasoning_gym_rows(tasks: Sequence[str], size_per_task: int, seed: int) -> tuple[list[Row], RowReport]:
    """`size_per_task` rows of each task, topic = task name; deterministic in `seed`."""
    import reasoning_gym

    unknown = [t for t in tasks if t not in EASY_TASKS]
    if unknown:
        raise ValueError(f"unknown reasoning-gym task(s) {unknown}; known: {sorted(EASY_TASKS)}")
    raw = []
    for task in tasks:
        ds = reasoning_gym.create_dataset(task, size=size_per_task, seed=derive_seed(seed, "rg", task) % 2**31,
                                          **EASY_TASKS[task])
        raw.extend({"prompt": format_prompt(item["question"]), "answer": item["answer"], "topic": task} for item in ds)
    return validate_rows(raw)
