"""MATH (Hendrycks et al., 2021): 12.5K competition problems; topic = subject ("Algebra", "Geometry", ...).

Schema (hub `EleutherAI/hendrycks_math`, one config per subject, or `hendrycks/competition_math`):
`problem`, `solution` (with the answer in the last \\boxed{...}), `level` ("Level 1".."Level 5"),
`type` (the subject). Paper split (appendix B.1): 4 clients x 2,500 private, 1,250 public, 1,250 test
= 12,500 rows: the hub's train (7,500) and test (5,000) splits together, which is what is loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pubswap.data.answers import last_boxed
from pubswap.data.rows import Row, RowReport, map_rows

HUB = "EleutherAI/hendrycks_math"
SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)  # the hub configs
HUB_SPLITS = ("train", "test")  # the paper re-splits all 12.5K problems (its own test set among them)
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def math_prompt(problem: str) -> str:
    return f"{problem.strip()}\n{INSTRUCTION}"


def _fields(r: Mapping) -> dict:
    problem = r.get("problem")
    return {
        "prompt": math_prompt(problem) if isinstance(problem, str) and problem.strip() else None,
        "answer": last_boxed(r.get("solution")),
        "topic": r.get("type"),
    }


def math_rows(records: Iterable[Mapping]) -> tuple[list[Row], RowReport]:
    return map_rows(records, _fields)


def load_math(path: str = "") -> tuple[list[Row], RowReport]:
    """MATH rows from a local file/folder (every file in it), or from the hub when `path` is empty: every
    subject config, train AND test split (7,500 + 5,000 rows), the 12,500 problems the paper splits."""
    from pubswap.data.records import load_records

    if path:
        return math_rows(load_records(path))
    return math_rows([rec for split in HUB_SPLITS for s in SUBJECTS for rec in load_records(HUB, split, config=s)])
