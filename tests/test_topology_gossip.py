"""Graphs, mixing matrices and the three gossip schemes on toy problems (no Ray, no model)."""

import pytest
import torch

from pubswap.algorithms.gossip import (
    Choco,
    SeedMessage,
    apply_messages,
    consensus_distance,
    direction,
    flood,
    identity,
    make_compressor,
    mix,
    rand_k,
    seedflood_scale,
    top_k,
    zo_message,
)
from pubswap.algorithms.topology import grid_shape, make_topology
from pubswap.config import FederationConfig
from pubswap.seeding import derive_seed


@pytest.mark.parametrize("kind", ["ring", "meshgrid", "torus", "complete"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 16, 32, 64, 128])
def test_mixing_matrices_are_symmetric_and_doubly_stochastic(kind, n):
    if kind == "complete" and n > 32:
        n = 32  # O(n^2) edges; the property does not depend on size
    g = make_topology(kind, n)
    W = g.mixing()
    assert torch.equal(W, W.T)
    assert torch.allclose(W.sum(0), torch.ones(n, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(W.sum(1), torch.ones(n, dtype=torch.float64), atol=1e-12)
    assert (W >= 0).all()
    assert all((W[i, j] > 0) == (j in g.neighbours[i] or i == j) for i in range(n) for j in range(n))
    assert 0 < g.spectral_gap() <= 1 or n == 1


def test_known_diameters_and_grid_shapes():
    assert make_topology("ring", 16).diameter() == 8 and make_topology("ring", 17).diameter() == 8
    assert grid_shape(16) == (4, 4) and grid_shape(32) == (4, 8) and grid_shape(128) == (8, 16)
    assert make_topology("meshgrid", 16).diameter() == 6  # (4-1) + (4-1): the grid does not wrap
    assert make_topology("torus", 16).diameter() == 4
    assert make_topology("complete", 8).diameter() == 1
    mesh = make_topology("meshgrid", 16)
    assert sorted(len(nb) for nb in mesh.neighbours) == [2] * 4 + [3] * 8 + [4] * 4
    assert make_topology("edges", 3, [[0, 1], [1, 2]]).diameter() == 2
    with pytest.raises(ValueError, match="not connected"):
        make_topology("edges", 4, [[0, 1], [2, 3]])
    with pytest.raises(ValueError, match="outside"):
        make_topology("edges", 3, [[0, 5]])


def test_dsgd_consensus_distance_shrinks_at_the_rate_the_spectral_gap_predicts():
    """Pure mixing on a ring: the disagreement x - mean decays like |lambda_2|^t, so the consensus
    distance (squared) like |lambda_2|^(2t)."""
    n = 16
    g = make_topology("ring", n)
    W = g.mixing()
    lam2 = 1 - g.spectral_gap()
    gen = torch.Generator().manual_seed(0)
    xs = [{"w": torch.randn(5, generator=gen, dtype=torch.float64)} for _ in range(n)]
    d0 = consensus_distance(xs)
    mean0 = sum(x["w"] for x in xs) / n
    for _ in range(200):
        xs = mix(W, xs, g)
    d = consensus_distance(xs)
    assert torch.allclose(sum(x["w"] for x in xs) / n, mean0, atol=1e-12)  # doubly stochastic: mean kept
    rate = (d / d0) ** (1 / 200)
    assert rate == pytest.approx(lam2**2, rel=0.02)  # the slowest mode dominates after 200 steps
    assert d <= d0 * lam2 ** (2 * 200) * 1.0001  # and never slower than the bound


def test_dsgd_on_a_toy_quadratic_reaches_the_average_optimum():
    """Client i minimises ||x - c_i||^2 / 2; DSGD with a decaying step converges to mean(c)."""
    n = 8
    g = make_topology("meshgrid", n)
    W = g.mixing()
    gen = torch.Generator().manual_seed(1)
    c = [torch.randn(3, generator=gen, dtype=torch.float64) for _ in range(n)]
    xs = [{"w": torch.zeros(3, dtype=torch.float64)} for _ in range(n)]
    for t in range(3000):
        lr = 1.0 / (t + 10)
        xs = mix(W, [{"w": x["w"] - lr * (x["w"] - ci)} for x, ci in zip(xs, c)], g)
    target = sum(c) / n
    assert all(torch.allclose(x["w"], target, atol=5e-3) for x in xs)


def test_choco_with_the_identity_compressor_is_dsgd():
    n = 16
    g = make_topology("ring", n)
    W = g.mixing()
    gen = torch.Generator().manual_seed(2)
    xs = [
        {
            "a": torch.randn(4, 3, generator=gen, dtype=torch.float64),
            "b": torch.randn(7, generator=gen, dtype=torch.float64),
        }
        for _ in range(n)
    ]
    choco = Choco(g, gamma=1.0, compress=identity)
    a, b = xs, xs
    for t in range(20):
        grads = [{k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in x.items()} for x in a]
        a, sent = choco.step([{k: x[k] - 0.1 * gr[k] for k in x} for x, gr in zip(a, grads)], t)
        b = mix(W, [{k: x[k] - 0.1 * gr[k] for k in x} for x, gr in zip(b, grads)], g)
        for xa, xb in zip(a, b):
            for k in xa:  # equal up to rounding: x + sum W (xh_j - xh_i) vs sum W x_j
                assert torch.allclose(xa[k], xb[k], atol=1e-12, rtol=0)
    assert sent == [8 * (12 + 7) * 2] * n  # dense float64 to both ring neighbours


@pytest.mark.parametrize("compress", [top_k(0.25), rand_k(0.25)])
def test_choco_with_compression_still_reaches_consensus(compress):
    n = 16
    g = make_topology("ring", n)
    gen = torch.Generator().manual_seed(3)
    xs = [{"w": torch.randn(40, generator=gen, dtype=torch.float64)} for _ in range(n)]
    mean0 = sum(x["w"] for x in xs) / n
    choco = Choco(g, gamma=0.2, compress=compress)
    d0 = consensus_distance(xs)
    for t in range(600):
        xs, sent = choco.step(xs, t)
    assert consensus_distance(xs) < 1e-3 * d0
    assert torch.allclose(sum(x["w"] for x in xs) / n, mean0, atol=1e-9)  # gossip keeps the mean
    assert (
        sent == [(10 * 8 + 5) * 2] * n
    )  # 10 of 40 values + a 40-bit mask (5 bytes < 10 int32 positions), to 2 neighbours


@pytest.mark.parametrize(
    "kind,n,compressor",
    [("ring", 16, "top-k"), ("ring", 16, "rand-k"), ("ring", 128, "top-k"), ("meshgrid", 128, "top-k")],
)
def test_choco_at_the_default_step_size_converges_on_the_boards_graphs(kind, n, compressor):
    """1,000 pure-gossip steps (no gradients) at the config's default gamma and 10% compression: the
    consensus distance shrinks at every quarter (the former default 0.5 grows it by 10^6 and more)."""
    f = FederationConfig(choco_compressor=compressor)
    assert f.choco_step == f.choco_fraction == 0.1
    g = make_topology(kind, n)
    gen = torch.Generator().manual_seed(5)
    xs = [{"w": torch.randn(40, generator=gen)} for _ in range(n)]
    choco = Choco(
        g, f.choco_step, make_compressor(compressor, f.choco_fraction), seed=1, initial={"w": torch.zeros(40)}
    )
    trace = [consensus_distance(xs)]
    for t in range(1000):
        xs, _ = choco.step(xs, t)
        if (t + 1) % 250 == 0:
            trace.append(consensus_distance(xs))
    assert all(b < a for a, b in zip(trace, trace[1:])), trace
    assert trace[-1] < 0.05 * trace[0], trace


def test_the_choco_step_size_is_the_configured_one_or_the_compressors_fraction():
    assert FederationConfig(choco_gamma=0.3).choco_step == 0.3
    assert FederationConfig(choco_fraction=0.02).choco_step == 0.02
    assert FederationConfig(choco_compressor="identity").choco_step == 1.0  # CHOCO is then DSGD


@pytest.mark.parametrize("n", [16, 128])
def test_a_flood_moves_the_model_by_the_mean_of_the_clients_steps(n):
    """n clients that all send the same step: after the flood the model has moved by that one step, at
    16 clients as at 128 (the sum would move it n times as far)."""
    x = {"w": torch.zeros(64, dtype=torch.float64)}
    one = apply_messages(x, [SeedMessage(1, 0, 7, 0.01)])
    flooded = apply_messages(x, [SeedMessage(1, i, 7, 0.01) for i in range(n)], scale=seedflood_scale(n))
    assert torch.allclose(flooded["w"], one["w"], rtol=1e-12, atol=0)
    summed = apply_messages(x, [SeedMessage(1, i, 7, 0.01) for i in range(n)])
    assert torch.allclose(summed["w"], n * one["w"], rtol=1e-9, atol=0)


@pytest.mark.parametrize("kind,n", [("ring", 16), ("meshgrid", 32), ("ring", 33)])
def test_seedflood_rebuilds_the_same_parameters_on_every_client_after_diameter_hops(kind, n):
    g = make_topology(kind, n)
    x0 = {"a": torch.zeros(6, 5), "b": torch.zeros(3)}
    held = [set() for _ in range(n)]
    fresh = [set() for _ in range(n)]
    steps = 3
    sent_total = [0] * n
    for t in range(steps):
        new = [[SeedMessage(t, i, 1000 * t + i, 0.01 * (i + 1))] for i in range(n)]
        sent = flood(g, new, held, fresh)
        sent_total = [a + b for a, b in zip(sent_total, sent)]
    for _ in range(g.diameter() - 1):  # the last step's messages need diameter hops in all
        sent = flood(g, [[] for _ in range(n)], held, fresh)
        sent_total = [a + b for a, b in zip(sent_total, sent)]
    everything = {SeedMessage(t, i, 1000 * t + i, 0.01 * (i + 1)) for t in range(steps) for i in range(n)}
    assert all(h == everything for h in held)
    # each client got its messages in its own order: apply_messages puts them in the canonical one
    orders = [
        [sorted(h)[j] for j in torch.randperm(len(h), generator=torch.Generator().manual_seed(i))]
        for i, h in enumerate(held)
    ]
    rebuilt = [apply_messages(x0, o) for o in orders]
    for r in rebuilt[1:]:
        assert all(torch.equal(r[k], rebuilt[0][k]) for k in x0)  # bitwise
    # and it is the sum of every update: x0 - sum scalar * z(seed)
    want = {k: -sum(m.scalar * direction(m.seed, x0)[k] for m in sorted(everything)) for k in x0}
    assert all(torch.allclose(rebuilt[0][k], want[k], atol=1e-6) for k in x0)
    # each client forwards each of the n * steps messages once to each neighbour (20 bytes apiece); the
    # ones that reached a client in the last hop are forwarded in the next round
    bound = [len(everything) * SeedMessage.NBYTES * len(nb) for nb in g.neighbours]
    assert all(s <= b for s, b in zip(sent_total, bound))
    drained = flood(g, [[] for _ in range(n)], held, fresh)
    assert [a + b for a, b in zip(sent_total, drained)] == bound


def test_seedflood_one_hop_short_of_the_diameter_is_not_enough():
    g = make_topology("ring", 16)
    held = [set() for _ in range(16)]
    fresh = [set() for _ in range(16)]
    flood(g, [[SeedMessage(0, i, i, 1.0)] for i in range(16)], held, fresh)
    for _ in range(g.diameter() - 2):
        flood(g, [[] for _ in range(16)], held, fresh)
    assert any(len(h) < 16 for h in held)


def test_seedflood_zeroth_order_training_on_a_toy_quadratic_keeps_every_client_identical():
    """Client i minimises ||x - c_i||^2 / 2 with one two-point ZO message per step; messages are flooded
    and applied once every client has them (after the diameter), in canonical order, so all clients
    hold the same bits, and the shared x approaches mean(c)."""
    n = 8
    g = make_topology("ring", n)
    D = g.diameter()
    gen = torch.Generator().manual_seed(4)
    c = [torch.randn(6, generator=gen) for _ in range(n)]
    x0 = {"w": torch.zeros(6)}
    held = [set() for _ in range(n)]
    fresh = [set() for _ in range(n)]
    applied = [dict(x0) for _ in range(n)]  # each client's copy, all messages of steps <= t - D applied
    steps = 300
    for t in range(steps + D):
        new = []
        for i in range(n):
            if t < steps:
                loss = lambda x, ci=c[i]: float(0.5 * ((x["w"] - ci) ** 2).sum())  # noqa: E731
                new.append([zo_message(loss, applied[i], t, i, derive_seed(0, "zo", t, i), eps=1e-3, lr=0.005)])
            else:
                new.append([])
        flood(g, new, held, fresh)
        done = t - D + 1  # every message of this step has now travelled the diameter
        if done >= 0:
            for i in range(n):
                applied[i] = apply_messages(applied[i], [m for m in held[i] if m.step == done])
    for a in applied[1:]:
        assert torch.equal(a["w"], applied[0]["w"])  # bitwise the same on every client
    target = sum(c) / n
    start_gap = float((x0["w"] - target).norm())
    assert float((applied[0]["w"] - target).norm()) < 0.35 * start_gap


def test_choco_public_copies_start_at_the_shared_initial_weights():
    """Clients a small step away from shared initial weights that hold many equal values (a base model's
    norm weights are all 1.0): with public copies starting at those weights CHOCO's top-k gossip
    contracts their distance; from zeros the first messages carry the initial weights themselves, each
    client's top-k picks a different few of the tied entries, and the clients are pushed far apart."""
    g = make_topology("ring", 8)
    gen = torch.Generator().manual_seed(0)
    x0 = {"w": torch.cat([torch.ones(1000), 0.1 * torch.randn(3000, generator=gen)])}
    xs = [{"w": x0["w"] + 1e-3 * torch.randn(4000, generator=gen)} for _ in range(8)]
    before = consensus_distance(xs)
    shared, _ = Choco(g, gamma=0.5, compress=top_k(0.1), initial=x0).step(xs, 0)
    zeros, _ = Choco(g, gamma=0.5, compress=top_k(0.1)).step(xs, 0)
    assert consensus_distance(shared) < before
    assert consensus_distance(zeros) > 100 * before
