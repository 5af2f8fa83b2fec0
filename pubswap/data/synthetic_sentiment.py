"""A small offline sentiment set in SST-2's schema, for the decentralized board reduced to this machine
(benchmarks/decentralized_reduced.py): the board's tasks (SST-2, RTE, BoolQ) are on the hub only.

A sentence is one to three short clauses about a film ("the plot was dull", "the cast was not
brilliant"); each clause's polarity is its adjective's, flipped by "not"; the label is the sign of the
sum (ties are not written). So a model has to learn which of 24 adjectives are positive and what
"not" does, and, with several clauses, to weigh them. Written from random.Random(f"{seed}/sentiment"):
the same seed writes the same rows.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

POSITIVE = ("great", "moving", "brilliant", "charming", "superb", "delightful", "fresh", "gripping", "witty", "warm",
            "stunning", "clever")  # fmt: skip
NEGATIVE = ("dull", "boring", "awful", "tedious", "bland", "clumsy", "weak", "painful", "flat", "messy", "stale",
            "shallow")  # fmt: skip
NOUNS = ("film", "plot", "cast", "script", "ending", "score", "story", "pacing", "dialogue", "camera work")


def clause(rng: random.Random) -> tuple[str, int]:
    """("the plot was not dull", +1): a clause and its polarity."""
    positive = rng.random() < 0.5
    adjective = rng.choice(POSITIVE if positive else NEGATIVE)
    negated = rng.random() < 0.25
    polarity = (1 if positive else -1) * (-1 if negated else 1)
    return f"the {rng.choice(NOUNS)} was {'not ' if negated else ''}{adjective}", polarity


def sentiment_records(n: int, seed: int) -> list[dict]:
    """`n` records {sentence, label (0 negative, 1 positive), idx}."""
    rng = random.Random(f"{seed}/sentiment")
    out: list[dict] = []
    while len(out) < n:
        parts = [clause(rng) for _ in range(rng.choice((1, 1, 2, 3)))]
        total = sum(p for _, p in parts)
        if total == 0:
            continue
        sentence = ", and ".join(text for text, _ in parts)
        out.append({"sentence": sentence[0].upper() + sentence[1:] + ".", "label": int(total > 0), "idx": len(out)})
    return out


def write_sentiment(path: Path | str, n: int, seed: int) -> str:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in sentiment_records(n, seed)))
    return str(path)
