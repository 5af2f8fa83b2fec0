"""The order in which a client goes through its private rows: shuffled epochs without replacement.

As VERL's sampler, a client sees every one of its private prompts once before any prompt repeats: its
private batches are consecutive slices of an endless sequence of permutations of its rows, one fresh
permutation per epoch, seeded by (run seed, client, epoch).

No state is kept: the position of a batch in that sequence is the number of private steps the client
took before it, which follows from the round, the step and the seeded participation schedule. A redone,
restarted or resumed round therefore draws exactly the batches it drew the first time.
"""

from __future__ import annotations

import functools

import numpy as np

from pubswap.algorithms.participation import participants
from pubswap.seeding import rng


@functools.lru_cache(maxsize=256)
def _permutation(seed: int, client: int, epoch: int, n_rows: int) -> np.ndarray:
    return rng(seed, "private_epoch", client, epoch).permutation(n_rows)


def private_batch(seed: int, client: int, n_rows: int, b: int, index: int) -> list[int]:
    """Row indices of the client's `index`-th private batch (0-based) of `b` prompts."""
    if n_rows < 1 or b < 1 or index < 0:
        raise ValueError(f"need n_rows >= 1, b >= 1, index >= 0; got {n_rows}, {b}, {index}")
    return [
        int(_permutation(seed, client, epoch, n_rows)[k])
        for epoch, k in (divmod(pos, n_rows) for pos in range(index * b, (index + 1) * b))
    ]


def private_steps_before(federation, seed: int, client: int, round_idx: int, step: int) -> int:
    """How many private steps `client` took before step `step` of round `round_idx` (rounds count from
    1, steps from 1): its private steps in earlier rounds it took part in, plus this round's earlier ones."""
    f = federation
    per_round = sum(not f.is_public_step(s) for s in range(1, f.tau + 1))
    count = f.clients_in_round()
    rounds_in = sum(client in _participants(seed, r, f.num_clients, count) for r in range(1, round_idx))
    return rounds_in * per_round + sum(not f.is_public_step(s) for s in range(1, step))


@functools.lru_cache(maxsize=4096)
def _participants(seed: int, round_idx: int, num_clients: int, count: int) -> frozenset[int]:
    return frozenset(participants(seed, round_idx, num_clients, count))
