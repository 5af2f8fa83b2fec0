"""The running federation: a ServerActor, N ClientActors in a placement group, and their collective group.

This is the only place that talks to Ray for the round protocol; `jobs.train` drives it round by round.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import ray

from actors.client import ClientActor
from actors.server import ServerActor
from placement import bundle_strategy, client_bundles, cluster_has_gpus, reserve
from pubswap.aggregation import make_strategy, normalized_weights
from pubswap.config import RunConfig
from pubswap.data.split import FederatedSplit
from pubswap.lora import Adapter


class Federation:
    def __init__(self, cfg: RunConfig, split: FederatedSplit, model_dir: str, run_dir: str):
        self.cfg = cfg
        n = cfg.federation.num_clients
        res = cfg.resources
        gpus = res.gpus_per_client if res.gpus_per_client is not None else (1.0 if cluster_has_gpus() else 0.0)
        self.backend = "nccl" if gpus > 0 else "gloo"
        self.pg = reserve(client_bundles(n, res.cpus_per_client, gpus), res.placement_strategy,
                          res.placement_timeout_s)
        cfg_dict = cfg.to_dict()
        work_dir = f"{run_dir}/work"
        self.server = ServerActor.options(num_cpus=0).remote(cfg_dict, split.public, split.test, run_dir)
        self.clients = [
            ClientActor.options(num_cpus=res.cpus_per_client, num_gpus=gpus, scheduling_strategy=bundle_strategy(
                self.pg, i)).remote(cfg_dict, i, split.clients[i], model_dir, work_dir)
            for i in range(n)
        ]
        ray.get([c.ping.remote() for c in self.clients])
        self.group = f"clients-{uuid.uuid4().hex[:8]}"
        ray.get([c.init_collective.remote(n, i, self.backend, self.group) for i, c in enumerate(self.clients)])
        self.strategy = make_strategy(cfg.federation)
        sizes = [len(c) for c in split.clients]
        self.weights = normalized_weights(sizes if cfg.federation.weighting == "samples" else None, n)

    def initial_adapter(self) -> Adapter:
        return ray.get(self.clients[0].get_adapter.remote())

    def set_global(self, adapter: Adapter) -> None:
        ref = ray.put(adapter)  # one copy in the object store, fetched by every client
        ray.get([c.set_global.remote(ref) for c in self.clients])

    def private_step(self, round_idx: int, step: int) -> dict:
        results = ray.get([c.private_step.remote(round_idx, step) for c in self.clients])
        return {"step": step, "public": False, "clients": results}

    def public_step(self, round_idx: int, step: int) -> dict:
        batch_ref = self.server.public_batch.remote(round_idx, step)
        answers = [c.answer_public.remote(batch_ref, round_idx, step) for c in self.clients]
        swapped = ray.get(self.server.swap.remote(round_idx, step, batch_ref, *answers))
        gen_s = [a["gen_s"] for a in ray.get(answers)]
        results = ray.get([c.public_step.remote(batch_ref, g, step)
                           for c, g in zip(self.clients, swapped["groups"])])
        for r, g in zip(results, gen_s):
            r["gen_s"] = g
        return {"step": step, "public": True, "clients": results, "swapped_in": swapped["swapped_in"],
                "missing_donors": swapped["missing_donors"], "pool_bytes": swapped["pool_bytes"],
                "provenance": swapped["provenance"]}

    def average(self) -> tuple[Adapter, list[dict]]:
        if not self.strategy.linear:
            raise NotImplementedError(f"non-linear aggregation {self.strategy.name!r} runs on the server (not yet)")
        results = ray.get([c.allreduce_average.remote(w) for c, w in zip(self.clients, self.weights)])
        averaged = next(r.pop("averaged") for r in results if r.get("averaged") is not None)
        for r in results:
            r.pop("averaged", None)
        return averaged, results

    def save_global(self, adapter: Adapter, round_idx: int, lora_config) -> str:
        return ray.get(self.server.set_global.remote(adapter, round_idx, lora_config))

    def evaluate(self, round_idx: int) -> tuple[float, int]:
        shards = ray.get(self.server.test_shards.remote(len(self.clients)))
        rewards = [r for rs in ray.get([c.evaluate.remote(s, round_idx) for c, s in zip(self.clients, shards)])
                   for r in rs]
        return (sum(rewards) / len(rewards) if rewards else 0.0), len(rewards)

    def shutdown(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for a in [*self.clients, self.server]:
            ray.kill(a)
        remove_placement_group(self.pg)


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0
