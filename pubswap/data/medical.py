"""Medical multiple choice: a MedQA + MedMCQA mixture; the answer is a letter, topic = subject.

MedQA (hub `GBaker/MedQA-USMLE-4-options`): `question`, `options` ({"A": ..., "D": ...}), `answer_idx`
("A".."D"), `answer` (the option text), `meta_info` ("step1", "step2&3"); it has no subject, so its
topic is "USMLE <meta_info>". MedMCQA (hub `openlifescienceai/medmcqa`): `question`, `opa`..`opd`,
`cop` (index of the correct option, 0..3; -1 where unlabelled), `subject_name`, `topic_name`, `exp`.
Paper (appendix B.1): 4 clients x 3,956, 1,977 public, 1,977 test. The `choice` reward checks the letter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pubswap.data.rows import Row, RowReport, map_rows

MEDQA_HUB = "GBaker/MedQA-USMLE-4-options"
MEDMCQA_HUB = "openlifescienceai/medmcqa"
LETTERS = "ABCD"
INSTRUCTION = "Answer with the letter of the correct option, and put the letter in \\boxed{}."


def choice_prompt(question: str, options: list[str]) -> str:
    lines = [question.strip(), ""] + [f"{LETTERS[i]}. {str(o).strip()}" for i, o in enumerate(options)]
    return "\n".join(lines + ["", INSTRUCTION])


def _options_ok(options) -> bool:
    return len(options) == len(LETTERS) and all(isinstance(o, str) and o.strip() for o in options)


def _medqa_fields(r: Mapping) -> dict:
    opts = r.get("options")
    options = [opts.get(k) for k in LETTERS] if isinstance(opts, Mapping) else []
    q = r.get("question")
    ok = isinstance(q, str) and q.strip() and _options_ok(options)
    answer, meta = r.get("answer_idx"), r.get("meta_info")
    return {
        "prompt": choice_prompt(q, options) if ok else None,
        "answer": answer if answer in tuple(LETTERS) else None,
        "topic": f"USMLE {meta}" if isinstance(meta, str) and meta.strip() else "USMLE",
    }


def _medmcqa_fields(r: Mapping) -> dict:
    options = [r.get(k) for k in ("opa", "opb", "opc", "opd")]
    q = r.get("question")
    ok = isinstance(q, str) and q.strip() and _options_ok(options)
    cop = r.get("cop")
    valid_cop = isinstance(cop, int) and not isinstance(cop, bool) and 0 <= cop < len(LETTERS)
    return {
        "prompt": choice_prompt(q, options) if ok else None,
        "answer": LETTERS[cop] if valid_cop else None,
        "topic": r.get("subject_name"),
    }


def medqa_rows(records: Iterable[Mapping]) -> tuple[list[Row], RowReport]:
    return map_rows(records, _medqa_fields)


def medmcqa_rows(records: Iterable[Mapping]) -> tuple[list[Row], RowReport]:
    return map_rows(records, _medmcqa_fields)


def load_medical(medqa_path: str = "", medmcqa_path: str = "") -> tuple[list[Row], RowReport]:
    """MedQA rows followed by MedMCQA rows (the split shuffles them); one report for both."""
    from pubswap.data.records import load_records

    qa, qa_report = medqa_rows(load_records(medqa_path or MEDQA_HUB, "train"))
    mc, mc_report = medmcqa_rows(load_records(medmcqa_path or MEDMCQA_HUB, "train"))
    qa_report.kept += mc_report.kept
    qa_report.rejected.update(mc_report.rejected)
    for reason, idx in mc_report.examples.items():
        qa_report.examples.setdefault(reason, []).extend(f"medmcqa:{i}" for i in idx)
    return qa + mc, qa_report
