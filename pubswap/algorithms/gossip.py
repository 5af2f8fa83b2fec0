"""Serverless averaging on a graph: DSGD's mixing, CHOCO-SGD's compressed gossip, SeedFlood's flooding.

Pure tensor code over the n clients' parameter dicts (full model or LoRA tensors only: the caller
chooses which tensors take part), so it runs wherever the clients are hosted.

DSGD (one gossip step):     x_i <- sum_j W_ij x_j   over i and its neighbours.
CHOCO-SGD (Koloskova et al., 2019, Algorithm 1, after the local step): every client keeps a public
copy xh_i that all its neighbours also hold;
    q_i   = Q(x_i - xh_i)                        (compressed: top-k or rand-k values + positions)
    xh_j += q_j  for j in i and its neighbours   (the messages)
    x_i  += gamma * sum_j W_ij (xh_j - xh_i)     (consensus step size gamma)
With Q the identity and gamma = 1, xh_i = x_i after the messages and the step is DSGD's mixing
(equal up to floating-point rounding).
SeedFlood (Kim & Lee, 2026; its SubCGE detail is not public: this is OUR RECONSTRUCTION of the scheme
as described): a client's update is zeroth-order, x <- x - lr * g * z(seed), with z(seed) a Gaussian
direction regenerated from the seed and g a scalar (a two-point directional derivative), so the whole
message is (step, origin, seed, g). Messages are flooded: each round a client forwards the messages
it has not forwarded yet to its neighbours; after `diameter` rounds every client holds every
message. All clients apply the messages of a step in the same order (origin id), so they rebuild
bitwise the same parameters, and a flood applies the MEAN of the clients' steps (seedflood_scale), so
the step size does not grow with the number of clients.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from pubswap.algorithms.aggregation.payload import Sparse, dense, payload_bytes, sparsify
from pubswap.algorithms.topology import Topology
from pubswap.seeding import derive_seed

Params = dict[str, Tensor]


def mixing_rows(topo: Topology) -> list[dict[int, float]]:
    """Row i of the mixing matrix as {j: W_ij} over i and its neighbours (the only nonzero entries)."""
    W = topo.mixing()
    return [{j: float(W[i, j]) for j in sorted((i, *topo.neighbours[i]))} for i in range(topo.n)]


def mix_row(row: Mapping[int, float], xs: Mapping[int, Mapping[str, Tensor]]) -> Params:
    """sum_j row[j] x_j, summed in the order of j (the same bits wherever it is computed)."""
    order = sorted(row)
    return {k: sum(row[j] * xs[j][k] for j in order) for k in xs[order[0]]}


def mix(W: Tensor, xs: Sequence[Mapping[str, Tensor]], topo: Topology) -> list[Params]:
    """One DSGD gossip step: client i's new tensors are sum_j W_ij x_j over i and its neighbours."""
    rows = mixing_rows(topo)
    return [mix_row(rows[i], dict(enumerate(xs))) for i in range(len(xs))]


def consensus_distance(xs: Sequence[Mapping[str, Tensor]]) -> float:
    """Mean over clients of ||x_i - mean x||^2 (over all tensors)."""
    n = len(xs)
    total = 0.0
    for k in xs[0]:
        mean = sum(x[k].double() for x in xs) / n
        total += sum(float(((x[k].double() - mean) ** 2).sum()) for x in xs)
    return total / n


# --- compressors: what a CHOCO message holds -------------------------------------------------
# A message is a payload (pubswap/algorithms/aggregation/payload.py): the identity sends the dense tensor, top-k and
# rand-k a Sparse one (kept values + int32 positions or a bitmask, whichever is smaller), counted exactly.


def identity(t: Tensor, gen: torch.Generator | None = None) -> Tensor:
    return t.clone()


def _kept(t: Tensor, idx: Tensor) -> Sparse:
    keep = torch.zeros(t.numel(), dtype=torch.bool)
    keep[idx] = True
    return sparsify(t, keep)


def top_k(fraction: float) -> Callable[[Tensor, torch.Generator | None], Sparse]:
    def compress(t: Tensor, gen=None) -> Sparse:
        k = max(1, round(fraction * t.numel()))
        return _kept(t, torch.topk(t.reshape(-1).abs(), k).indices)

    return compress


def rand_k(fraction: float) -> Callable[[Tensor, torch.Generator | None], Sparse]:
    """k random entries, unscaled (the biased rand-k of the CHOCO paper, contraction delta = k/d)."""

    def compress(t: Tensor, gen=None) -> Sparse:
        k = max(1, round(fraction * t.numel()))
        return _kept(t, torch.randperm(t.numel(), generator=gen)[:k])

    return compress


def make_compressor(name: str, fraction: float) -> Callable:
    return {"identity": lambda f: identity, "top-k": top_k, "rand-k": rand_k}[name](fraction)


def choco_message(
    x: Mapping[str, Tensor], public: Mapping[str, Tensor], compress: Callable, gen: torch.Generator
) -> dict[str, Tensor | Sparse]:
    """q_i = Q(x_i - xh_i), tensor by tensor in name order (one generator for rand-k)."""
    return {k: compress(x[k] - public[k], gen) for k in sorted(x)}


def choco_consensus(
    x: Mapping[str, Tensor], i: int, row: Mapping[int, float], public: Mapping[int, Mapping[str, Tensor]], gamma: float
) -> Params:
    """x_i + gamma * sum_{j != i} W_ij (xh_j - xh_i), neighbours in id order."""
    others = [j for j in sorted(row) if j != i]
    if not others:
        return {k: v.clone() for k, v in x.items()}
    return {k: x[k] + gamma * sum(row[j] * (public[j][k] - public[i][k]) for j in others) for k in x}


@dataclass
class Choco:
    """CHOCO-SGD's gossip state: each client's public copy xh_i (held by it and its neighbours)."""

    topo: Topology
    gamma: float
    compress: Callable = identity
    seed: int = 0
    public: list[Params] = field(default_factory=list)
    initial: Mapping[str, Tensor] | None = None  # where the public copies start (None: zeros, as in the paper)

    def step(self, xs: Sequence[Mapping[str, Tensor]], t: int) -> tuple[list[Params], list[int]]:
        """The consensus step after the local updates of step t; the new x's and each client's bytes sent
        (one message per neighbour)."""
        n = len(xs)
        if not self.public:
            self.public = [
                {k: torch.zeros_like(v) if self.initial is None else self.initial[k].clone() for k, v in x.items()}
                for x in xs
            ]
        rows = mixing_rows(self.topo)
        sent = []
        for i in range(n):
            gen = torch.Generator().manual_seed(derive_seed(self.seed, "choco", t, i))
            q = choco_message(xs[i], self.public[i], self.compress, gen)
            for k, c in q.items():
                self.public[i][k] = self.public[i][k] + dense(c)
            sent.append(payload_bytes(q) * len(self.topo.neighbours[i]))
        public = dict(enumerate(self.public))
        return [choco_consensus(xs[i], i, rows[i], public, self.gamma) for i in range(n)], sent


# --- SeedFlood ------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class SeedMessage:
    step: int
    origin: int
    seed: int
    scalar: float  # lr x projected gradient: the update is x -= scalar * z(seed)

    NBYTES = 4 + 4 + 8 + 4  # step, origin (int32), seed (int64), scalar (fp32)


def direction(seed: int, like: Mapping[str, Tensor]) -> Params:
    """The Gaussian direction z(seed) over the tensors of `like` (sorted by name), regenerated anywhere."""
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(like[k].shape, generator=gen, dtype=like[k].dtype) for k in sorted(like)}


def zo_message(
    loss: Callable[[Mapping[str, Tensor]], float],
    x: Mapping[str, Tensor],
    step: int,
    origin: int,
    seed: int,
    eps: float = 1e-3,
    lr: float = 1e-3,
) -> SeedMessage:
    """A client's zeroth-order update as a message: g = (L(x + eps z) - L(x - eps z)) / (2 eps) along
    z(seed), the update x -= lr * g * z; two forward passes, no backward, and 20 bytes to send."""
    z = direction(seed, x)
    plus = {k: x[k] + eps * z[k] for k in x}
    minus = {k: x[k] - eps * z[k] for k in x}
    g = (loss(plus) - loss(minus)) / (2 * eps)
    return SeedMessage(step, origin, seed, float(torch.tensor(lr * g, dtype=torch.float32)))


def apply_messages(x: Mapping[str, Tensor], messages: Sequence[SeedMessage], scale: float = 1.0) -> Params:
    """x - scale * sum_m scalar_m z(seed_m), the messages in their canonical order (step, origin): the
    same bits on every client. A client's own local step uses scale 1; a flood uses seedflood_scale."""
    out = {k: v.clone() for k, v in x.items()}
    for m in sorted(messages):
        z = direction(m.seed, out)
        step = m.scalar * scale
        for k in out:
            out[k] -= step * z[k]
    return out


def seedflood_scale(num_clients: int) -> float:
    """A flood applies the mean of the clients' steps, not their sum: with n clients sending one step
    each, the model moves by one step's size whatever n is (as DSGD's mixing averages the clients'
    updates), so zo_lr means the same at 16 and at 128 clients."""
    return 1.0 / num_clients


def flood(
    topo: Topology,
    new: Sequence[Sequence[SeedMessage]],
    held: list[set[SeedMessage]],
    fresh: list[set[SeedMessage]],
    received: list[int] | None = None,
) -> list[int]:
    """One flooding round: client i adds its `new[i]` messages, sends every message it has not yet
    forwarded (`fresh[i]`) to each neighbour; returns the bytes each client sent. `held` / `fresh`
    are updated in place; `received[j]` (if given) is increased by the bytes client j was sent."""
    for i, msgs in enumerate(new):
        held[i].update(msgs)
        fresh[i].update(msgs)
    outgoing = [set(f) for f in fresh]
    sent = [len(o) * SeedMessage.NBYTES * len(topo.neighbours[i]) for i, o in enumerate(outgoing)]
    for f in fresh:
        f.clear()
    for i, o in enumerate(outgoing):
        for j in topo.neighbours[i]:
            if received is not None:
                received[j] += len(o) * SeedMessage.NBYTES
            unseen = o - held[j]
            held[j].update(unseen)
            fresh[j].update(unseen)
    return sent


def flood_period(topo: Topology, new: Sequence[Sequence[SeedMessage]]) -> tuple[int, list[int], list[int]]:
    """Flood one gossip period's messages (`new[i]`: client i's) until no client has anything left to
    forward. Returns the hops after which every client held every message (at most the diameter) and
    each client's bytes sent and received over the whole flood (every message crosses every edge once
    in each direction it is forwarded)."""
    n = topo.n
    held: list[set[SeedMessage]] = [set() for _ in range(n)]
    fresh: list[set[SeedMessage]] = [set() for _ in range(n)]
    total = len({m for msgs in new for m in msgs})
    sent, received = [0] * n, [0] * n
    hops, delivered_after = 0, 0
    batch = list(new)
    while hops == 0 or any(fresh):
        for i, b in enumerate(flood(topo, batch, held, fresh, received)):
            sent[i] += b
        batch = [[] for _ in range(n)]
        hops += 1
        if not delivered_after and all(len(h) == total for h in held):
            delivered_after = hops
    return delivered_after, sent, received
