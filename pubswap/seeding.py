"""Every random choice is seeded from (run seed, round, step, client, purpose).

Seeds are derived with a cryptographic hash of the key tuple, so they are stable across processes,
Python versions and machines (unlike `hash()`), and unrelated keys give unrelated streams.
"""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(run_seed: int, *keys: int | str) -> int:
    """A 63-bit seed determined by `run_seed` and the ordered `keys`."""
    text = "/".join(str(k) for k in (run_seed, *keys))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def rng(run_seed: int, *keys: int | str) -> np.random.Generator:
    """A numpy Generator for one purpose, e.g. rng(seed, "balanced", round, step, client)."""
    return np.random.default_rng(derive_seed(run_seed, *keys))
