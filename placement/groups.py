"""Placement: logical clients onto actors, one resource bundle per client actor reserved up front.

On an autoscaling cluster the GPU nodes may not exist yet when a run starts (cluster.yaml starts with
0 GPU workers; a cold node boots and installs vLLM and torch before it joins, which takes minutes), so
`reserve` waits (resources.placement_timeout_s, 30 minutes by default) and says every
`progress_every_s` what it waits for. It fails at once, naming the bundle, when no node type of the
cluster can ever hold it: the autoscaler's node types when an autoscaler reports them (Ray's GCS
cluster config), else the nodes that are up (a fixed cluster).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


class PlacementError(RuntimeError):
    """The cluster cannot hold the requested client bundles."""


def cluster_has_gpus() -> bool:
    return ray.cluster_resources().get("GPU", 0) > 0


def assign_clients(num_clients: int, num_actors: int) -> list[list[int]]:
    """Logical clients onto actors: contiguous blocks whose sizes differ by at most one
    (num_actors=0 or >= num_clients: one client per actor)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    a = num_clients if num_actors <= 0 else min(num_actors, num_clients)
    base, extra = divmod(num_clients, a)
    out, start = [], 0
    for i in range(a):
        size = base + (i < extra)
        out.append(list(range(start, start + size)))
        start += size
    return out


def client_bundles(num_actors: int, cpus: float, gpus: float) -> list[dict[str, float]]:
    bundle = {"CPU": float(cpus)}
    if gpus > 0:
        bundle["GPU"] = float(gpus)
    return [dict(bundle) for _ in range(num_actors)]


# --- what the cluster is and can become ------------------------------------------------------------


@dataclass(frozen=True)
class NodeType:
    name: str
    resources: Mapping[str, float]
    max_count: int  # -1: unbounded


def node_types() -> tuple[list[NodeType] | None, bool]:
    """(node types, autoscaling?). The autoscaler's node types when it reports them to the GCS; None when
    an autoscaler runs but its node types cannot be read (then nothing is ruled out); else the live
    nodes of a fixed cluster."""
    import ray._private.state

    try:
        config = ray._private.state.state.get_cluster_config()
    except Exception:  # an older GCS, or no autoscaler state
        config = None
    live = [
        NodeType(n.get("NodeManagerAddress", "node"), dict(n.get("Resources", {})), 1)
        for n in ray.nodes()
        if n.get("Alive")
    ]
    if config is not None and config.node_group_configs:
        # the live nodes too: a head node's group may say max_count 0 although the head is up
        types = [NodeType(g.name, dict(g.resources), int(g.max_count)) for g in config.node_group_configs]
        return types + live, True
    if _v1_autoscaler_with_node_types():
        return None, True
    return live, False


def _v1_autoscaler_with_node_types() -> bool:
    """True when Ray's (v1) monitor runs with an autoscaling config (`ray up`, `ray start
    --autoscaling-config`). Without one (`ray.init()`, a hand-made cluster) it runs a read-only provider
    whose node types are the live nodes, named node_<node id>."""
    import ast
    import json
    import re

    try:
        from ray._private.ray_constants import DEBUG_AUTOSCALING_STATUS
        from ray.experimental.internal_kv import _internal_kv_get

        raw = _internal_kv_get(DEBUG_AUTOSCALING_STATUS)
        # a just-started head (a cluster someone else started: RAY_ADDRESS) reports within seconds; a
        # local Ray this driver started has no autoscaling config
        for _ in range(20 if os.environ.get("RAY_ADDRESS") else 0):
            if raw:
                break
            time.sleep(0.5)
            raw = _internal_kv_get(DEBUG_AUTOSCALING_STATUS)
        if not raw:
            return False
        report = json.loads(raw).get("autoscaler_report")
        report = ast.literal_eval(report) if isinstance(report, str) else report
        names = list((report or {}).get("active_nodes") or {}) + list((report or {}).get("pending_launches") or {})
    except Exception:
        return False
    return any(not re.fullmatch(r"node_[0-9a-f]{20,}", n) for n in names)


def fits(bundle: Mapping[str, float], resources: Mapping[str, float]) -> bool:
    return all(resources.get(k, 0.0) >= v for k, v in bundle.items() if v > 0)


def never_fits(bundles: Sequence[Mapping[str, float]], types: Sequence[NodeType] | None, strategy: str) -> str | None:
    """Why `bundles` can never be placed on nodes of `types` (None: they can, given enough nodes, or the
    node types are unknown)."""
    if types is None:
        return None
    types = [t for t in types if t.max_count != 0]  # a type that may have no node holds nothing
    for b in {tuple(sorted(b.items())) for b in bundles}:
        if not any(fits(dict(b), t.resources) for t in types):
            have = "; ".join(f"{t.name}: {dict(t.resources)}" for t in types) or "none"
            return f"no node type can hold a bundle {dict(b)} (node types: {have})"
    if strategy == "STRICT_PACK":
        total = shortfall(bundles, {})[0]
        if not any(fits(total, t.resources) for t in types):
            return f"STRICT_PACK needs one node with {total}, and no node type has that"
    if all(t.max_count > 0 for t in types):  # every type bounded: count the slots
        slots = 0
        for t in types:
            per_node = min(int(t.resources.get(k, 0.0) // v) for k, v in bundles[0].items() if v > 0)
            slots += (min(per_node, 1) if strategy == "STRICT_SPREAD" else per_node) * t.max_count
        if slots < len(bundles):
            return f"{len(bundles)} bundles {dict(bundles[0])} ({strategy}) but its nodes hold at most {slots}"
    return None


def shortfall(bundles: Sequence[Mapping[str, float]], total: Mapping[str, float]) -> tuple[dict, dict]:
    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    return need, {k: total.get(k, 0.0) for k in need}


def waiting_line(
    bundles: Sequence[Mapping[str, float]],
    strategy: str,
    elapsed: float,
    timeout: float,
    total: Mapping[str, float],
    available: Mapping[str, float],
    autoscaling: bool,
) -> str:
    """The progress line printed while the placement group is pending."""
    need, have = shortfall(bundles, total)
    free = {k: available.get(k, 0.0) for k in need}
    why = (
        "the autoscaler is adding nodes (a cold GPU node boots and installs its packages first: minutes)"
        if autoscaling
        else "waiting for resources held by other work to free up"
    )
    return (
        f"placement: waiting {elapsed:.0f}s of {timeout:.0f}s for {len(bundles)} client bundles "
        f"{dict(bundles[0])} ({strategy}): need {need}, cluster has {have} ({free} free); {why}"
    )


def reserve(
    bundles: list[dict[str, float]],
    strategy: str = "PACK",
    timeout_s: float = 1800.0,
    progress_every_s: float = 30.0,
    log: Callable[[str], None] = lambda s: print(s, flush=True),
):
    """Create the placement group and wait until it is ready, printing progress; raise PlacementError
    at once if the cluster can never hold it, or after `timeout_s`."""
    types, autoscaling = node_types()
    reason = never_fits(bundles, types, strategy)
    if reason is not None:
        raise PlacementError(
            f"the cluster can never hold the client actors: {reason}. Lower "
            "resources.cpus_per_client / gpus_per_client, or add a node type that fits."
        )
    pg = placement_group(bundles, strategy=strategy)
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        ready, _ = ray.wait([pg.ready()], timeout=max(0.0, min(progress_every_s, timeout_s - elapsed)))
        if ready:
            return pg
        elapsed = time.monotonic() - start
        if elapsed >= timeout_s:
            break
        log(
            waiting_line(
                bundles, strategy, elapsed, timeout_s, ray.cluster_resources(), ray.available_resources(), autoscaling
            )
        )
    remove_placement_group(pg)
    need, have = shortfall(bundles, ray.cluster_resources())
    raise PlacementError(
        f"cluster cannot hold {len(bundles)} client bundles {bundles[0]} ({strategy}) within "
        f"{timeout_s:.0f}s (resources.placement_timeout_s): need {need}, cluster has {have}. Lower "
        "resources.cpus_per_client / gpus_per_client, add nodes, or wait longer."
    )


def bundle_strategy(pg, index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=index, placement_group_capture_child_tasks=False
    )
