"""Placement: logical clients onto actors, one resource bundle per client actor reserved up front, and a
clear error if the cluster cannot hold them."""

from __future__ import annotations

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


def reserve(bundles: list[dict[str, float]], strategy: str = "PACK", timeout_s: float = 120.0):
    """Create the placement group and wait until it is ready, else raise PlacementError naming the shortfall."""
    pg = placement_group(bundles, strategy=strategy)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(pg)
        need: dict[str, float] = {}
        for b in bundles:
            for k, v in b.items():
                need[k] = need.get(k, 0.0) + v
        have = {k: ray.cluster_resources().get(k, 0.0) for k in need}
        raise PlacementError(f"cluster cannot hold {len(bundles)} client bundles {bundles[0]} ({strategy}) within "
                             f"{timeout_s:.0f}s: need {need}, cluster has {have}. Lower resources.cpus_per_client / "
                             f"gpus_per_client, or add nodes.")
    return pg


def bundle_strategy(pg, index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=index,
                                            placement_group_capture_child_tasks=False)
