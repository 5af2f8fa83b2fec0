"""The FedSRD board's eight in-domain evaluations, with the board's shot counts, and its average.

name       domain   shots  scored by                                               hub (scored split; shots)
humaneval  code     0      pass@1: the code runs against the tests (sandbox)       openai/openai_humaneval (test)
mbpp       code     3      pass@1, the same                                        mbpp sanitized (test; prompt)
medqa      medical  1      choice: the most likely option letter is the gold one   MedQA-USMLE-4-options (test; train)
medmcqa    medical  1      choice                                                  medmcqa (validation; train)
fineval    finance  0      choice                                                  SUFE-AIFLM-Lab/FinEval (val)
financeiq  finance  0      choice                                                  Duxiaoman-DI/FinanceIQ (test)
gsm8k      math     0      math-verify on the boxed answer (gold: after ####)      openai/gsm8k main (test)
math       math     0      math-verify on the boxed answer (gold: the solution's)  MATH-lighteval (test)

Choice scoring compares the log-likelihoods of the option letters after the prompt under the evaluated
weights (as the label-words objective scores its label words): no sampling and no answer format to
learn, so a model that knows the answer but words it differently is not scored wrong. Code and math are
scored on `eval_n` sampled responses per prompt (mean@n), like the run's own test set. The average
in-domain score is the plain mean of the evaluated benchmarks' scores, as the board's "Average" column
is the mean of its eight (61.19 for FedSRD on Qwen2-7B).

Shots are worked examples shown before the question, as earlier turns (chat) or earlier Alpaca blocks.
On the hub they come from the benchmark's shot split (MBPP: sanitized `prompt`, the first 3; MedQA,
MedMCQA: `train`, the first); from a local file they are its first `shots` rows, which are then not
scored. The reference repository ships no evaluation code (its README lists these benchmarks and shot
counts only), so prompts, scoring and shot choice are ours, stated here.

FinEval and FinanceIQ are Chinese multiple choice with `question`/`Question`, `A`..`D` and
`answer`/`Answer` fields; FinEval's labelled split is `val` (its test labels are not public), and both
are published per subject, so a local file or folder (one subject or several) is the dependable source.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from pubswap.data.code_tasks import code_rows
from pubswap.data.math_hendrycks import math_prompt
from pubswap.data.medical import LETTERS, choice_prompt, medmcqa_rows, medqa_rows
from pubswap.data.rows import DataError, Row, RowReport, map_rows, nonblank

CHOICE_INSTRUCTION = "Answer with the letter of the correct option."


@dataclass(frozen=True)
class Benchmark:
    name: str
    domain: str
    shots: int
    scoring: str  # code | choice | math
    hub: tuple[str, str | None, str]  # id, config, scored split
    shot_split: str = ""  # the hub split shots come from ("" : none needed)


BENCHMARKS = {
    b.name: b
    for b in (
        Benchmark("humaneval", "code", 0, "code", ("openai/openai_humaneval", None, "test")),
        Benchmark("mbpp", "code", 3, "code", ("google-research-datasets/mbpp", "sanitized", "test"), "prompt"),
        Benchmark("medqa", "medical", 1, "choice", ("GBaker/MedQA-USMLE-4-options", None, "test"), "train"),
        Benchmark("medmcqa", "medical", 1, "choice", ("openlifescienceai/medmcqa", None, "validation"), "train"),
        Benchmark("fineval", "finance", 0, "choice", ("SUFE-AIFLM-Lab/FinEval", None, "val")),
        Benchmark("financeiq", "finance", 0, "choice", ("Duxiaoman-DI/FinanceIQ", None, "test")),
        Benchmark("gsm8k", "math", 0, "math", ("openai/gsm8k", "main", "test")),
        Benchmark("math", "math", 0, "math", ("DigitalLearningGmbH/MATH-lighteval", None, "test")),
    )
}


def _first(r: Mapping, *keys: str):
    return next((r[k] for k in keys if r.get(k) is not None), None)


def _finance_fields(r: Mapping, topic: str) -> dict:
    q = nonblank(_first(r, "question", "Question"))
    options = [_first(r, k) for k in LETTERS]
    ok = q and all(isinstance(o, (str, int, float)) and str(o).strip() for o in options)
    answer = _first(r, "answer", "Answer")
    answer = answer.strip().upper() if isinstance(answer, str) else None
    return {
        "prompt": choice_prompt(q, [str(o) for o in options]) if ok else None,
        "answer": answer if answer in tuple(LETTERS) else None,
        "topic": topic,
    }


def _gsm8k_fields(r: Mapping) -> dict:
    q, a = nonblank(r.get("question")), nonblank(r.get("answer"))
    gold = a.rsplit("####", 1)[1].strip().replace(",", "") if a and "####" in a else None
    return {"prompt": math_prompt(q) if q else None, "answer": gold or None, "topic": "gsm8k"}


def _math_fields(r: Mapping) -> dict:
    from pubswap.data.answers import last_boxed

    problem, solution = nonblank(r.get("problem")), nonblank(r.get("solution"))
    return {
        "prompt": math_prompt(problem) if problem else None,
        "answer": last_boxed(solution) if solution else None,
        "topic": "math",
    }


def _choice_rows(rows: list[Row]) -> list[Row]:
    """Choice rows ask for the letter and carry the letters as their choices (scored by likelihood)."""
    return [replace(r, prompt=_letter_prompt(r.prompt), choices=tuple(LETTERS)) for r in rows]


def _letter_prompt(prompt: str) -> str:
    """medical.py's choice prompt asks for a boxed letter (the GRPO reward's format); scored by likelihood
    the answer is the bare letter."""
    head, _, _ = prompt.rpartition("\n\n")
    return f"{head}\n\n{CHOICE_INSTRUCTION}"


def benchmark(name: str) -> Benchmark:
    """Benchmark `name`, or one clear error naming the known ones."""
    if name not in BENCHMARKS:
        raise DataError(f"eval_suite: unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]


def benchmark_rows(name: str, records: Iterable[Mapping]) -> tuple[list[Row], RowReport]:
    """Rows of benchmark `name` from records in its public schema."""
    benchmark(name)
    if name in ("humaneval", "mbpp"):
        return code_rows(name, records)
    if name == "medqa":
        rows, report = medqa_rows(records)
    elif name == "medmcqa":
        rows, report = medmcqa_rows(records)
    elif name in ("fineval", "financeiq"):
        rows, report = map_rows(records, lambda r: _finance_fields(r, name))
    elif name == "gsm8k":
        return map_rows(records, _gsm8k_fields)
    else:  # math (benchmark() refused any other name)
        return map_rows(records, _math_fields)
    return _choice_rows(rows), report


def shot_text(bench: Benchmark, row: Row, record: Mapping) -> str:
    """A worked example's answer, in the form the question asks for."""
    if bench.scoring == "choice":
        return row.answer
    if bench.name == "mbpp":
        return f"```python\n{str(record.get('code', '')).strip()}\n```"
    raise ValueError(f"{bench.name} takes no shots")


def with_shots(bench: Benchmark, rows: Sequence[Row], shots: Sequence[tuple[Row, Mapping]]) -> list[Row]:
    """Each row with the worked examples as earlier turns."""
    context = tuple(
        turn
        for row, record in shots
        for turn in (
            {"role": "user", "content": row.prompt},
            {"role": "assistant", "content": shot_text(bench, row, record)},
        )
    )
    return [replace(r, context=context) for r in rows]


def load_benchmark(name: str, path: str = "", limit: int = 0) -> tuple[list[Row], RowReport]:
    """Benchmark `name`'s scored rows with its shots, from a local file or folder in the public schema
    (its first `shots` rows are the shots) or from the hub; the first `limit` scored rows (0: all)."""
    from pubswap.data.records import load_records

    bench = benchmark(name)
    hub_id, config, split = bench.hub
    if path:
        records = load_records(path, "train")
        shot_records, records = records[: bench.shots], records[bench.shots :]
    else:
        records = load_records(hub_id, split, config)
        shot_records = load_records(hub_id, bench.shot_split, config)[: bench.shots] if bench.shots else []
    shot_rows, _ = benchmark_rows(name, shot_records)
    if len(shot_rows) < bench.shots:
        raise DataError(f"eval_suite.{name}: {bench.shots} shot(s) needed, {len(shot_rows)} usable in {path or hub_id}")
    rows, report = benchmark_rows(name, records)
    if limit:
        rows = rows[:limit]
    if not rows:
        raise DataError(f"eval_suite.{name}: no usable rows in {path or hub_id} ({report})")
    return with_shots(bench, rows, list(zip(shot_rows, shot_records))), report


def in_domain_average(scores: Mapping[str, float]) -> float:
    """The board's Average column: the plain mean of the benchmarks' scores."""
    if not scores:
        raise ValueError("no benchmark scores to average")
    return sum(scores.values()) / len(scores)
