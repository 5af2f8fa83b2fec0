"""The running federation: a ServerActor, N ClientActors in a placement group, and their collective group.

This is the only place that talks to Ray for the round protocol; `jobs.train` drives it round by round.

Failures. Every call waits on all its actors and fails fast: the first actor that died (killed process,
lost node) raises `ActorLost` at once, without waiting on survivors that may be blocked in a
collective with the dead one. `recover()` then restarts every client (the torch.distributed world of a
gloo/NCCL group is fixed per process, so survivors cannot admit a newcomer), forms a new collective
group and loads the round-start global adapter into all of them: the round is then redone exactly.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, ObjectLostError, OwnerDiedError, RayActorError

from actors.client import ClientActor
from actors.server import ServerActor
from placement import bundle_strategy, client_bundles, cluster_has_gpus, reserve
from pubswap.aggregation import make_strategy, normalized_weights
from pubswap.config import RunConfig
from pubswap.data.split import FederatedSplit
from pubswap.lora import Adapter

ACTOR_FAILURES = (RayActorError, ActorUnavailableError, ObjectLostError, OwnerDiedError)


class ActorLost(RuntimeError):
    """A client or the server died during a call; the round can be redone after `recover()`."""


def gather(refs: Sequence[ray.ObjectRef], grace_s: float = 30.0) -> list:
    """ray.get of every ref, raising the first failure as soon as it is known (not in list order).

    An actor's death wins over the errors it causes: when a task fails with an ordinary exception (a
    survivor's collective reporting "connection reset by peer"), the other tasks get `grace_s` to
    reveal a dead actor, whose error is then raised instead.
    """
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        try:
            ray.get(ready)
        except ACTOR_FAILURES:
            raise
        except Exception as first:
            done, _ = ray.wait(pending, num_returns=len(pending), timeout=grace_s) if pending else ([], [])
            for ref in done:
                try:
                    ray.get(ref)
                except ACTOR_FAILURES as death:
                    raise death from first
                except Exception:
                    pass
            raise
    return ray.get(list(refs))


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
        self.server = ServerActor.options(num_cpus=0).remote(cfg_dict, split.public, split.test)
        self.clients = [
            ClientActor.options(num_cpus=res.cpus_per_client, num_gpus=gpus, scheduling_strategy=bundle_strategy(
                self.pg, i)).remote(cfg_dict, i, split.clients[i], model_dir, work_dir)
            for i in range(n)
        ]
        self.restarts = 0
        self._connect()
        self.strategy = make_strategy(cfg.federation)
        sizes = [len(c) for c in split.clients]
        self.weights = normalized_weights(sizes if cfg.federation.weighting == "samples" else None, n)

    def _connect(self, old_pids: Sequence[int] = ()) -> None:
        """Wait until every client answers from a process not in `old_pids` and the server answers,
        then form a fresh collective group."""
        timeout = self.cfg.fault_tolerance.restart_timeout_s
        deadline = time.monotonic() + timeout
        pids: list[int | None] = [None] * len(self.clients)
        while None in pids:
            for i, c in enumerate(self.clients):
                if pids[i] is not None:
                    continue
                try:
                    _, pid = ray.get(c.ping.remote(), timeout=max(1.0, deadline - time.monotonic()))
                    pids[i] = None if pid in old_pids else pid  # an old process: the kill has not landed yet
                except (ActorUnavailableError, GetTimeoutError):
                    pass  # restarting
            if None in pids:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"client actors {[i for i, p in enumerate(pids) if p is None]} did not come "
                                       f"up within {timeout:.0f}s (fault_tolerance.restart_timeout_s); see the Ray "
                                       "dashboard or `ray status`")
                time.sleep(0.2)
        self.pids = pids
        ray.get(self.server.test_shards.remote(1), timeout=timeout)
        self.group = f"clients-{uuid.uuid4().hex[:8]}"
        n = len(self.clients)
        gather([c.init_collective.remote(n, i, self.backend, self.group) for i, c in enumerate(self.clients)])

    def _call(self, refs: Sequence[ray.ObjectRef]) -> list:
        try:
            return gather(refs)
        except ACTOR_FAILURES as e:
            raise ActorLost(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e

    def recover(self, global_adapter: Adapter) -> float:
        """Restart every client, re-form the collective group, load `global_adapter`; returns seconds taken."""
        t = time.perf_counter()
        for c in self.clients:
            ray.kill(c, no_restart=False)  # a dead one is restarting already; survivors may sit in a collective
        self.restarts += 1
        self._connect(old_pids=self.pids)
        self.set_global(global_adapter)
        return time.perf_counter() - t

    def initial_adapter(self) -> Adapter:
        return self._call([self.clients[0].get_adapter.remote()])[0]

    def lora_config(self):
        return self._call([self.clients[0].lora_config.remote()])[0]

    def set_global(self, adapter: Adapter) -> None:
        ref = ray.put(adapter)  # one copy in the object store, fetched by every client
        self._call([c.set_global.remote(ref) for c in self.clients])

    def private_step(self, round_idx: int, step: int) -> dict:
        results = self._call([c.private_step.remote(round_idx, step) for c in self.clients])
        return {"step": step, "public": False, "clients": results}

    def public_step(self, round_idx: int, step: int) -> dict:
        batch_ref = self.server.public_batch.remote(round_idx, step)
        answers = [c.answer_public.remote(batch_ref, round_idx, step) for c in self.clients]
        swapped_ref = self.server.swap.remote(round_idx, step, batch_ref, *answers)
        swapped = self._call([swapped_ref, *answers])[0]
        gen_s = [a["gen_s"] for a in self._call(answers)]
        results = self._call([c.public_step.remote(batch_ref, g, round_idx, step)
                              for c, g in zip(self.clients, swapped["groups"])])
        for r, g in zip(results, gen_s):
            r["gen_s"] = g
        return {"step": step, "public": True, "clients": results, "swapped_in": swapped["swapped_in"],
                "missing_donors": swapped["missing_donors"], "pool_bytes": swapped["pool_bytes"],
                "provenance": swapped["provenance"]}

    def average(self, round_idx: int = 0) -> tuple[Adapter, list[dict]]:
        if not self.strategy.linear:
            raise NotImplementedError(f"non-linear aggregation {self.strategy.name!r} runs on the server (not yet)")
        results = self._call([c.allreduce_average.remote(w, round_idx) for c, w in zip(self.clients, self.weights)])
        averaged = next(r.pop("averaged") for r in results if r.get("averaged") is not None)
        for r in results:
            r.pop("averaged", None)
        return averaged, results

    def evaluate(self, round_idx: int) -> tuple[float, int]:
        shards = self._call([self.server.test_shards.remote(len(self.clients))])[0]
        per_client = self._call([c.evaluate.remote(s, round_idx) for c, s in zip(self.clients, shards)])
        rewards = [r for rs in per_client for r in rs]
        return (sum(rewards) / len(rewards) if rewards else 0.0), len(rewards)

    def shutdown(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for a in [*self.clients, self.server]:
            ray.kill(a)
        remove_placement_group(self.pg)
