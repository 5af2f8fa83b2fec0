"""Partial participation: which clients train in a round, seeded by (run seed, round) alone.

The same seed and round give the same participants in any process, so a redone or resumed round
trains the same clients. Every client is sampled with equal probability, without replacement.
"""

from __future__ import annotations

from pubswap.seeding import rng


def participants(seed: int, round_idx: int, num_clients: int, count: int) -> list[int]:
    """`count` distinct client ids out of range(num_clients), sorted; all of them if count >= num_clients."""
    if num_clients < 1 or count < 1:
        raise ValueError(f"need num_clients >= 1 and count >= 1, got {num_clients} and {count}")
    if count >= num_clients:
        return list(range(num_clients))
    picks = rng(seed, "participants", round_idx).choice(num_clients, size=count, replace=False)
    return sorted(int(c) for c in picks)
