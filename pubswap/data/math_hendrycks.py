"""MATH (Hendrycks et al., 2021): 12.5K competition problems; topic = subject ("Algebra", "Geometry", ...).

Schema (hub `EleutherAI/hendrycks_math`, one config per subject, or `hendrycks/competition_math`):
`problem`, `solution` (with the answer in the last \\boxed{...}), `level` ("Level 1".."Level 5"),
`type` (the subject). Paper split (appendix B.1): 4 clients x 2,500 private, 1,250 public, 1,250 test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pubswap.data.rows import Row, RowReport, map_rows
from pubswap.rewards import last_boxed

HUB = "EleutherAI/hendrycks_math"
SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
            "prealgebra", "precalculus")  # the hub configs
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def math_prompt(problem: str) -> str:
    return f"{problem.strip()}\n{INSTRUCTION}"


def _fields(r: Mapping) -> dict:
    problem = r.get("problem")
    return {"prompt": math_prompt(problem) if isinstance(problem, str) and problem.strip() else None,
            "answer": last_boxed(r.get("solution")), "topic": r.get("type")}


def math_rows(records: Iterable[Mapping]) -> tuple[list[Row], RowReport]:
    return map_rows(records, _fields)


def load_math(path: str = "", split: str = "train") -> tuple[list[Row], RowReport]:
    """MATH rows from a local file/folder, or from the hub (every subject config) when `path` is empty."""
    from pubswap.data.records import load_records

    if path:
        return math_rows(load_records(path, split))
    return math_rows([rec for s in SUBJECTS for rec in load_records(HUB, split, config=s)])
