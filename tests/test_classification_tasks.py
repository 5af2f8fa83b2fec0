"""SST-2, RTE and BoolQ from fixture files in their public schemas (GLUE, SuperGLUE, google/boolq),
malformed rows included; the gold label verifies under the exact reward."""

from collections import Counter

import pytest
from dataset_fixtures import write

from pubswap.config import load_config
from pubswap.data.classification import classification_rows
from pubswap.data.records import load_records
from pubswap.data.rewards import exact_match_reward
from pubswap.data.sources import load_source


def sst2_records():
    good = [
        {"sentence": f"a {'fine' if i % 3 else 'dull'} film number {i} ", "label": int(i % 3 != 0), "idx": i}
        for i in range(30)
    ]
    bad = [
        {"sentence": "unlabelled test row", "label": -1, "idx": 30},  # GLUE's test split
        {"sentence": "  ", "label": 1, "idx": 31},
    ]
    return good + bad, {"negative": 10, "positive": 20}


def rte_records():
    glue = [
        {"sentence1": f"Premise {i}.", "sentence2": f"Hypothesis {i}.", "label": i % 2, "idx": i} for i in range(10)
    ]
    return glue, {"yes": 5, "no": 5}


def boolq_records():
    hub = [{"question": f"is {i} even", "answer": i % 2 == 0, "passage": f"Passage about {i}."} for i in range(8)]
    bad = [{"question": "no passage", "answer": True, "passage": None}]
    return hub + bad, {"yes": 4, "no": 4}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_sst2_rows_topics_and_the_exact_reward(tmp_path, fmt):
    records, topics = sst2_records()
    rows, report = classification_rows("sst2", load_records(str(write(records, tmp_path / f"sst2.{fmt}"))))
    assert Counter(r.topic for r in rows) == topics and report.kept == 30
    assert dict(report.rejected) == {"missing_answer": 1, "empty_prompt": 1}
    r = rows[1]
    assert r.prompt.startswith("Sentence: a fine film number 1\n") and r.prompt.endswith("in \\boxed{}.")
    assert r.answer == "positive"
    assert exact_match_reward("so \\boxed{positive}", r.answer) == 1.0
    assert exact_match_reward("so \\boxed{negative}", r.answer) == 0.0


def test_rte_in_glue_and_superglue_schemas(tmp_path):
    records, topics = rte_records()
    rows, report = classification_rows("rte", load_records(str(write(records, tmp_path / "rte.jsonl"))))
    assert Counter(r.topic for r in rows) == topics and not report.rejected
    assert rows[0].answer == "yes" and rows[1].answer == "no"  # 0 entailment, 1 not_entailment
    superglue = [{"premise": "P.", "hypothesis": "H.", "label": 1, "idx": 0}]
    (row,), _ = classification_rows("rte", superglue)
    assert row.prompt.startswith("Premise: P.\nHypothesis: H.") and row.answer == "no"


def test_boolq_booleans_and_superglue_labels(tmp_path):
    records, topics = boolq_records()
    rows, report = classification_rows("boolq", load_records(str(write(records, tmp_path / "boolq.parquet"))))
    assert Counter(r.topic for r in rows) == topics and dict(report.rejected) == {"empty_prompt": 1}
    assert rows[0].answer == "yes" and "Question: is 0 even?" in rows[0].prompt
    _, report = classification_rows("boolq", [{"question": "text answer", "answer": "yes", "passage": "p"}])
    assert dict(report.rejected) == {"missing_answer": 1}  # only a bool (or SuperGLUE's 0/1) is a label
    (row,), _ = classification_rows("boolq", [{"question": "q?", "passage": "p", "label": 0, "idx": 3}])
    assert row.answer == "no"


def test_a_config_with_a_classification_source_loads_its_file(tmp_path, tiny_model_dir):
    records, _ = rte_records()
    path = write(records, tmp_path / "rte.jsonl")
    cfg = load_config(None, [f"model.path={tiny_model_dir}", "data.source=rte", f"data.paths=[{path}]"])
    assert cfg.data.verifier == "exact"
    rows, report = load_source(cfg.data, 0, cfg.seed)
    assert len(rows) == 10 and report.kept == 10
