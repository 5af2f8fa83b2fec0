"""The federation's gossip protocol: serverless methods exchange among graph neighbours, no server.

A part of `jobs.federation.Federation` (which mixes it in): it uses the federation's client actors,
their assignment of logical clients, the graph (`topo`) and its fail-fast `_call`. The client's side is
its gossip peer (actors/gossip_peer.py); pubswap/methods/gossip.py and seedflood.py drive it.
"""

from __future__ import annotations

from collections.abc import Sequence

import ray

from pubswap.algorithms.gossip import flood_period, mixing_rows


class GossipRounds:
    def gossip(self, round_idx: int, step: int) -> dict:
        """One gossip step of every client with its neighbours. Each actor puts one object per hosted
        client and fetches exactly those of its clients' neighbours. Returns the consensus distance after
        it and each client's bytes sent and received."""
        rows = mixing_rows(self.topo)
        refs: dict[int, ray.ObjectRef] = {}
        for a, ids in zip(self.actors, self.assignment):
            out = a.gossip_payload.options(num_returns=len(ids)).remote(round_idx, step, ids)
            refs.update(zip(ids, [out] if len(ids) == 1 else out))
        calls = []
        for a, ids in zip(self.actors, self.assignment):
            need = sorted({j for i in ids for j in rows[i]})
            calls.append(
                a.gossip_apply.remote(round_idx, step, {i: rows[i] for i in ids}, need, *[refs[j] for j in need])
            )
        results = self._call(calls)
        per_client = sorted((c for r in results for c in r["clients"]), key=lambda c: c["client"])
        return self._gossip_record(step, results, [c["sent"] for c in per_client], [c["received"] for c in per_client])

    def flood(self, round_idx: int, step: int) -> dict:
        """SeedFlood's gossip: every client's messages of the period are flooded over the graph until
        every client holds all of them, then every client applies them (actors/gossip_peer.py). The
        flood's hops and each client's bytes are those of the protocol on this graph (pubswap.algorithms.gossip.
        flood_period: each message forwarded once by every client to each neighbour); the messages
        reach the actors in one call, since each holds all of them after `hops` (<= diameter) hops."""
        per_actor = self._call([a.flood_messages.remote(round_idx, step) for a in self.actors])
        new = {cid: msgs for part in per_actor for cid, msgs in part.items()}
        hops, sent, received = flood_period(self.topo, [new.get(i, []) for i in range(self.topo.n)])
        ref = ray.put(sorted(m for msgs in new.values() for m in msgs))
        results = self._call([a.flood_apply.remote(round_idx, step, ref) for a in self.actors])
        record = self._gossip_record(step, results, sent, received)
        if len({r["digest"] for r in results}) == 1:
            record["consensus"] = 0.0  # every actor rebuilt the same bits (the formula would leave rounding)
        return {**record, "hops": hops}

    def _gossip_record(self, step: int, results: Sequence[dict], sent: list[int], received: list[int]) -> dict:
        """The consensus distance after a gossip (from the actors' sums and squared norms), each client's
        bytes, and the mean bytes over a directed edge of the graph."""
        n = sum(r["count"] for r in results)
        mean = sum(r["sum"] for r in results) / n
        consensus = max(0.0, (sum(r["sq"] for r in results) - n * float((mean * mean).sum())) / n)
        directed = sum(len(nb) for nb in self.topo.neighbours)
        return {
            "step": step,
            "consensus": consensus,
            "sent": sent,
            "received": received,
            "edge_bytes": sum(sent) / max(1, directed),
        }

    def states(self) -> dict:
        """Every client's own tensors, optimizer state and (CHOCO) public copy, for the checkpoint."""
        out: dict = {"x": {}, "public": {}, "opt": {}}
        for part in self._call([a.hosted_states.remote() for a in self.actors]):
            for kind in out:
                out[kind].update(part.get(kind, {}))
        return out

    def load_states(self, states: dict) -> None:
        """Each actor gets only its clients' tensors and the public copies its clients need (their own and
        their neighbours'), not every client's: at 128 clients an actor fetches its share, not the run."""
        calls = []
        for a, ids in zip(self.actors, self.assignment):
            need = {j for i in ids for j in (i, *self.topo.neighbours[i])}
            part = {
                "x": {i: states["x"][i] for i in ids},
                "opt": {i: t for i, t in states.get("opt", {}).items() if i in ids},
                "public": {j: t for j, t in states.get("public", {}).items() if j in need},
            }
            calls.append(a.load_states.remote(part))
        self._call(calls)
