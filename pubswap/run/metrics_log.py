"""metrics.jsonl: one JSON line per finished round, with no duplicate or missing rounds after a resume.

A round's line is appended (and fsynced) before its checkpoint is committed, and every checkpoint also
keeps its own round's record. On resume from round R the log is rebuilt: parseable lines of rounds
1..R are kept (the first of any duplicate), a round missing from the log is taken from its checkpoint,
and lines of rounds after R -- written by a driver that died before committing them -- are dropped,
since those rounds are redone.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pubswap.run.checkpoint import write_text_atomic


def append_record(path: str | os.PathLike, record: Mapping[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every parseable line with an integer 'round' (a torn last line is skipped)."""
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("round"), int):
            out.append(rec)
    return out


def rebuild(
    path: str | os.PathLike, upto_round: int, record_from_checkpoint: Callable[[int], dict[str, Any] | None]
) -> list[dict[str, Any]]:
    """Rewrite the log to hold exactly rounds 1..upto_round, in order; returns those records."""
    by_round: dict[int, dict[str, Any]] = {}
    for rec in read_records(path):
        if 1 <= rec["round"] <= upto_round:
            by_round.setdefault(rec["round"], rec)
    lost = []
    for r in range(1, upto_round + 1):
        if r not in by_round:
            rec = record_from_checkpoint(r)
            if rec is None:
                lost.append(r)
            else:
                by_round[r] = rec
    if lost:
        warnings.warn(f"{path}: the metrics of rounds {lost} are neither in the log nor in a checkpoint", stacklevel=2)
    records = [by_round[r] for r in sorted(by_round)]
    write_text_atomic(Path(path), "".join(json.dumps(r) + "\n" for r in records))
    return records
