"""DeepMath-103K (He et al., 2025): hard, verifiable problems; topic = the second level of its taxonomy.

Schema (hub `zwhe99/DeepMath-103K`): `question`, `final_answer`, `difficulty` (float), `topic`
("Mathematics -> Algebra -> Linear Algebra -> Matrices"), `r1_solution_1..3`. The topic used for the
heterogeneous split is the area after "Mathematics" ("Algebra", "Calculus", "Discrete Mathematics",
...). Paper (appendix B.1): a random 20K subsample; 4 clients x 4,000, 3,000 public, 1,000 test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pubswap.data.math_hendrycks import math_prompt
from pubswap.data.rows import Row, RowReport, map_rows
from pubswap.seeding import rng

HUB = "zwhe99/DeepMath-103K"
PAPER_SUBSAMPLE = 20_000


def topic_area(topic) -> str | None:
    """'Mathematics -> Algebra -> Linear Algebra' -> 'Algebra' (a one-level topic is kept as is)."""
    if not isinstance(topic, str) or not topic.strip():
        return None
    parts = [p.strip() for p in topic.split("->") if p.strip()]
    return parts[1] if len(parts) > 1 else parts[0]


def _fields(r: Mapping) -> dict:
    q = r.get("question")
    return {
        "prompt": math_prompt(q) if isinstance(q, str) and q.strip() else None,
        "answer": r.get("final_answer"),
        "topic": topic_area(r.get("topic")),
    }


def deepmath_rows(records: Iterable[Mapping], subsample: int = 0, seed: int = 0) -> tuple[list[Row], RowReport]:
    """Rows of the records; with `subsample` > 0, that many valid rows drawn without replacement (seeded)."""
    rows, report = map_rows(records, _fields)
    if 0 < subsample < len(rows):
        keep = sorted(rng(seed, "deepmath_subsample").choice(len(rows), size=subsample, replace=False))
        rows = [rows[int(i)] for i in keep]
    return rows, report


def load_deepmath(path: str = "", subsample: int = PAPER_SUBSAMPLE, seed: int = 0) -> tuple[list[Row], RowReport]:
    from pubswap.data.records import load_records

    return deepmath_rows(load_records(path or HUB, "train"), subsample, seed)
