from collections import Counter

import pytest

from pubswap.data import Row, dirichlet_split, format_histogram, topic_histogram, validate_rows


def rows(n_per_topic=100, topics=("a", "b", "c", "d", "e")):
    return [Row(f"{t}-q{i}", str(i), t) for t in topics for i in range(n_per_topic)]


def test_validate_rows_counts_bad_rows_by_reason():
    raw = [
        {"prompt": "1+1?", "answer": "2", "topic": "add"},
        {"prompt": "  ", "answer": "2", "topic": "add"},
        {"prompt": "2+2?", "answer": None, "topic": "add"},
        {"prompt": "3+3?", "answer": 6, "topic": "add"},  # numeric answers are fine
        {"prompt": "4+4?", "answer": "", "topic": "add"},
        {"prompt": "5+5?", "answer": "10"},
        "not a row",
    ]
    kept, report = validate_rows(raw)
    assert [r.prompt for r in kept] == ["1+1?", "3+3?"] and kept[1].answer == "6"
    assert report.kept == 2 and report.total_rejected == 5
    assert dict(report.rejected) == {"empty_prompt": 1, "missing_answer": 2, "missing_topic": 1, "not_a_mapping": 1}
    assert report.examples["missing_answer"] == [2, 4]
    assert "missing_answer: 2" in str(report)
    kept, report = validate_rows(raw, default_topic="misc")
    assert len(kept) == 3 and kept[-1].topic == "misc"


def test_split_sizes_disjoint_and_reproducible():
    data = rows()
    s = dirichlet_split(data, num_clients=4, per_client=80, alpha=0.3, public_size=50, test_size=40, seed=3)
    assert [len(c) for c in s.clients] == [80] * 4 and len(s.public) == 50 and len(s.test) == 40
    every = [r for c in s.clients for r in c] + s.public + s.test
    assert len(set(every)) == len(every)  # disjoint
    again = dirichlet_split(data, 4, 80, 0.3, 50, 40, seed=3)
    assert again == s
    assert dirichlet_split(data, 4, 80, 0.3, 50, 40, seed=4) != s


def _skew(split):
    """Mean over clients of the share of the client's most frequent topic."""
    return sum(max(Counter(r.topic for r in c).values()) / len(c) for c in split.clients) / len(split.clients)


def test_smaller_alpha_is_more_heterogeneous():
    data = rows(n_per_topic=400)
    skews = {
        a: sum(_skew(dirichlet_split(data, 4, 200, a, 100, 100, seed=s)) for s in range(5)) / 5
        for a in (0.1, 0.3, 100.0)
    }
    assert skews[0.1] > skews[0.3] > skews[100.0]
    assert skews[100.0] < 0.35  # near-uniform over 5 topics (0.2 each)
    assert skews[0.1] > 0.6


def test_exhausted_topics_fall_back_to_remaining_ones():
    # one client asks for everything there is; topics run out and the prior is renormalised
    data = rows(n_per_topic=10, topics=("a", "b"))
    s = dirichlet_split(data, num_clients=1, per_client=20, alpha=0.01, public_size=0, test_size=0, seed=0)
    assert Counter(r.topic for r in s.clients[0]) == {"a": 10, "b": 10}


def test_split_rejects_too_few_rows_with_the_arithmetic():
    with pytest.raises(ValueError, match=r"4 clients x 200 \+ 10 public \+ 10 test = 820"):
        dirichlet_split(rows(), 4, 200, 0.3, 10, 10, seed=0)


def test_topic_histogram_counts():
    s = dirichlet_split(rows(), 2, 100, 0.3, 30, 20, seed=0)
    h = topic_histogram(s)
    assert set(h) == {"client_0", "client_1", "public", "test"}
    assert sum(h["client_0"].values()) == 100 and sum(h["public"].values()) == 30
    for t in "abcde":
        assert sum(h[name][t] for name in h) <= 100
    assert h["client_1"]["a"] == sum(r.topic == "a" for r in s.clients[1])
    table = format_histogram(s)
    assert table.splitlines()[0].split() == ["set", "a", "b", "c", "d", "e", "total"]
    assert table.splitlines()[1].split()[-1] == "100"
