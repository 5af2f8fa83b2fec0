"""The user's cluster, simulated with Ray's own multi-node test cluster on this machine (issue 13, item 4).

A head node without CPUs (as on the paper's cluster, where the head only schedules) and three 2-CPU worker
nodes, each a real raylet with its own processes. The driver is a real `python -m jobs.train` process
connected to the cluster through RAY_ADDRESS, as under `ray job submit`.
"""

from __future__ import annotations

import time

import pytest
from ray.cluster_utils import Cluster
from ray_helpers import (
    EventWatch,
    console_of,
    final_sha,
    ft_config,
    metrics,
    run_driver,
    run_processes,
    start_logged_driver,
)

from pubswap.run.events import read_events

SPREAD = ["resources.cpus_per_client=1", "resources.placement_strategy=SPREAD"]


def ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def client_actors_by_node(nodes) -> dict[int, list[int]]:
    """index of the node -> pids of the ClientActor processes its raylet started."""
    raylets = {n.all_processes["raylet"][0].process.pid: i for i, n in enumerate(nodes)}
    out: dict[int, list[int]] = {i: [] for i in range(len(nodes))}
    for pid, cmd in run_processes().items():
        if "ray::ClientActor" in cmd and not cmd.startswith("ray::IDLE"):
            try:
                parent = ppid(pid)
            except OSError:
                continue
            if parent in raylets:
                out[raylets[parent]].append(pid)
    return out


@pytest.fixture
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    workers = [c.add_node(num_cpus=2) for _ in range(3)]
    c.wait_for_nodes()
    try:
        yield c, workers
    finally:
        c.shutdown()


def test_clients_spread_over_nodes_and_a_removed_node_is_survived_bitwise(
    cluster, ft_reference, digit_model_dir, tmp_path
):
    c, workers = cluster
    env = {"RAY_ADDRESS": c.address}
    cfg = ft_config(digit_model_dir, tmp_path / "run", *SPREAD)
    driver = start_logged_driver(cfg, env_extra=env)
    try:
        EventWatch(driver, cfg.run_dir).wait(event="step", round=2, step=1)  # step 2 (public) under way
        placed = client_actors_by_node(workers)
        # SPREAD: the two clients' actors on two different worker nodes (PACK would put both on one), the third
        # node spare
        assert sorted(len(p) for p in placed.values()) == [0, 1, 1], placed
        victim = next(i for i, p in placed.items() if p)
        c.remove_node(workers[victim], allow_graceful=False)  # the node is gone: raylet and its workers
        driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, console_of(driver)[-3000:]
    assert [(e["phase"], e["round"]) for e in read_events(cfg.run_dir, "recovery")] == [("round", 2)]
    records = metrics(cfg.run_dir)
    assert [r["round"] for r in records] == [1, 2]
    assert [r["recoveries"] for r in records] == [0, 1]  # round 2 was redone once, on the spare node
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)
    deadline = time.monotonic() + 30  # the run's actors end with it, on the nodes left too
    while any(client_actors_by_node(workers[:victim] + workers[victim + 1 :]).values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(client_actors_by_node(workers[:victim] + workers[victim + 1 :]).values())

    # a request larger than the cluster (5 clients of 1 CPU, SPREAD, on the two 2-CPU nodes left) fails at
    # once with the shortfall named: one line, exit 2, nothing started
    t = time.monotonic()
    bigger = run_driver(ft_config(digit_model_dir, tmp_path / "bigger", *SPREAD, "federation.num_clients=5"), env)
    assert bigger.returncode == 2, bigger.stderr[-2000:]
    assert time.monotonic() - t < 120
    err = bigger.stderr.strip()
    assert err.splitlines() == [err]
    assert (
        "the cluster can never hold the client actors: 5 bundles {'CPU': 1.0} (SPREAD) but its nodes hold at "
        "most 4" in err
    )
