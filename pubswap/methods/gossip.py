"""Serverless training on a graph: DSGD and CHOCO-SGD, on the LoRA tensors (dsgd-lora, chocosgd-lora)
or on every weight (dsgd, chocosgd).

Every client trains every round and keeps its own tensors across rounds; after every `gossip_every`
local steps it exchanges with its neighbours in `federation.topology` (Metropolis-Hastings weights):
DSGD mixes the tensors themselves, CHOCO-SGD compressed differences against public copies
(actors/gossip_peer.py, pubswap/algorithms/gossip.py). The round evaluates the clients' average and a
few seeded clients' own tensors; the checkpoint keeps every client's tensors, its optimizer state
(kept from round to round: these methods have no rounds to reset at) and CHOCO's copies.
In-round checkpoints are not taken: a restart redoes the round.
"""

from __future__ import annotations

from pubswap.algorithms.aggregation.base import weighted_mean
from pubswap.lora import Adapter, num_bytes, squared_distance
from pubswap.methods.base import Method, RoundContext, eval_record, round_record, step_done
from pubswap.run.faults import maybe_crash
from pubswap.seeding import rng

RULES = {"dsgd-lora": "dsgd", "dsgd": "dsgd", "chocosgd-lora": "choco", "chocosgd": "choco"}


def client_average(states: dict, parts: list[int]) -> Adapter:
    """The uniform mean of the clients' own tensors (what a serverless run evaluates and checkpoints)."""
    x = states["x"]
    return {k: weighted_mean([x[c][k] for c in parts], [1.0 / len(parts)] * len(parts)) for k in x[parts[0]]}


class Gossip(Method):
    names = tuple(RULES)
    decentralized = True
    checkpoints_in_round = False

    @property
    def full_parameter(self) -> bool:
        return not self.name.endswith("-lora")

    @property
    def gossip_rule(self) -> str | None:
        return RULES[self.name]

    def problem(self, cfg) -> tuple[str, str] | None:
        from pubswap.algorithms.topology import make_topology

        f = cfg.federation
        try:
            make_topology(f.topology, f.num_clients, f.edges)
        except ValueError as e:
            return f"federation.{'edges' if f.topology == 'edges' else 'topology'}", str(e)
        if f.clients_in_round() != f.num_clients:
            return "federation.participation", "decentralized methods train every client every round (participation 1)"
        return super().problem(cfg)

    def initial_states(self, adapter: Adapter, num_clients: int) -> dict | None:
        """Round 1: every client at the initial adapter, no public copies yet."""
        return {"x": {c: adapter for c in range(num_clients)}, "public": {}}

    # --- the round: local steps, exchanges, then one model per client ------------------------------

    def exchange_due(self, f, s: int) -> bool:
        return s % f.gossip_every == 0

    def exchange(self, fed, r: int, s: int) -> tuple[dict, str]:
        """One gossip step among neighbours: its record and what the step's console line adds."""
        g = fed.gossip(r, s)
        return g, f", gossip: consensus distance {g['consensus']:.3e}"

    def settle(self, states: dict, parts: list[int]) -> tuple[Adapter, dict | None]:
        """The round's end: (the adapter to evaluate and commit, the per-client states to commit)."""
        return client_average(states, parts), states

    def run_round(self, fed, cfg, r: int, start: Adapter, ctx: RoundContext) -> tuple[dict, Adapter, dict | None]:
        """tau local steps of every client, an exchange after every `gossip_every` of them. Returns the
        record, the average (the checkpoint's adapter) and every client's state (its own tensors)."""
        f = cfg.federation
        fed.restart_timing()
        parts = list(range(f.num_clients))
        steps, exchanges = [], []
        with ctx.progress(f.tau, f"round {r}/{f.rounds}") as bar:
            for s in range(1, f.tau + 1):
                maybe_crash("driver", r, s, "step")
                fed.verify_incarnations()
                out = fed.private_step(r, s, parts)
                note = ""
                if self.exchange_due(f, s):
                    g, note = self.exchange(fed, r, s)
                    exchanges.append(g)
                    out["consensus"] = g["consensus"]
                steps.append(out)
                step_done(ctx, bar, cfg, r, s, out, note)
                bar.update()
        states = fed.states()
        fed.verify_incarnations()
        average, kept = self.settle(states, parts)
        drift = [{"drift_sq": squared_distance(states["x"][c], average).item()} for c in parts]
        comm = {
            "upload": [sum(g["sent"][c] for g in exchanges) for c in parts],
            "download": [sum(g["received"][c] for g in exchanges) for c in parts],
        }
        record = round_record(r, parts, steps, drift, len(fed.actors), num_bytes(average), comm)
        record["consensus"] = [g["consensus"] for g in exchanges]
        record["bytes"]["per_edge"] = [g["edge_bytes"] for g in exchanges]  # mean over directed edges, per gossip
        self.annotate(record, exchanges)
        return record, average, kept

    def annotate(self, record: dict, exchanges: list[dict]) -> None:
        """What else the round's record says about its exchanges."""

    def evaluate(self, fed, cfg, r: int, average: Adapter, states: dict | None) -> dict:
        """pass@1 of the clients' `average` and of `eval_clients` seeded clients' own adapters (`states`;
        None: every client holds `average`)."""
        f = cfg.federation
        if not cfg.evaluation_due(r):
            return {}
        out = eval_record(fed.evaluate(r, average))
        k = min(f.eval_clients, f.num_clients)
        sample = sorted(int(c) for c in rng(cfg.seed, "eval_clients", r).choice(f.num_clients, size=k, replace=False))
        out["client_pass@1"] = {
            str(c): fed.evaluate(r, states["x"][c] if states else average).pass_at_1 for c in sample
        }
        return out
