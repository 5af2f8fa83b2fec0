"""Communication graphs for serverless (decentralized) training, and their mixing matrices.

    g = make_topology("ring", 16)           # or "meshgrid", "torus", "complete", or an edge list
    W = g.mixing()                           # symmetric, doubly stochastic (Metropolis-Hastings)
    g.spectral_gap(), g.diameter()

Graphs: `ring` (i ~ i+1 mod n), `meshgrid` (a rows x cols 2-D grid, rows the largest divisor of n
<= sqrt(n), NOT wrapping: border nodes have 2 or 3 neighbours), `torus` (the same grid wrapping
around both ways), `complete`, and any undirected edge list (`edges: [[0, 1], [1, 2], ...]`).
Mixing weights are Metropolis-Hastings: W_ij = 1 / (1 + max(deg_i, deg_j)) on an edge, W_ii = 1 -
sum of the row; symmetric and doubly stochastic for any connected graph. The spectral gap 1 - |lambda_2|
sets how fast gossip averages: the consensus distance shrinks by |lambda_2|^2 per mixing step.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

KINDS = ("ring", "meshgrid", "torus", "complete", "edges")


@dataclass(frozen=True)
class Topology:
    kind: str
    n: int
    neighbours: tuple[tuple[int, ...], ...]  # sorted, without the node itself

    def mixing(self) -> torch.Tensor:
        """The n x n Metropolis-Hastings matrix (float64)."""
        W = torch.zeros(self.n, self.n, dtype=torch.float64)
        deg = [len(nb) for nb in self.neighbours]
        for i, nb in enumerate(self.neighbours):
            for j in nb:
                W[i, j] = 1.0 / (1 + max(deg[i], deg[j]))
        W += torch.diag(1.0 - W.sum(dim=1))
        return W

    def spectral_gap(self) -> float:
        """1 - the second largest eigenvalue magnitude of the mixing matrix."""
        if self.n == 1:
            return 1.0
        eig = torch.linalg.eigvalsh(self.mixing()).abs().sort(descending=True).values
        return float(1.0 - eig[1])

    def diameter(self) -> int:
        """The longest shortest path (hops); raises if the graph is not connected."""
        longest = 0
        for s in range(self.n):
            dist = self.hops_from(s)
            if len(dist) < self.n:
                raise ValueError(f"{self.kind} graph of {self.n} nodes is not connected")
            longest = max(longest, max(dist.values()))
        return longest

    def hops_from(self, s: int) -> dict[int, int]:
        dist, queue = {s: 0}, deque([s])
        while queue:
            u = queue.popleft()
            for v in self.neighbours[u]:
                if v not in dist:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        return dist

    def edges(self) -> list[tuple[int, int]]:
        return [(i, j) for i, nb in enumerate(self.neighbours) for j in nb if i < j]

    def describe(self) -> str:
        return (
            f"topology: {self.kind}, {self.n} clients, {len(self.edges())} edges, degree "
            f"{min(map(len, self.neighbours), default=0)}-{max(map(len, self.neighbours), default=0)}, "
            f"diameter {self.diameter()}, spectral gap {self.spectral_gap():.4f}"
        )


def grid_shape(n: int) -> tuple[int, int]:
    rows = max(d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0)
    return rows, n // rows


def _from_pairs(kind: str, n: int, pairs) -> Topology:
    nb: list[set[int]] = [set() for _ in range(n)]
    for i, j in pairs:
        if not (0 <= i < n and 0 <= j < n):
            raise ValueError(f"edge ({i}, {j}) names a client outside 0..{n - 1}")
        if i != j:
            nb[i].add(j)
            nb[j].add(i)
    return Topology(kind, n, tuple(tuple(sorted(s)) for s in nb))


def make_topology(kind: str, n: int, edges: Sequence[Sequence[int]] | None = None) -> Topology:
    if n < 1:
        raise ValueError(f"a topology needs at least 1 client, got {n}")
    if kind == "ring":
        return _from_pairs(kind, n, [(i, (i + 1) % n) for i in range(n)])
    if kind in ("meshgrid", "torus"):
        rows, cols = grid_shape(n)
        wrap = kind == "torus"
        pairs = []
        for r in range(rows):
            for c in range(cols):
                i = r * cols + c
                if c + 1 < cols or (wrap and cols > 2):
                    pairs.append((i, r * cols + (c + 1) % cols))
                if r + 1 < rows or (wrap and rows > 2):
                    pairs.append((i, ((r + 1) % rows) * cols + c))
        return _from_pairs(kind, n, pairs)
    if kind == "complete":
        return _from_pairs(kind, n, [(i, j) for i in range(n) for j in range(i + 1, n)])
    if kind == "edges":
        if not edges:
            raise ValueError("topology 'edges' needs an edge list")
        g = _from_pairs(kind, n, [tuple(e) for e in edges])
        g.diameter()  # raises if not connected
        return g
    raise ValueError(f"unknown topology {kind!r}; known: {KINDS}")
