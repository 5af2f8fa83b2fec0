"""The centralized reference: one learner holding every client's private data.

Decentralized and federated results are reported as normalized performance, pass@1 / centralized
pass@1 x 100 (the leaderboard's column). The reference trains one client on the union of the
clients' private rows of the same split (so the data is the federation's, row for row), for the same
rounds and tau local steps, each step taking b x num_clients prompts: the federation's prompts per
step. There is nothing to average or gossip: `prepare` rewrites the run into a one-client FedAvg, or
(`centralized-full`, the reference of the full-parameter methods) a one-client full-parameter DSGD on a
graph of one, which the driver then runs as that method. The user's config stays the run's record.
"""

from __future__ import annotations

from pubswap.data.split import FederatedSplit
from pubswap.methods.base import Method


class Centralized(Method):
    names = ("centralized", "centralized-full")

    @property
    def full_parameter(self) -> bool:
        return self.name == "centralized-full"

    def prepare(self, cfg, split: FederatedSplit):
        f, g = cfg.federation, cfg.grpo
        merged = FederatedSplit([[r for part in split.clients for r in part]], split.public, split.test)
        run = cfg.model_copy(
            update={
                "federation": f.model_copy(
                    update={
                        "method": "dsgd" if self.full_parameter else "fedavg-grpo",
                        "num_clients": 1,
                        "participation": 1.0,
                        "clients_per_round": 0,
                        "topology": "complete",
                        "edges": [],
                    }
                ),
                "grpo": g.model_copy(update={"b": g.b * f.num_clients}),
                "resources": cfg.resources.model_copy(update={"num_actors": 1}),
            }
        )
        return type(cfg).model_validate(run.to_dict()), merged  # checked here, not first on an actor
