"""The interface every aggregation strategy implements, and the round it defines.

A round of any strategy, with `start` the round-start global adapter every client holds:

    upload_i  = strategy.upload(start, trained_i, ctx_i)            # on client i: what it sends up
    download  = strategy.server_aggregate(start, uploads, weights, ctx)   # on the server: what it sends down
    new       = strategy.apply_download(start, download, ctx)       # on every client (and for the checkpoint)

`run_round` composes the three in one process (tests, reference numbers); the Ray path runs them on the
client actors and the ServerActor with the payloads travelling through the object store. A *linear*
strategy (the new global is the weighted mean of dense uploads) may instead run as one allreduce among
the client actors, which gives the same tensors without a trip through the server.

Strategies hold no state across rounds: what one needs (FedSRD's factor parity, FFA-LoRA's frozen A)
is a function of the round index, the run seed and the global adapter, which the checkpoint holds, so
resume and actor restarts need nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from pubswap.algorithms.aggregation.payload import Payload, dense, payload_bytes
from pubswap.lora import Adapter


def normalized_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    """Uniform when `weights` is None, else `weights` scaled to sum to 1 (all must be >= 0, sum > 0)."""
    if weights is None:
        return [1.0 / n] * n
    if len(weights) != n:
        raise ValueError(f"{len(weights)} weights for {n} adapters")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be >= 0 with a positive sum, got {list(weights)}")
    total = float(sum(weights))
    return [float(w) / total for w in weights]


@dataclass(frozen=True)
class Context:
    """Who runs a strategy's step: every random choice is seeded from (seed, round, client, key)."""

    seed: int = 0
    round: int = 1
    client: int | None = None  # None: the server, or the global adapter
    rank: int | None = None  # the client's own LoRA rank when below the adapters' (FlexLoRA); None: all


@dataclass
class RoundResult:
    adapter: Adapter  # the new global adapter
    upload_bytes: list[int] = field(default_factory=list)  # per client, in the order given
    download_bytes: list[int] = field(default_factory=list)
    upload_board: list[int] = field(default_factory=list)  # the same in the leaderboard's convention (payload.py)
    download_board: list[int] = field(default_factory=list)


def lora_pairs(keys) -> list[tuple[str, str]]:
    """(A key, B key) of every adapted module, sorted."""
    pairs = []
    for k in sorted(keys):
        if "lora_A" in k:
            kb = k.replace("lora_A", "lora_B")
            if kb not in keys:
                raise ValueError(f"{k} has no matching {kb}")
            pairs.append((k, kb))
    return pairs


def weighted_mean(tensors: Sequence[Tensor], w: Sequence[float]) -> Tensor:
    acc = torch.zeros_like(tensors[0], dtype=torch.float32)
    for wi, t in zip(w, tensors):
        acc += wi * t.float()
    return acc.to(tensors[0].dtype)


class AggregationStrategy:
    name: str = ""
    # A linear rule is a weighted mean of dense uploads: it can run as an allreduce among clients.
    linear: bool = True

    # --- the client's training -------------------------------------------------------------

    def trains(self, key: str) -> bool:
        """Whether the client optimizer updates this LoRA tensor (FFA-LoRA freezes every A)."""
        return True

    def client_penalty(self, params: Mapping[str, Tensor], global_adapter: Mapping[str, Tensor]) -> Tensor:
        """A term added to each client's local loss; zero unless the strategy regularises clients."""
        return torch.zeros(())

    # --- the round ---------------------------------------------------------------------------

    def upload(self, start: Adapter, trained: Adapter, ctx: Context) -> Payload:
        """What a client sends up: by default its trained tensors, dense (those it trains)."""
        return {k: v for k, v in sorted(trained.items()) if self.trains(k)}

    def server_aggregate(
        self, start: Adapter, uploads: Sequence[Payload], weights: Sequence[float] | None, ctx: Context
    ) -> Payload:
        """What the server sends down: by default the weighted mean of the uploaded tensors."""
        w = normalized_weights(weights, len(uploads))
        return {k: weighted_mean([dense(u[k]) for u in uploads], w) for k in sorted(uploads[0])}

    def apply_download(self, start: Adapter, download: Payload, ctx: Context) -> Adapter:
        """The new adapter from the round-start one and the download: by default the sent tensors replace
        their round-start values."""
        return {k: (dense(download[k]).to(v.dtype) if k in download else v) for k, v in start.items()}

    def download_bytes(self, download: Payload, rank: int | None = None, board: bool = False) -> int:
        """What the server sends one client (FlexLoRA sends a client of lower rank only its components);
        `board`: in the leaderboard's convention (payload.py)."""
        return payload_bytes(download, board)

    def run_round(
        self,
        start: Adapter,
        trained: Sequence[Adapter],
        weights: Sequence[float] | None = None,
        seed: int = 0,
        round_idx: int = 1,
        clients: Sequence[int] | None = None,
        ranks: Sequence[int | None] | None = None,
    ) -> RoundResult:
        """The whole round in one process; the Ray path splits it across actors with the same calls."""
        clients = list(range(len(trained))) if clients is None else list(clients)
        ranks = [None] * len(clients) if ranks is None else list(ranks)
        for t in trained:
            self._check_same_keys([start, t])
        uploads = [self.upload(start, t, Context(seed, round_idx, c, r)) for t, c, r in zip(trained, clients, ranks)]
        download = self.server_aggregate(start, uploads, weights, Context(seed, round_idx, None))
        new = self.apply_download(start, download, Context(seed, round_idx, None))
        return RoundResult(
            new,
            [payload_bytes(u) for u in uploads],
            [self.download_bytes(download, r) for r in ranks],
            [payload_bytes(u, board=True) for u in uploads],
            [self.download_bytes(download, r, board=True) for r in ranks],
        )

    def aggregate(self, adapters: Sequence[Mapping[str, Tensor]], weights: Sequence[float] | None = None) -> Adapter:
        """A linear strategy's new global adapter from the clients' adapters: their weighted mean."""
        keys = self._check_same_keys(adapters)
        w = normalized_weights(weights, len(adapters))
        return {k: weighted_mean([a[k] for a in adapters], w) for k in keys}

    @staticmethod
    def _check_same_keys(adapters: Sequence[Mapping[str, Tensor]]) -> list[str]:
        if not adapters:
            raise ValueError("no adapters to aggregate")
        keys = sorted(adapters[0])
        for i, a in enumerate(adapters[1:], start=1):
            if sorted(a) != keys:
                raise ValueError(f"adapter {i} has different keys from adapter 0")
            for k in keys:
                if a[k].shape != adapters[0][k].shape:
                    raise ValueError(
                        f"adapter {i}: {k} has shape {tuple(a[k].shape)}, adapter 0 has {tuple(adapters[0][k].shape)}"
                    )
        return keys
