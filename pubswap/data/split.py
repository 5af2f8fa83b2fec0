"""Heterogeneous federated split: a Dirichlet(alpha) topic prior per client, equal-size clients.

Procedure (Acar et al., 2021, FedDyn's "Dirichlet" split with balanced client sizes):
  1. Shuffle; carve a uniform held-out test set and a uniform public set (both stay with the server).
  2. Each client n draws topic priors q_n ~ Dir(alpha * 1_T).
  3. Until every client holds `per_client` rows: pick a random client that still has room, draw a
     topic from its prior restricted to topics that still have rows (renormalised), and give it the
     next unused row of that topic.
Smaller alpha -> more skewed clients (the paper uses 0.3, and 0.1 for high heterogeneity).
All sets are disjoint; the same seed gives the same split.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pubswap.data.rows import DataError, Row
from pubswap.seeding import rng


@dataclass(frozen=True)
class FederatedSplit:
    clients: list[list[Row]]
    public: list[Row]
    test: list[Row]
    # data.client_paths: client i's rows are read from client_paths[i] by its actor; clients[i] is empty here
    client_paths: tuple[str, ...] = ()

    @property
    def topics(self) -> list[str]:
        return sorted({r.topic for part in (*self.clients, self.public, self.test) for r in part})

    def fingerprint(self, client_sha256: Sequence[str] = ()) -> str:
        """sha256 over every row of every set, in order: a resumed run must see the same data. With client
        files, each client's part is the sha256 of its rows (rows_sha256) that its actor reports."""
        if len(client_sha256) != len(self.client_paths):
            raise ValueError(f"{len(self.client_paths)} client files need as many digests, got {len(client_sha256)}")
        h = hashlib.sha256()
        for i, sha in enumerate(client_sha256):
            h.update(f"[client_{i}:file:{sha}]".encode())
        parts = [] if self.client_paths else [(f"client_{i}", c) for i, c in enumerate(self.clients)]
        for name, part in [*parts, ("public", self.public), ("test", self.test)]:
            _hash_rows(h, name, part)
        return h.hexdigest()


def _hash_rows(h, name: str, rows: Sequence[Row]) -> None:
    h.update(f"[{name}:{len(rows)}]".encode())
    for r in rows:
        extra = [r.ref, list(r.context)] if r.ref or r.context else []  # older rows hash as before
        h.update(json.dumps([r.prompt, r.answer, r.topic, *extra]).encode())


def rows_sha256(rows: Sequence[Row]) -> str:
    """One client's rows, in order: what its actor reports when it read them from its own file."""
    h = hashlib.sha256()
    _hash_rows(h, "rows", rows)
    return h.hexdigest()


def public_and_test(rows: Sequence[Row], public_size: int, test_size: int, seed: int) -> tuple[list, list]:
    """The public and test sets alone (data.client_paths: the clients' rows are elsewhere), carved as
    dirichlet_split carves them."""
    if len(rows) < public_size + test_size:
        raise DataError(f"{len(rows)} rows are too few: {public_size} public + {test_size} test")
    return _carve(rows, public_size, test_size, rng(seed, "split"))[:2]


def _carve(rows: Sequence[Row], public_size: int, test_size: int, gen) -> tuple[list, list, list]:
    """Test, public and the remaining rows, after one seeded shuffle."""
    order = gen.permutation(len(rows))
    test = [rows[i] for i in order[:test_size]]
    public = [rows[i] for i in order[test_size : test_size + public_size]]
    return public, test, [rows[i] for i in order[test_size + public_size :]]


def dirichlet_split(
    rows: Sequence[Row],
    num_clients: int,
    per_client: int,
    alpha: float,
    public_size: int,
    test_size: int,
    seed: int,
) -> FederatedSplit:
    if num_clients < 1 or per_client < 1:
        raise ValueError("num_clients and per_client must be >= 1")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    if public_size < 0 or test_size < 0:
        raise ValueError("public_size and test_size must be >= 0")
    needed = num_clients * per_client + public_size + test_size
    if len(rows) < needed:
        raise DataError(
            f"{len(rows)} rows are too few: {num_clients} clients x {per_client} + "
            f"{public_size} public + {test_size} test = {needed}"
        )

    gen = rng(seed, "split")
    public, test, remaining = _carve(rows, public_size, test_size, gen)

    topics = sorted({r.topic for r in remaining})
    by_topic: list[list[Row]] = [[r for r in remaining if r.topic == t] for t in topics]
    left = np.array([len(b) for b in by_topic])
    priors = gen.dirichlet(np.full(len(topics), alpha), size=num_clients)
    room = np.full(num_clients, per_client)
    clients: list[list[Row]] = [[] for _ in range(num_clients)]

    while room.sum() > 0:
        n = int(gen.choice(np.flatnonzero(room > 0)))
        p = priors[n] * (left > 0)
        p = p / p.sum() if p.sum() > 0 else (left > 0) / (left > 0).sum()
        t = int(gen.choice(len(topics), p=p))
        left[t] -= 1
        clients[n].append(by_topic[t][left[t]])
        room[n] -= 1
    return FederatedSplit(clients=clients, public=public, test=test)


def topic_histogram(split: FederatedSplit) -> dict[str, dict[str, int]]:
    """{set name: {topic: count}} for client_0..client_{N-1} (not with client files), public and test."""
    clients = {} if split.client_paths else {f"client_{i}": c for i, c in enumerate(split.clients)}
    parts = clients | {"public": split.public, "test": split.test}  # client files: the driver has not read them
    topics = split.topics
    return {name: {t: Counter(r.topic for r in part)[t] for t in topics} for name, part in parts.items()}


def format_histogram(split: FederatedSplit) -> str:
    """The histogram as a fixed-width table, one row per set, one column per topic."""
    hist = topic_histogram(split)
    topics = split.topics
    width = max([len(t) for t in topics] + [6])
    lines = ["set".ljust(10) + "".join(t.rjust(width + 1) for t in topics) + "total".rjust(8)]
    for name, counts in hist.items():
        lines.append(
            name.ljust(10)
            + "".join(str(counts[t]).rjust(width + 1) for t in topics)
            + str(sum(counts.values())).rjust(8)
        )
    return "\n".join(lines)
