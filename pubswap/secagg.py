"""Secure aggregation for the linear strategies: pairwise additive masks (Bonawitz et al. 2017).

In an allreduce of A actors (the unit that sends: an actor first sums its hosted participants'
weighted tensors), for each aggregation every actor

  1. draws a fresh X25519 key pair and publishes the public key (the driver relays the A public keys);
  2. agrees a secret with every other actor: X25519, then HKDF-SHA256 bound to the run's collective
     group and the round, so no two aggregations share a mask;
  3. encodes its vector in fixed point (int64, `SCALE` = 2^32 per unit) and adds, modulo 2^64, the
     mask PRG(secret) of every peer of higher rank and subtracts that of every peer of lower rank;
  4. the allreduce sums the masked vectors; the masks cancel exactly and the sum is decoded.

Every masked vector is uniform on Z_2^64 whatever the tensors it hides, so the other actors, Ray's
object store and anyone on the wire see noise; only the sum is learned. The decoded sum differs from
the float allreduce's by the fixed-point rounding (at most A * 2^-33 per entry), and is the same on every
actor and on a redone round (the masks cancel whatever they are), so resume stays bitwise.

What it does not do: it has no dropout recovery of its own; a participant lost in a round makes the
run's recovery redo the round with fresh keys (docs/faults.md), and a key pair is never reused. The
public keys are relayed unauthenticated by the driver, so a malicious driver could stand in the
middle; the actors hosting several clients see those clients' tensors; with two actors, each learns
the other's contribution from the sum and its own. The PRG is NumPy's Philox keyed with 128 bits of
the secret: a counter-based generator built from a block cipher design, not a vetted stream cipher.
"""

from __future__ import annotations

import numpy as np
import torch
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from torch import Tensor

SCALE_BITS = 32
SCALE = float(2**SCALE_BITS)
LIMIT = float(2**29)  # |value| bound: A <= 2^30 actors' sums of such values stay inside int64


class KeyPair:
    """One actor's key pair for one aggregation."""

    def __init__(self) -> None:
        self._private = X25519PrivateKey.generate()
        self.public = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def shared_secret(self, peer_public: bytes, context: bytes) -> bytes:
        """32 bytes that this actor and the peer (and no one else) derive, for this `context`."""
        raw = self._private.exchange(X25519PublicKey.from_public_bytes(peer_public))
        return HKDF(algorithm=SHA256(), length=32, salt=None, info=b"pubswap-secagg/" + context).derive(raw)


def mask(secret: bytes, n: int) -> np.ndarray:
    """n uniform uint64 from the pair's secret."""
    key = np.frombuffer(secret[:16], dtype=np.uint64)
    counter = np.concatenate([np.frombuffer(secret[16:], dtype=np.uint64), np.zeros(2, dtype=np.uint64)])
    return np.random.Generator(np.random.Philox(key=key, counter=counter)).integers(
        0, 2**64, size=n, dtype=np.uint64, endpoint=False
    )


def encode(flat: Tensor) -> np.ndarray:
    """A float vector in fixed point, as uint64 (two's complement)."""
    x = flat.detach().double()
    worst = float(x.abs().max()) if x.numel() else 0.0
    if not worst < LIMIT:
        raise ValueError(f"secure aggregation: a value of magnitude {worst:g} is outside the fixed-point range")
    return torch.round(x * SCALE).to(torch.int64).numpy().view(np.uint64)


def decode(total: np.ndarray) -> Tensor:
    """The float32 vector of a sum of encoded vectors (uint64 or int64, two's complement)."""
    return torch.from_numpy(total.view(np.int64).astype(np.float64) / SCALE).float()


def masked(flat: Tensor, rank: int, publics: list[bytes], keys: KeyPair, context: bytes) -> np.ndarray:
    """What actor `rank` sends into the allreduce: its encoded vector plus its pairwise masks (mod 2^64).
    `publics[j]` is actor j's public key for this aggregation."""
    out = encode(flat)
    for peer, public in enumerate(publics):
        if peer == rank:
            continue
        m = mask(keys.shared_secret(public, context), out.size)
        out = out + m if peer > rank else out - m  # uint64 arithmetic wraps modulo 2^64
    return out
