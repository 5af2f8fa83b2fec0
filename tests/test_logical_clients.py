"""Logical clients multiplexed on actors, and partial participation, on a local Ray cluster (HF rollouts).

16 logical clients on 4 actors train one round: every participant trains its own adapter, the
non-participants do not train, and the new global adapter is the participants' weighted mean. The
same 4 clients give the same adapter on 1 actor as on 4 (up to float summation order).
"""

import time

import pytest
import ray
import torch
from ray_helpers import tiny_config

from jobs.federation import Federation
from jobs.train import build_split
from pubswap.algorithms.participation import participants
from pubswap.lora import flatten
from pubswap.methods import RoundContext

SMALL = [
    "federation.rounds=1",
    "federation.tau=3",
    "grpo.b=1",
    "grpo.K=4",
    "model.max_response_len=1",
    "data.per_client=6",
    "data.public_size=8",
    "data.test_size=8",
    "resources.cpus_per_client=0.5",
]


def one_round(cfg, model_dir, run_dir):
    fed = Federation(cfg, build_split(cfg, str(model_dir)), str(model_dir), str(run_dir))
    try:
        start = fed.initial_adapter()
        fed.set_global(start)
        record, averaged, _ = cfg.federation.family.run_round(fed, cfg, 1, start, RoundContext(time.perf_counter()))
        home = {c: a for a, cids in enumerate(fed.assignment) for c in cids}
        pre = {c: ray.get(fed.actors[home[c]].get_pre_average.remote(c)) for c in range(cfg.federation.num_clients)}
        post = {c: ray.get(fed.actors[home[c]].get_adapter.remote(c)) for c in range(cfg.federation.num_clients)}
        return fed.weights(record["participants"]), start, record, averaged, pre, post
    finally:
        fed.shutdown()


def test_sixteen_clients_on_four_actors_with_partial_participation(local_ray, digit_model_dir, tmp_path):
    cfg = tiny_config(
        digit_model_dir,
        tmp_path,
        *SMALL,
        "federation.num_clients=16",
        "resources.num_actors=4",
        "federation.clients_per_round=10",
        "federation.weighting=samples",
        "grpo.K=8",
        "grpo.b=2",
    )
    weights, start, record, averaged, pre, post = one_round(cfg, digit_model_dir, tmp_path)
    parts = record["participants"]
    assert parts == participants(cfg.seed, 1, 16, 10) and len(parts) == 10
    for st in record["steps"]:
        assert [c["client"] for c in st["clients"]] == parts
        if st["public"]:
            assert len(st["provenance"]) == 10  # only participants answered and were swapped
            assert {o for per_client in st["provenance"] for g in per_client for o, _ in g} <= set(parts)
    flat = {c: flatten(pre[c])[0] for c in parts}
    start_flat = flatten(start)[0]
    for c in range(16):
        if c in parts:
            assert not torch.equal(flat[c], start_flat)  # trained
        else:
            assert pre[c] is None  # sat the round out
    # each trained its own adapter: those that saw a non-zero advantage all differ; the others moved by
    # AdamW's weight decay alone (their GRPO gradient was zero), identically
    learned = [
        c
        for c in parts
        if any(cl["zero_adv_frac"] < 1 for st in record["steps"] for cl in st["clients"] if cl["client"] == c)
    ]
    assert len(learned) >= 5
    assert len({tuple(flat[c].tolist()) for c in learned}) == len(learned)
    idle = [c for c in parts if c not in learned]
    assert all(torch.equal(flat[c], flat[idle[0]]) and not torch.equal(flat[c], flat[learned[0]]) for c in idle)
    assert sum(weights.values()) == pytest.approx(1.0)
    mean = sum(weights[c] * flat[c] for c in parts)
    assert torch.allclose(flatten(averaged)[0], mean, atol=1e-6)
    assert all(torch.equal(flatten(post[c])[0], flatten(averaged)[0]) for c in range(16))
    assert len(record["drift_sq"]) == 10


def test_multiplexed_clients_match_one_actor_per_client(local_ray, digit_model_dir, tmp_path):
    results = {}
    for actors in (1, 4):
        cfg = tiny_config(
            digit_model_dir,
            tmp_path / str(actors),
            *SMALL,
            "federation.num_clients=4",
            f"resources.num_actors={actors}",
        )
        _, _, record, averaged, _, _ = one_round(cfg, digit_model_dir, tmp_path / str(actors))
        results[actors] = (record, flatten(averaged)[0])
    (rec1, avg1), (rec4, avg4) = results[1], results[4]
    rewards = [[[c["reward_mean"] for c in st["clients"]] for st in rec["steps"]] for rec in (rec1, rec4)]
    assert rewards[0] == rewards[1]  # the same rollouts: seeds depend on the client, not on its actor
    assert (avg1 - avg4).abs().max().item() < 1e-6
    assert not torch.equal(avg1, torch.zeros_like(avg1))


def wait_for_free_cpus(n: float, timeout_s: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU") != n and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == n


def test_a_request_the_cluster_can_never_hold_fails_at_once(local_ray):
    import time

    from placement import PlacementError, client_bundles, reserve

    wait_for_free_cpus(2.0)  # placement groups of earlier tests are removed asynchronously
    t = time.monotonic()
    with pytest.raises(
        PlacementError,
        match=r"can never hold .*4 bundles \{'CPU': 1\.0\} \(SPREAD\) but its nodes "
        r"hold at most 2",
    ):
        reserve(client_bundles(4, 1.0, 0.0), "SPREAD", timeout_s=600.0)
    assert time.monotonic() - t < 30  # a fixed cluster that can never fit is not waited for
    with pytest.raises(PlacementError, match=r"no node type can hold a bundle \{'CPU': 1\.0, 'GPU': 1\.0\}"):
        reserve(client_bundles(1, 1.0, 1.0), "PACK", timeout_s=600.0)
    assert ray.available_resources().get("CPU") == 2.0  # nothing left reserved


def test_a_request_that_waits_says_what_it_waits_for_then_times_out(local_ray):

    from ray.util.placement_group import placement_group, remove_placement_group

    from placement import PlacementError, client_bundles, reserve

    wait_for_free_cpus(2.0)
    busy = placement_group([{"CPU": 2.0}])  # other work holds the whole node
    ray.get(busy.ready())
    lines: list[str] = []
    try:
        with pytest.raises(PlacementError, match=r"within 3s \(resources.placement_timeout_s\): need \{'CPU': 1\.0\}"):
            reserve(client_bundles(1, 1.0, 0.0), "PACK", timeout_s=3.0, progress_every_s=1.0, log=lines.append)
    finally:
        remove_placement_group(busy)
    assert len(lines) >= 2
    assert lines[0].startswith(
        "placement: waiting 1s of 3s for 1 client bundles {'CPU': 1.0} (PACK): need "
        "{'CPU': 1.0}, cluster has {'CPU': 2.0} ({'CPU': 0.0} free)"
    )
    wait_for_free_cpus(2.0, timeout_s=10.0)  # the waiting group was removed
