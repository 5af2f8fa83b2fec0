"""The reduced decentralized board's offline sentiment set (pubswap/data/synthetic_sentiment.py): its
labels are the clauses' polarity sum, "not" flips a clause, it reads as SST-2, and a seed fixes it."""

from __future__ import annotations

from pubswap.data.classification import load_classification
from pubswap.data.synthetic_sentiment import NEGATIVE, POSITIVE, sentiment_records, write_sentiment


def polarity(sentence: str) -> int:
    """An independent reading: each clause's adjective, flipped by 'not'."""
    total = 0
    for part in sentence.rstrip(".").lower().split(", and "):
        words = part.split()
        sign = 1 if words[-1] in POSITIVE else -1 if words[-1] in NEGATIVE else 0
        assert sign, part
        total += -sign if "not" in words else sign
    return total


def test_every_label_is_the_sign_of_its_clauses_polarity_and_both_labels_occur():
    records = sentiment_records(500, seed=0)
    assert [r["idx"] for r in records] == list(range(500))
    for r in records:
        assert polarity(r["sentence"]) != 0 and r["label"] == int(polarity(r["sentence"]) > 0), r
    share = sum(r["label"] for r in records) / len(records)
    assert 0.4 < share < 0.6
    assert any(" not " in r["sentence"] for r in records) and any(", and " in r["sentence"] for r in records)


def test_it_reads_as_sst2_and_the_seed_fixes_it(tmp_path):
    path = write_sentiment(tmp_path / "s.jsonl", 50, seed=1)
    rows, report = load_classification("sst2", path)
    assert len(rows) == 50 and not report.rejected
    assert {r.answer for r in rows} == {"negative", "positive"}
    assert sentiment_records(50, seed=1) == sentiment_records(50, seed=1) != sentiment_records(50, seed=2)
