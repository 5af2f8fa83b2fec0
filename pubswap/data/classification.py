"""The decentralized leaderboard's tasks as verifiable-reward tasks: SST-2, RTE and BoolQ.

The label is the answer (one word in \\boxed{}), scored by the `exact` reward; the topic, which the
Dirichlet split skews across clients, is the label (label skew). Each row carries its task's label words
(`choices`), which the objective label-words scores (pubswap/algorithms/label_words.py). Public schemas
accepted:

  sst2   GLUE (hub `nyu-mll/glue`, config sst2): `sentence`, `label` (0 negative, 1 positive; -1 in the
         unlabelled test split, rejected as missing_answer)
  rte    GLUE (config rte): `sentence1`, `sentence2`, `label` (0 entailment, 1 not_entailment), or
         SuperGLUE: `premise`, `hypothesis`, `label` (same coding)
  boolq  hub `google/boolq`: `question`, `passage`, `answer` (bool), or SuperGLUE: `label` (0 False, 1 True)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pubswap.data.rows import Row, RowReport, map_rows

HUB = {"sst2": ("nyu-mll/glue", "sst2"), "rte": ("nyu-mll/glue", "rte"), "boolq": ("google/boolq", None)}
SST2_LABELS = ("negative", "positive")
RTE_LABELS = ("yes", "no")  # entailment, not_entailment
BOOLQ_LABELS = ("no", "yes")  # False, True


def _text(x) -> str | None:
    return x.strip() if isinstance(x, str) and x.strip() else None


def _label(x, names: tuple[str, str]) -> str | None:
    if isinstance(x, bool):
        return names[int(x)]
    if isinstance(x, int) and 0 <= x < len(names):
        return names[x]
    return None


def _sst2_fields(r: Mapping) -> dict:
    s = _text(r.get("sentence"))
    answer = _label(r.get("label"), SST2_LABELS)
    prompt = (
        (
            f"Sentence: {s}\n\nIs the sentiment of this sentence positive or negative? Answer with one word, "
            "positive or negative, in \\boxed{}."
        )
        if s
        else None
    )
    return {"prompt": prompt, "answer": answer, "topic": answer, "choices": SST2_LABELS}


def _rte_fields(r: Mapping) -> dict:
    premise = _text(r.get("sentence1", r.get("premise")))
    hypothesis = _text(r.get("sentence2", r.get("hypothesis")))
    answer = _label(r.get("label"), RTE_LABELS)
    prompt = (
        (
            f"Premise: {premise}\nHypothesis: {hypothesis}\n\nDoes the premise entail the hypothesis? Answer "
            "with one word, yes or no, in \\boxed{}."
        )
        if premise and hypothesis
        else None
    )
    return {"prompt": prompt, "answer": answer, "topic": answer, "choices": RTE_LABELS}


def _boolq_fields(r: Mapping) -> dict:
    passage, question = _text(r.get("passage")), _text(r.get("question"))
    raw = r.get("answer") if "answer" in r else r.get("label")
    answer = _label(raw, BOOLQ_LABELS) if isinstance(raw, (bool, int)) else None
    if question and not question.endswith("?"):
        question += "?"
    prompt = (
        f"Passage: {passage}\n\nQuestion: {question}\nAnswer with one word, yes or no, in \\boxed{{}}."
        if passage and question
        else None
    )
    return {"prompt": prompt, "answer": answer, "topic": answer, "choices": BOOLQ_LABELS}


FIELDS = {"sst2": _sst2_fields, "rte": _rte_fields, "boolq": _boolq_fields}


def classification_rows(task: str, records: Iterable[Mapping]) -> tuple[list[Row], RowReport]:
    return map_rows(records, FIELDS[task])


def load_classification(task: str, path: str = "") -> tuple[list[Row], RowReport]:
    """`task` rows from a local file/folder in one of its public schemas, or the hub's train split."""
    from pubswap.data.records import load_records

    name, config = HUB[task]
    return classification_rows(task, load_records(path or name, "train", None if path else config))
