"""The one row type every dataset maps to, and validation that counts what it rejects."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


class DataError(ValueError):
    """Input data a run cannot use (a malformed file, too few rows): one line, exit 2 from the driver."""


@dataclass(frozen=True)
class Row:
    prompt: str
    answer: str
    topic: str
    ref: str = ""  # where the row came from, for verifiers that need the source entry (reasoning-gym)
    context: tuple = ()  # chat turns shown before the prompt (a one-shot example), as {"role", "content"}
    choices: tuple = ()  # a classification task's label words, `answer` among them (objective label-words)

    def as_pair(self) -> tuple[str, str]:
        return self.prompt, self.answer


@dataclass
class RowReport:
    """What validation kept and what it rejected, by reason, with the first few bad row indices."""

    kept: int = 0
    rejected: Counter = field(default_factory=Counter)
    examples: dict[str, list[int]] = field(default_factory=dict)

    @property
    def total_rejected(self) -> int:
        return sum(self.rejected.values())

    def __str__(self) -> str:
        if not self.rejected:
            return f"{self.kept} rows kept, none rejected"
        reasons = ", ".join(f"{r}: {n} (e.g. rows {self.examples[r]})" for r, n in sorted(self.rejected.items()))
        return f"{self.kept} rows kept, {self.total_rejected} rejected — {reasons}"


def nonblank(x) -> str | None:
    """`x` if it is a string with something besides whitespace, else None (a loader's optional field)."""
    return x if isinstance(x, str) and x.strip() else None


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value.strip() if isinstance(value, str) else None


def validate_rows(raw: Iterable[Mapping], default_topic: str | None = None) -> tuple[list[Row], RowReport]:
    """Keep rows with a non-empty prompt, answer and topic; count the rest by reason.

    Numbers are accepted as answers ("42" and 42 alike). A row missing its topic takes
    `default_topic` when given, else it is rejected.
    """
    rows: list[Row] = []
    report = RowReport()

    def reject(reason: str, i: int) -> None:
        report.rejected[reason] += 1
        ex = report.examples.setdefault(reason, [])
        if len(ex) < 5:
            ex.append(i)

    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            reject("not_a_mapping", i)
            continue
        prompt, answer, topic = _text(item.get("prompt")), _text(item.get("answer")), _text(item.get("topic"))
        if not prompt:
            reject("empty_prompt", i)
        elif not answer:
            reject("missing_answer", i)
        elif not topic and not default_topic:
            reject("missing_topic", i)
        else:
            rows.append(
                Row(
                    prompt=prompt,
                    answer=answer,
                    topic=topic or default_topic,
                    ref=str(item.get("ref") or ""),
                    context=tuple(item.get("context") or ()),
                    choices=tuple(item.get("choices") or ()),
                )
            )
    report.kept = len(rows)
    return rows, report


def map_rows(records: Iterable, to_row_fields) -> tuple[list[Row], RowReport]:
    """validate_rows over `to_row_fields(record)` (a {"prompt", "answer", "topic"} mapping) for every
    mapping record; anything else is counted as not_a_mapping. Each dataset loader is one such function."""
    return validate_rows(to_row_fields(r) if isinstance(r, Mapping) else r for r in records)
