"""The client actor's side of serverless training (federation.method dsgd, dsgd-lora, chocosgd,
chocosgd-lora, seedflood).

Each hosted logical client keeps its own tensors across rounds (the LoRA tensors, or every weight for
the full-parameter methods; there is no global model) and, every `gossip_every` local steps,
exchanges with its graph neighbours only (pubswap/algorithms/topology.py), wherever they are hosted: the driver
hands each actor the object refs of exactly the payloads its clients' neighbours put, so no server and
no all-to-all is involved.

    payloads = actor.gossip_payload(round, step, ids)      # DSGD: x_i; CHOCO: q_i = Q(x_i - xh_i)
    actor.gossip_apply(round, step, rows, need, *payloads of `need`)

CHOCO's public copies xh_j are kept once per actor for every j its clients need (its own clients and
their neighbours), starting at the run's initial weights; all holders of xh_j apply the same messages,
so the copies agree everywhere.

SeedFlood: a client's local step is zeroth-order (pubswap/methods/seedflood.py: zo_step) and its whole
update is a 20-byte message (step, origin, seed, scalar). Every client starts a gossip period from the
same weights x_b (held once per actor); within it a client holds x_b plus its own messages. At the
period's end the messages are flooded (jobs/gossip_rounds.py counts the hops and bytes of the flood on
the graph) and every client rebuilds x_b + all of the period's messages in canonical order: bitwise the
same weights on every client and actor, so one tensor per actor serves all its clients again.

The peer is a component its client actor owns (`ClientCore.peer`); it reaches the actor only through
`PeerHost`, and the actor's gossip calls (gossip_payload, gossip_apply, flood_messages, flood_apply,
hosted_states, load_states) hand over to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from pubswap.algorithms.aggregation.payload import dense, payload_bytes
from pubswap.algorithms.gossip import (
    SeedMessage,
    apply_messages,
    choco_consensus,
    choco_message,
    make_compressor,
    mix_row,
    seedflood_scale,
)
from pubswap.algorithms.topology import make_topology
from pubswap.config import RunConfig
from pubswap.lora import Adapter, flatten
from pubswap.methods.seedflood import zo_step
from pubswap.run.faults import maybe_crash
from pubswap.run.step_checkpoint import (
    flat_optimizer_state,
    load_optimizer_state,
    nested_optimizer_state,
    optimizer_state,
)
from pubswap.run.timing import PhaseTimer
from pubswap.seeding import derive_seed


class PeerHost(Protocol):
    """What a gossip peer needs from the client actor that owns it (actors/client.py's ClientCore)."""

    cfg: RunConfig
    clients: dict  # hosted client id -> its state: `.adapter` (its own tensors), `.optimizer`
    global_adapter: Adapter  # the weights the run (or the last set_global) started every client from
    timer: PhaseTimer  # gossip time counts as "avg"
    trainer: Any  # the client's GRPO learner (pubswap/learner/trainer.py)

    def serve(self, cid: int) -> None:
        """Client `cid`'s tensors changed: hand them to the engine."""

    def release_trainer(self) -> None:
        """The trainer's live weights are no hosted client's any more."""


class GossipPeer:
    """The client actor's side of the serverless methods; one per actor, for all its hosted clients."""

    def __init__(self, host: PeerHost):
        self.host = host
        f = host.cfg.federation
        self.public: dict[int, Adapter] = {}  # CHOCO: xh_j for j in self.need
        self.flood_base: Adapter | None = None  # SeedFlood: x_b, the weights every client starts the period from
        self.pending: dict[int, list[SeedMessage]] = {}  # SeedFlood: each hosted client's messages of the period
        self.choco_start: Adapter | None = None
        if not f.decentralized:  # federated methods: no graph (its settings are not even checked then)
            self.topo, self.need = None, []
            return
        self.topo = make_topology(f.topology, f.num_clients, f.edges)
        self.need = sorted({j for i in host.clients for j in (i, *self.topo.neighbours[i])})
        self.compress = make_compressor(f.choco_compressor, f.choco_fraction)
        # CHOCO's public copies start at the run's initial weights (the seeded adapter or the base model),
        # which every client knows without a message; from zeros, the first top-k messages would carry
        # the initial weights themselves, and clients whose top-k sets differ would be pulled apart
        if f.gossip_rule == "choco":
            self.choco_start = host.global_adapter

    def new_period(self) -> None:
        """SeedFlood: the period starts from the (new) global weights, with no messages yet."""
        self.flood_base, self.pending = None, {}

    def _public(self, j: int) -> Adapter:
        if j not in self.public:
            self.public[j] = self.choco_start  # tensors are replaced, never changed in place
        return self.public[j]

    def gossip_payload(self, round_idx: int, step: int, cids: Sequence[int]):
        """One object per client (call with num_returns=len(cids)): what it sends each neighbour."""
        out = []
        with self.host.timer.phase("avg"):
            for cid in cids:
                maybe_crash("client", round_idx, step, "gossip", cid)
                x = self.host.clients[cid].adapter
                if self.host.cfg.federation.gossip_rule == "dsgd":
                    out.append(x)
                else:
                    gen = torch.Generator().manual_seed(derive_seed(self.host.cfg.seed, "choco", round_idx, step, cid))
                    out.append(choco_message(x, self._public(cid), self.compress, gen))
        return out[0] if len(out) == 1 else tuple(out)

    def gossip_apply(
        self, round_idx: int, step: int, rows: Mapping[int, Mapping[int, float]], need: Sequence[int], *payloads
    ) -> dict:
        """Mix (DSGD) or take the consensus step (CHOCO) for the hosted clients in `rows`; returns each
        one's bytes sent and received and this actor's share of the consensus distance."""
        got = dict(zip(need, payloads))
        with self.host.timer.phase("avg"):
            if self.host.cfg.federation.gossip_rule == "dsgd":
                new = {i: mix_row(row, got) for i, row in rows.items()}
            else:
                for j in need:  # every holder of xh_j applies q_j once
                    self.public[j] = {k: v + dense(got[j][k]) for k, v in self._public(j).items()}
                gamma = self.host.cfg.federation.choco_step
                new = {
                    i: choco_consensus(self.host.clients[i].adapter, i, row, self.public, gamma)
                    for i, row in rows.items()
                }
            sizes = {j: payload_bytes(p) for j, p in got.items()}
            report = []
            for i, x in new.items():
                self.host.clients[i].adapter = x
                others = [j for j in rows[i] if j != i]
                report.append({"client": i, "sent": sizes[i] * len(others), "received": sum(sizes[j] for j in others)})
            flats = [flatten(x, torch.float64)[0] for x in new.values()]
            total = torch.stack(flats).sum(0)
            squares = float(sum((f * f).sum() for f in flats))
        for i in new:
            self.host.serve(i)
        self.host.release_trainer()
        return {"clients": report, "sum": total, "sq": squares, "count": len(new)}

    # --- SeedFlood ----------------------------------------------------------------------------

    def zo_train(self, cid: int, samples, round_idx: int, step: int) -> dict:
        """Client `cid`'s zeroth-order step on the run's objective (the trainer holds its weights); its
        message is kept for the period's flood."""
        c = self.host.cfg
        f = c.federation
        seed = derive_seed(c.seed, "seedflood", round_idx, step, cid)
        scalar, metrics = zo_step(self.host.trainer, samples, seed, f.zo_eps, f.zo_lr, owner=cid, objective=c.objective)
        self.pending.setdefault(cid, []).append(SeedMessage(step, cid, seed, scalar))
        return metrics

    def flood_messages(self, round_idx: int, step: int) -> dict[int, list[SeedMessage]]:
        """The hosted clients' messages of the period (what each one starts flooding)."""
        for cid in self.host.clients:
            maybe_crash("client", round_idx, step, "gossip", cid)
        return {cid: list(self.pending.get(cid, [])) for cid in self.host.clients}

    def flood_apply(self, round_idx: int, step: int, messages: Sequence[SeedMessage]) -> dict:
        """Every client has received every message of the period: x_b += the messages in canonical
        order; every hosted client holds x_b (one shared tensor dict). Returns this actor's share of
        the consensus distance (which is 0 exactly when all actors rebuilt the same bits)."""
        with self.host.timer.phase("avg"):
            base = self.flood_base if self.flood_base is not None else self.host.global_adapter
            self.flood_base = apply_messages(
                base, messages, scale=seedflood_scale(self.host.cfg.federation.num_clients)
            )
            self.pending = {}
            for client in self.host.clients.values():
                client.adapter = self.flood_base
            flat = flatten(self.flood_base, torch.float64)[0]
            n = len(self.host.clients)
        for i in self.host.clients:
            self.host.serve(i)
        self.host.release_trainer()
        digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()  # the driver checks all actors agree
        return {"sum": flat * n, "sq": float((flat * flat).sum()) * n, "count": n, "digest": digest}

    def hosted_states(self) -> dict:
        """Every hosted client's own tensors (LoRA or all weights), its optimizer state (AdamW's moments and
        step count: these methods have no rounds, so it persists from round to round, and a checkpoint
        keeps it; SeedFlood's zeroth-order step has none) and (CHOCO) the public copy it owns."""
        return {
            "x": {i: c.adapter for i, c in self.host.clients.items()},
            "public": {i: self.public[i] for i in self.host.clients if i in self.public},
            "opt": {
                i: flat_optimizer_state(optimizer_state(c.optimizer))
                for i, c in self.host.clients.items()
                if c.optimizer.state
            },
        }

    def load_states(self, states: Mapping) -> None:
        """Resume or restart: the clients' tensors, optimizer states and the public copies they need, from a
        checkpoint (a client without a saved optimizer state starts a fresh one)."""
        saved = states.get("opt", {})
        for i, client in self.host.clients.items():
            client.adapter = {k: v.clone() for k, v in states["x"][i].items()}
            client.optimizer = self.host.trainer.new_optimizer()
            if i in saved:
                load_optimizer_state(client.optimizer, nested_optimizer_state(saved[i]))
            self.host.serve(i)
        self.public = {
            j: {k: v.clone() for k, v in states["public"][j].items()}
            for j in self.need
            if j in states.get("public", {})
        }
        self.host.release_trainer()
