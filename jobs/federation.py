"""The running federation: a ServerActor, the ClientActors (each hosting one or more logical clients) in a
placement group, and their collective group.

This is the only place that talks to Ray for the round protocol; `jobs.train` drives it round by round.

Failures. Every call waits on all its actors and fails fast: the first actor that died (killed process,
lost node) raises `ActorLost` at once, without waiting on survivors that may be blocked in a
collective with the dead one. `recover()` then restarts every client (the torch.distributed world of a
gloo/NCCL group is fixed per process, so survivors cannot admit a newcomer), forms a new collective
group and loads the round-start global adapter into all of them: the round is then redone exactly.
A call unanswered after `fault_tolerance.step_timeout_s` (a hung client) is treated the same way, and a
client whose vLLM engine died ends its own process (actors/engine_watchdog.py), so it is a dead client.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, ObjectLostError, OwnerDiedError, RayActorError
from ray.util.placement_group import remove_placement_group

from actors import exit_note
from actors.client import ClientActor
from actors.collective import CollectiveSetupError, check_backend_deps, choose_backend
from actors.server import ServerActor
from jobs.gossip_rounds import GossipRounds
from jobs.server_rounds import ServerRounds
from placement import assign_clients, bundle_strategy, client_bundles, cluster_has_gpus, reserve
from placement.probe import probe_bundles
from pubswap.algorithms.aggregation import make_strategy, normalized_weights
from pubswap.algorithms.evaluation import Score, score
from pubswap.algorithms.participation import participants
from pubswap.algorithms.topology import make_topology
from pubswap.config import RunConfig
from pubswap.data.rows import DataError, Row
from pubswap.data.split import FederatedSplit
from pubswap.learner.gpu_budget import GpuBudgetError, model_shape
from pubswap.learner.gpu_budget import plan as plan_budget
from pubswap.lora import Adapter

ACTOR_FAILURES = (RayActorError, ActorUnavailableError, ObjectLostError, OwnerDiedError)


class ActorLost(RuntimeError):
    """A client or the server died during a call; the round can be redone after `recover()`."""


class CallTimeout(RuntimeError):
    """Some calls were not answered within the time allowed (a hung actor)."""


def gather(refs: Sequence[ray.ObjectRef], grace_s: float = 30.0, timeout_s: float | None = None) -> list:
    """ray.get of every ref, raising the first failure as soon as it is known (not in list order).

    An actor's death wins over the errors it causes: when a task fails with an ordinary exception (a
    survivor's collective reporting "connection reset by peer"), the other tasks get `grace_s` to
    reveal a dead actor, whose error is then raised instead. `timeout_s`: CallTimeout if the refs are
    not all done by then.
    """
    pending = list(refs)
    deadline = None if not timeout_s else time.monotonic() + timeout_s
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not ready:
            raise CallTimeout(f"{len(pending)} of {len(refs)} calls unanswered after {timeout_s:.0f}s")
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


class Federation(ServerRounds, GossipRounds):
    """`actors[a]` hosts the logical clients `assignment[a]`; every call names the round's participants.
    This module holds the base: the actors' life (start, incarnations, recovery, shutdown), the calls
    every method makes (steps, states, evaluation); the server protocol is jobs/server_rounds.py, the
    gossip protocol jobs/gossip_rounds.py."""

    def __init__(self, cfg: RunConfig, split: FederatedSplit, model_dir: str, run_dir: str):
        self.cfg = cfg
        f, res = cfg.federation, cfg.resources
        self.assignment = assign_clients(f.num_clients, res.num_actors)
        gpus = res.gpus_per_client if res.gpus_per_client is not None else (1.0 if cluster_has_gpus() else 0.0)
        self.backend = choose_backend(res.collective_backend, gpus)
        self.pg = reserve(
            client_bundles(len(self.assignment), res.cpus_per_client, gpus),
            res.placement_strategy,
            res.placement_timeout_s,
        )
        try:
            engine_fraction = self._gpu_budget(model_dir, gpus) if gpus > 0 else None
        except BaseException:
            remove_placement_group(self.pg)
            raise
        cfg_dict = cfg.to_dict()
        self.server = ServerActor.options(num_cpus=0).remote(cfg_dict, split.public, split.test)
        # data.client_paths: each actor reads its clients' rows itself; the driver sends only the paths
        own = split.client_paths
        shards = [ray.put({c: own[c] if own else split.clients[c] for c in cids}) for cids in self.assignment]
        self.client_data: list[tuple[int, str]] | None = None  # client files: (rows, sha256) per client

        def new_actor(a: int):
            # actors sharing a card take turns loading onto it, here and whenever they restart
            # (actors/card_share.py): vLLM sizes its KV cache from the card's free memory while it profiles
            return ClientActor.options(
                num_cpus=res.cpus_per_client, num_gpus=gpus, scheduling_strategy=bundle_strategy(self.pg, a)
            ).remote(cfg_dict, shards[a], model_dir, engine_fraction, a)

        self._new_actor = new_actor  # a restart whose constructor failed leaves a dead actor: make it again
        self.actors = [new_actor(a) for a in range(len(self.assignment))]
        self.pids: list[int] = []
        self.seen_pids: set[int] = set()  # every client actor process seen: none of them may pass as restarted
        self.calls_s = 0.0  # wall time of the driver's blocking calls (time accounting)
        try:
            self._connect()
        except BaseException:  # a client file it cannot use, a collective that does not form: end what started
            self.shutdown()
            raise
        self.strategy = make_strategy(f)
        self.sizes = [n for n, _ in self.client_data] if own else [len(c) for c in split.clients]
        self.topo = make_topology(f.topology, f.num_clients, f.edges) if f.decentralized else None

    def _gpu_budget(self, model_dir: str, gpus: float) -> float:
        """Probe every bundle's GPU, check the collective's packages and the memory split; vLLM's fraction
        of the card. Raises GpuBudgetError / CollectiveSetupError (one line) before any actor starts."""
        c = self.cfg
        reports = probe_bundles(self.pg, len(self.assignment), gpus)
        for rep in reports:
            check_backend_deps(self.backend, rep)
            if not rep.get("cuda"):
                raise GpuBudgetError(
                    f"resources.gpus_per_client={gpus:g}, but torch on node {rep['host']} sees no "
                    f"CUDA device ({rep.get('cuda_error', 'a CPU build of torch?')}): install the "
                    "project's [gpu] extra there"
                )
        card = min(reports, key=lambda rep: rep["total_bytes"])  # the smallest card bounds every actor
        shape = model_shape(model_dir, c.lora.max_r, c.lora.alpha, c.lora.target_modules)
        budget = plan_budget(
            c,
            shape,
            card["total_bytes"],
            gpus,
            max(len(a) for a in self.assignment),
            card_name=card.get("gpu_name", "GPU"),
        )
        print(budget.line(), flush=True)
        return budget.engine_fraction

    def participants(self, round_idx: int) -> list[int]:
        f = self.cfg.federation
        return participants(self.cfg.seed, round_idx, f.num_clients, f.clients_in_round())

    def weights(self, cids: Sequence[int]) -> dict[int, float]:
        """Aggregation weights of the round's participants, summing to 1."""
        by_size = [self.sizes[c] for c in cids] if self.cfg.federation.weighting == "samples" else None
        return dict(zip(cids, normalized_weights(by_size, len(cids))))

    def _by_actor(self, cids: Sequence[int]) -> list[list[int]]:
        chosen = set(cids)
        return [[c for c in hosted if c in chosen] for hosted in self.assignment]

    def _connect(self, old_pids: Sequence[int] = ()) -> None:
        """Wait until every actor answers from a process not in `old_pids` and the server answers,
        then form a fresh collective group."""
        timeout = self.cfg.fault_tolerance.restart_timeout_s
        deadline = time.monotonic() + timeout
        pids: list[int | None] = [None] * len(self.actors)
        remade: dict[int, tuple[int, float]] = {}  # actor -> (times made again, when it may be made again)
        while None in pids:
            for i, actor in enumerate(self.actors):
                if pids[i] is not None:
                    continue
                try:
                    _, pid = ray.get(actor.ping.remote(), timeout=max(1.0, deadline - time.monotonic()))
                    pids[i] = None if pid in old_pids else pid  # an old process: the kill has not landed yet
                except (ActorUnavailableError, GetTimeoutError):
                    pass  # restarting
                except RayActorError as e:
                    # a restart whose constructor raised (its model storage briefly unreachable, its card
                    # still held) is dead for good: Ray restarts no actor whose creation failed. In a
                    # recovery, make it again, backing off; a first start's failure is the user's to see
                    if not (old_pids and e.actor_init_failed) or time.monotonic() > deadline:
                        raise
                    times, not_before = remade.get(i, (0, 0.0))
                    if time.monotonic() >= not_before:
                        why = str(e).strip().splitlines()[-1][:300] if str(e).strip() else type(e).__name__
                        print(f"recovery: client actor {i} failed to start ({why}); starting it again", flush=True)
                        self.actors[i] = self._new_actor(i)
                        remade[i] = (times + 1, time.monotonic() + min(30.0, 2.0**times))
            if None in pids:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"client actors {[i for i, p in enumerate(pids) if p is None]} did not come "
                        f"up within {timeout:.0f}s (fault_tolerance.restart_timeout_s); see the Ray "
                        "dashboard or `ray status`"
                    )
                time.sleep(0.2)
        self.pids = pids
        self.seen_pids.update(pids)
        while True:  # the server too (restarted with the clients in a recovery)
            try:
                ray.get(self.server.test_shards.remote(1), timeout=max(1.0, deadline - time.monotonic()))
                break
            except (ActorUnavailableError, GetTimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the server actor did not come up within {timeout:.0f}s (fault_tolerance.restart_timeout_s)"
                    ) from None
                time.sleep(0.2)
        if self.cfg.data.client_paths:
            self._check_client_data()
        self.group = f"clients-{uuid.uuid4().hex[:8]}"
        n = len(self.actors)
        try:
            gather([a.init_collective.remote(n, i, self.backend, self.group) for i, a in enumerate(self.actors)])
        except ACTOR_FAILURES:
            raise
        except Exception as e:  # the group formed but cannot reduce (e.g. NCCL with two ranks on one card)
            if old_pids:
                raise
            raise CollectiveSetupError(
                f"the {self.backend} collective group of {n} client actors does not work: "
                f"{str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}"
            ) from e

    def _check_client_data(self) -> None:
        """data.client_paths: DataError (exit 2) if an actor could not use a client's file, or if a client's
        rows differ from those read when the run started (a restarted actor reads its file again)."""
        got: dict[int, tuple[int, str]] = {}
        for report in gather([a.client_data.remote() for a in self.actors]):
            if report["error"]:
                raise DataError(report["error"])
            got.update(report["clients"])
        data = [tuple(got[c]) for c in range(self.cfg.federation.num_clients)]
        if self.client_data is not None and data != self.client_data:
            changed = [c for c, (old, new) in enumerate(zip(self.client_data, data)) if old != new]
            raise DataError(
                f"data.client_paths: the rows of client(s) {changed} changed during the run "
                f"({', '.join(self.cfg.data.client_paths[c] for c in changed)}); a run trains on the rows it "
                "started with"
            )
        self.client_data = data

    def verify_incarnations(self) -> None:
        """Raise ActorLost if a client actor was restarted since the driver last gave it its state (a
        different process answers): a restarted actor holds its initial state, not the round's, whether
        the restart happened inside a call or between calls (an idle non-participant, a node lost while
        the driver committed). Called before every step, before the average and before each commit."""
        now = [pid for _, pid in self._call([a.ping.remote() for a in self.actors])]
        self.seen_pids.update(now)
        changed = [i for i, (old, new) in enumerate(zip(self.pids, now)) if old != new]
        if changed:
            raise ActorLost(
                f"client actors {changed} were restarted since they were given their state "
                f"(pids {[self.pids[i] for i in changed]} -> {[now[i] for i in changed]})" + self._exit_notes()
            )

    def _call(self, refs: Sequence[ray.ObjectRef]) -> list:
        t = time.perf_counter()
        timeout = self.cfg.fault_tolerance.step_timeout_s
        try:
            return gather(refs, timeout_s=timeout or None)
        except ACTOR_FAILURES as e:
            first = str(e).splitlines()[0] if str(e) else ""
            raise ActorLost(f"{type(e).__name__}: {first}" + self._exit_notes()) from e
        except CallTimeout as e:
            # a hung client (stopped, deadlocked, a stuck device) counts as a dead one: recover() kills it
            # (or one was slowed by another's restart while the driver was paused: say so if one ended itself)
            raise ActorLost(
                f"{e} (fault_tolerance.step_timeout_s={timeout:g}): a client is hung" + self._exit_notes()
            ) from e
        finally:
            self.calls_s += time.perf_counter() - t  # the driver's time spent waiting on actors

    def _exit_notes(self) -> str:
        """'; client actor i: why' for each client actor that ended itself and said why (actors/exit_note.py)."""
        ids = {a._actor_id.hex(): i for i, a in enumerate(self.actors)}
        try:
            notes = exit_note.take(list(ids))
        except Exception:  # the GCS is what failed: the recovery goes ahead without the causes
            return ""
        return "".join(f"; client actor {ids[a]}: {line}" for a, line in sorted(notes.items(), key=lambda x: ids[x[0]]))

    def restart_timing(self) -> None:
        """Start the actors' phase timers and the driver's call time afresh (what came before is not the
        work about to be measured: set_global, a recovery)."""
        self.take_timing()
        self.calls_s = 0.0

    def take_timing(self) -> list[dict[str, float]]:
        """Each client actor's seconds per phase since the last take (pubswap/run/timing.py)."""
        return self._call([a.take_timing.remote() for a in self.actors])

    def recover(self, global_adapter: Adapter, states: dict | None = None, restart: bool = True) -> float:
        """Restart every client actor and the server, re-form the collective group, load `global_adapter`
        (and, for the decentralized methods, every client's own round-start `states`); returns seconds.
        The server is restarted too: a hung one (stopped, deadlocked) would otherwise hang the redo, and
        it holds nothing a restart loses (its public and test rows are its constructor's arguments).
        `restart=False` only loads the state (a resume's first step)."""
        t = time.perf_counter()
        if restart:
            for a in [*self.actors, self.server]:
                ray.kill(a, no_restart=False)  # a dead one is restarting already; survivors may sit in a collective
            # not just the pids the state was given to: an actor restarted between calls answers from a pid
            # verify_incarnations saw, and that process is being killed now too
            self._connect(old_pids=self.seen_pids | set(self.pids))
            self._exit_notes()  # a note left by an incarnation this recovery replaced explains nothing later
        self.set_global(global_adapter)
        if states is not None:
            self.load_states(states)
        return time.perf_counter() - t

    def train_states(self, cids: Sequence[int]) -> dict[int, dict]:
        """The adapters and optimizer states of clients `cids` (an in-round checkpoint's content)."""
        out: dict[int, dict] = {}
        for part in self._call(
            [a.train_states.remote(ids) for a, ids in zip(self.actors, self._by_actor(cids)) if ids]
        ):
            out.update(part)
        return out

    def load_train_states(self, states: dict[int, dict]) -> None:
        """Hand each actor only its own clients' saved adapters and optimizer states."""
        self._call(
            [
                a.load_train_states.remote({c: states[c] for c in ids})
                for a, ids in zip(self.actors, self._by_actor(list(states)))
                if ids
            ]
        )

    def initial_adapter(self) -> Adapter:
        return self._call([self.actors[0].get_adapter.remote()])[0]

    def lora_config(self):
        return self._call([self.actors[0].lora_config.remote()])[0]

    def set_global(self, adapter: Adapter) -> None:
        ref = ray.put(adapter)  # one copy in the object store, fetched by every actor
        self._call([a.set_global.remote(ref) for a in self.actors])

    def _per_client(self, per_actor: list[list[dict]]) -> list[dict]:
        return sorted((r for rs in per_actor for r in rs), key=lambda r: r["client"])

    def private_step(self, round_idx: int, step: int, cids: Sequence[int]) -> dict:
        refs = [
            a.private_steps.remote(round_idx, step, ids) for a, ids in zip(self.actors, self._by_actor(cids)) if ids
        ]
        return {"step": step, "public": False, "clients": self._per_client(self._call(refs))}

    def evaluate(
        self, round_idx: int, adapter: Adapter | None = None, rows: Sequence[Row] | None = None, scoring=None
    ) -> Score:
        """pass@1 (mean@eval_n) of the global adapter (or `adapter`) on the test set, or on `rows` scored by
        `scoring` (a benchmark, pubswap/data/board_evals.py), split across the actors."""
        n = len(self.actors)
        if rows is None:
            shards = self._call([self.server.test_shards.remote(n)])[0]  # actor a: test rows a, a + n, ...
        else:
            shards = [list(rows[k::n]) for k in range(n)]
        ref = None if adapter is None else ray.put(adapter)
        per_actor = self._call(
            [
                a.evaluate.remote(s, round_idx, ref, [k + i * n for i in range(len(s))], scoring)
                for k, (a, s) in enumerate(zip(self.actors, shards))
            ]
        )
        return score(
            [r for out in per_actor for r in out["rewards"]],
            [f for out in per_actor for f in out["in_format"]],
            [row.topic for s in shards for row in s],
        )

    def shutdown(self) -> None:
        # let live clients remove their node-local adapter folders (a dead one's are removed by the next
        # client started on that node), then end every actor
        ray.wait([a.close.remote() for a in self.actors], num_returns=len(self.actors), timeout=10)
        for a in [*self.actors, self.server]:
            ray.kill(a)
        remove_placement_group(self.pg)
