"""Each federated-LoRA strategy's rule on hand-made adapters, against a result computed here independently
(dense products, torch's own SVD), and the exact byte counts of what it sends."""

import math

import pytest
import torch

from pubswap.algorithms.aggregation import (
    STRATEGIES,
    Context,
    FedDARE,
    FedICU,
    FedIT,
    FedProx,
    FedSRD,
    FedSRDe,
    FFALoRA,
    FlexLoRA,
    payload_bytes,
)
from pubswap.algorithms.aggregation.fedsrd import pearson_kurtosis, prune_by_importance, prune_ratio
from pubswap.algorithms.aggregation.payload import kept, sparsify, tensor_bytes

A1, B1 = "m1.lora_A.weight", "m1.lora_B.weight"  # a 6 x 5 weight, r = 2
A2, B2 = "m2.lora_A.weight", "m2.lora_B.weight"  # a 3 x 4 weight, r = 2


def adapter(gen, b_zero=False, scale=1.0):
    return {
        A1: torch.randn(2, 5, generator=gen) * scale,
        B1: torch.zeros(6, 2) if b_zero else torch.randn(6, 2, generator=gen) * scale,
        A2: torch.randn(2, 4, generator=gen) * scale,
        B2: torch.zeros(3, 2) if b_zero else torch.randn(3, 2, generator=gen) * scale,
    }


def trained_from(start, gen, n=3, scale=0.1):
    return [{k: v + scale * torch.randn(v.shape, generator=gen) for k, v in start.items()} for _ in range(n)]


def product(ad, a=A1, b=B1):
    return ad[b].double() @ ad[a].double()


def test_every_strategy_is_registered_by_its_config_name():
    assert set(STRATEGIES) == {"fedit", "ffa-lora", "flexlora", "fed-dare", "fedsrd", "fedsrd-e", "fedicu"}
    assert {n for n, s in STRATEGIES.items() if s.linear} == {"fedit", "ffa-lora"}


def test_fedit_sends_r_times_m_plus_d_values_per_module_each_way():
    gen = torch.Generator().manual_seed(0)
    start = adapter(gen)
    res = FedIT().run_round(start, trained_from(start, gen, 2))
    per_direction = 4 * (2 * (5 + 6) + 2 * (4 + 3))  # fp32 values: r (m + d) per module
    assert res.upload_bytes == [per_direction] * 2 and res.download_bytes == [per_direction] * 2
    half = FedIT().run_round(
        {k: v.bfloat16() for k, v in start.items()},
        [{k: v.bfloat16() for k, v in t.items()} for t in trained_from(start, gen, 2)],
    )
    assert half.upload_bytes == [per_direction // 2] * 2  # counted at the dtype actually sent


def test_ffa_lora_trains_and_sends_only_b_and_its_mean_is_exact():
    gen = torch.Generator().manual_seed(1)
    start = adapter(gen)
    s = FFALoRA()
    assert not s.trains(A1) and s.trains(B1)
    trained = [
        {**start, B1: start[B1] + torch.randn(6, 2, generator=gen), B2: start[B2] + torch.randn(3, 2, generator=gen)}
        for _ in range(3)
    ]
    res = s.run_round(start, trained, weights=[1, 2, 3])
    w = [1 / 6, 2 / 6, 3 / 6]
    mean_product = sum(wi * product(t) for wi, t in zip(w, trained))
    assert torch.allclose(product(res.adapter), mean_product, atol=1e-6)  # mean of products = product of means
    assert torch.equal(res.adapter[A1], start[A1])
    assert res.upload_bytes == [4 * 2 * (6 + 3)] * 3  # d r values per module, B only


def test_flexlora_reproduces_the_mean_product_when_the_rank_allows():
    gen = torch.Generator().manual_seed(2)
    start = adapter(gen)
    trained = []
    for _ in range(2):  # each client's product has rank 1, so their mean has rank <= 2 = r
        t = {k: v.clone() for k, v in start.items()}
        for b in (B1, B2):
            t[b][:, 1] = 0
            t[b][:, 0] = torch.randn(t[b].shape[0], generator=gen)
        trained.append(t)
    res = FlexLoRA().run_round(start, trained)
    for a, b in ((A1, B1), (A2, B2)):
        want = (product(trained[0], a, b) + product(trained[1], a, b)) / 2
        assert torch.allclose(product(res.adapter, a, b), want, atol=1e-5)
    assert res.upload_bytes == res.download_bytes == [4 * 2 * (11 + 7)] * 2


def test_flexlora_gives_the_best_rank_r_approximation_otherwise():
    gen = torch.Generator().manual_seed(3)
    start = adapter(gen)
    trained = trained_from(start, gen, 3, scale=1.0)
    res = FlexLoRA().run_round(start, trained, weights=[3, 1, 1])
    for a, b in ((A1, B1), (A2, B2)):
        mean = (3 * product(trained[0], a, b) + product(trained[1], a, b) + product(trained[2], a, b)) / 5
        u, s, vh = torch.linalg.svd(mean)
        best = u[:, :2] @ torch.diag(s[:2]) @ vh[:2]
        assert torch.linalg.matrix_rank(mean) > 2  # the truncation matters here
        assert torch.allclose(product(res.adapter, a, b), best, atol=1e-5)
        # the even split: B's columns and A's rows have equal norms, sqrt(s_j) each
        assert torch.allclose(res.adapter[b].double().norm(dim=0), res.adapter[a].double().norm(dim=1), atol=1e-5)


def test_fed_dare_drops_a_fraction_p_and_is_unbiased_over_seeds():
    gen = torch.Generator().manual_seed(4)
    start = {"x.lora_A.weight": torch.zeros(40, 50), "x.lora_B.weight": torch.zeros(50, 40)}
    trained = {k: v + torch.randn(v.shape, generator=gen) for k, v in start.items()}
    delta = trained["x.lora_A.weight"]
    s = FedDARE(p=0.75)
    sent = [s.upload(start, trained, Context(seed, 1, 0))["x.lora_A.weight"] for seed in range(400)]
    share = sum(x.values.numel() for x in sent) / (400 * delta.numel())
    assert share == pytest.approx(0.25, abs=0.01)
    mean = sum(x.dense() for x in sent) / 400
    # each entry's mean over 400 draws: delta +- delta * sqrt(p / (1 - p) / 400) ~ 0.087 delta
    assert ((mean - delta).abs() / delta.abs().clamp_min(1e-3)).median() < 0.1
    assert abs(float((mean - delta).sum() / delta.abs().sum())) < 0.01
    # same seed, same drop; another client, another drop
    again = s.upload(start, trained, Context(0, 1, 0))["x.lora_A.weight"]
    assert torch.equal(again.dense(), sent[0].dense())
    other = s.upload(start, trained, Context(0, 1, 1))["x.lora_A.weight"]
    assert not torch.equal(other.dense(), sent[0].dense())
    # the new global is start + the weighted mean of the sent deltas, sent down sparse: on the union of
    # the clients' kept positions (1 - p^2 of the entries for 2 clients)
    res = s.run_round(start, [trained, trained], seed=0, clients=[0, 1])
    ups = [s.upload(start, trained, Context(0, 1, c)) for c in (0, 1)]
    down = s.server_aggregate(start, ups, None, Context(0, 1, None))
    for k in start:
        assert torch.equal(res.adapter[k], start[k] + (ups[0][k].dense() + ups[1][k].dense()) / 2)
        assert torch.equal(kept(down[k]), kept(ups[0][k]) | kept(ups[1][k]))
    union = sum(int(kept(d).sum()) for d in down.values())
    assert union / 4000 == pytest.approx(1 - 0.75**2, abs=0.03)
    assert res.download_board == [4 * union] * 2 and res.download_bytes[0] < 4 * 4000


def test_fedsrd_weighs_b_by_the_global_a_rows():
    """importance(dB[:, j]) = |dB| x ||row j of the round-start A||: with the trained A's row norms the
    other way round, only the columns of B facing the global A's large rows survive."""
    d, r, m = 12, 4, 10
    big = torch.tensor([10.0, 10.0, 0.01, 0.01])[:, None]
    base = torch.ones(r, m) / m**0.5
    start = {"x.lora_A.weight": base * big, "x.lora_B.weight": torch.full((d, r), 0.1)}
    trained = {
        "x.lora_A.weight": base * big.flip(0),  # the trained A's large rows are 2 and 3
        "x.lora_B.weight": start["x.lora_B.weight"] + 0.05,  # every entry of dB the same size
    }
    up = FedSRD().upload(start, trained, Context(0, 1, 0))["x.lora_B.weight"]
    cols = torch.nonzero(kept(up))[:, 1]
    assert cols.numel() > 0 and set(cols.tolist()) <= {0, 1}


def test_the_board_convention_counts_fp32_values_without_positions():
    t = torch.arange(1000, dtype=torch.float32)
    sp = sparsify(t, t % 10 == 0)  # 100 values + a 125-byte bitmask
    assert tensor_bytes(sp) == 100 * 4 + 1000 // 8 and tensor_bytes(sp, board=True) == 100 * 4
    half = torch.zeros(10, 10, dtype=torch.bfloat16)
    assert tensor_bytes(half) == 200 and tensor_bytes(half, board=True) == 400
    assert payload_bytes({"a": sp, "b": half}, board=True) == 800


def test_sparse_payload_bytes_are_values_plus_the_cheaper_position_encoding():
    t = torch.arange(1000, dtype=torch.float32)
    few = torch.zeros(1000, dtype=torch.bool)
    few[:10] = True
    sp = sparsify(t, few)
    assert sp.index is not None and sp.nbytes == 10 * 4 + 10 * 4  # values + int32 indices
    many = torch.zeros(1000, dtype=torch.bool)
    many[::2] = True
    sp = sparsify(t, many)
    assert sp.mask is not None and sp.nbytes == 500 * 4 + 125  # values + a 1000-bit mask
    assert torch.equal(sp.dense(), torch.where(many, t, torch.zeros_like(t)))
    assert payload_bytes({"a": sp, "b": torch.zeros(3, dtype=torch.bfloat16)}) == 2125 + 6


def test_fedsrd_prune_ratio_follows_the_kurtosis():
    assert pearson_kurtosis(torch.tensor([0.0, 0.0, 0.0, 1.0])) == pytest.approx(0.08203125 / 0.1875**2)  # 2.33
    assert pearson_kurtosis(torch.tensor([-1.0, 1.0] * 50)) == pytest.approx(1.0)
    assert pearson_kurtosis(torch.randn(200000, generator=torch.Generator().manual_seed(0))) == pytest.approx(
        3.0, abs=0.05
    )
    assert prune_ratio(1.0) == pytest.approx(0.85)  # ln 1 = 0
    assert prune_ratio(0.5) == pytest.approx(0.85)  # kurtosis below 1 counts as 1
    assert prune_ratio(math.e) == pytest.approx(0.95)
    assert prune_ratio(math.e**2) == pytest.approx(0.96)  # capped at base + upper


def test_fedsrd_pruning_keeps_the_important_entries_and_their_l1_mass():
    gen = torch.Generator().manual_seed(5)
    delta = torch.randn(20, 10, generator=gen)
    importance = torch.rand(20, 10, generator=gen)
    keep, kept = prune_by_importance(delta, importance, 0.9)
    assert int(keep.sum()) == 20  # 200 entries, the top 10 %
    assert importance[keep].min() > importance[~keep].max()
    assert float(kept.abs().sum()) == pytest.approx(float(delta.abs().sum()), rel=1e-6)
    assert torch.allclose(
        kept[keep] / delta[keep], torch.full((20,), float(delta.abs().sum() / delta[keep].abs().sum()))
    )


def test_fedsrd_client_importance_uses_the_other_factors_norms():
    gen = torch.Generator().manual_seed(6)
    start = adapter(gen)
    trained = trained_from(start, gen, 1)[0]
    up = FedSRD().upload(start, trained, Context(0, 1, 0))
    dA = trained[A1] - start[A1]
    imp = dA.abs() * trained[B1].norm(dim=0)[:, None]  # |dA| x the local B's column norms
    q = prune_ratio(pearson_kurtosis(imp))
    keep = imp >= torch.quantile(imp.double().reshape(-1), q).float()
    assert torch.equal(up[A1].dense() != 0, keep)
    assert payload_bytes(up) < 0.2 * 4 * sum(v.numel() for v in start.values()) * 2  # values + positions, < 20 %


def dense_round(start, trained, a, b, truncate, update_b):
    mean = sum(product(t, a, b) for t in trained) / len(trained)
    if truncate:
        u, s, vh = torch.linalg.svd(mean)
        mean = u[:, :2] @ torch.diag(s[:2]) @ vh[:2]
    change = mean - product(start, a, b)
    if update_b:
        return b, change @ torch.linalg.pinv(start[a].double())
    return a, torch.linalg.pinv(start[b].double()) @ change


@pytest.mark.parametrize("cls,truncate", [(FedSRD, True), (FedSRDe, False)])
def test_fedsrd_projects_the_averaged_product_change_on_one_factor_alternating(cls, truncate):
    gen = torch.Generator().manual_seed(7)
    start = adapter(gen)
    trained = trained_from(start, gen, 3, scale=0.5)
    s = cls(download_p=0.0, pinv_rtol=0.0)  # no download sparsity, no cut-off: the projected delta itself
    for round_idx, update_b in ((1, True), (2, False), (3, True)):
        res = s.run_round(start, trained, round_idx=round_idx)
        # what the server sees: each client's factors rebuilt from its pruned upload
        seen = [
            {k: start[k] + up[k].dense() for k in start}
            for up in (s.upload(start, t, Context(0, round_idx, c)) for c, t in enumerate(trained))
        ]
        for a, b in ((A1, B1), (A2, B2)):
            key, delta = dense_round(start, seen, a, b, truncate, update_b)
            other = a if key == b else b
            assert torch.allclose(res.adapter[key].double() - start[key].double(), delta, atol=1e-5), (round_idx, key)
            assert torch.equal(res.adapter[other], start[other])  # the other factor is not sent, not changed


def test_fedsrd_a_update_ignores_the_near_null_directions_of_b():
    """After one round from B = 0, B's spectrum spans 3 decades (measured on the reduced board); the exact
    pinv(B) turns a small change along B's weak directions into a huge A (0.04 -> 58 there). The cut-off
    updates A only along the singular directions of B above pinv_rtol of the largest."""
    gen = torch.Generator().manual_seed(9)
    d, r, m = 40, 4, 30
    u, _ = torch.linalg.qr(torch.randn(d, r, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(m, r, generator=gen, dtype=torch.float64))
    sigma = torch.tensor([1.0, 0.3, 1e-2, 1e-3], dtype=torch.float64)
    A = torch.randn(r, m, generator=gen, dtype=torch.float64) * 0.04
    B = u @ torch.diag(sigma) @ v[:r, :r].T  # r x r mixing keeps B's singular values
    start = {A1: A.float(), B1: B.float()}
    trained = [{A1: A.float(), B1: (B + 0.05 * torch.randn(d, r, generator=gen, dtype=torch.float64)).float()}]
    exact = FedSRDe(download_p=0.0, pinv_rtol=0.0).run_round(start, trained, round_idx=2).adapter[A1]
    cut = FedSRDe(download_p=0.0).run_round(start, trained, round_idx=2).adapter[A1]
    assert exact.abs().max() > 10 * A.abs().max()  # the reference's step: A blown up
    assert cut.abs().max() < 3 * A.abs().max()
    _, sb, vbh = torch.linalg.svd(start[B1].double(), full_matrices=False)
    keep = sb >= 0.1 * sb[0]  # the two strong directions: the exact step projected on their row space
    expect = vbh[keep].T @ vbh[keep] @ (exact.double() - A.float().double())
    assert keep.sum() == 2 and torch.allclose(cut.double() - A.float().double(), expect, atol=1e-5)


def test_fedsrd_updates_b_while_b_is_zero_and_sparsifies_the_download():
    gen = torch.Generator().manual_seed(8)
    start = adapter(gen, b_zero=True)  # PEFT's init: B = 0, so pinv(B) = 0 would lose an A update
    trained = trained_from(start, gen, 2)
    res = FedSRD(download_p=0.0).run_round(start, trained, round_idx=2)  # an "A" round
    assert not torch.equal(res.adapter[B1], start[B1]) and torch.equal(res.adapter[A1], start[A1])
    sparse = FedSRD(download_p=0.8).run_round(start, trained, round_idx=2, seed=0)
    full = res.adapter[B1] - start[B1]
    got = sparse.adapter[B1] - start[B1]
    nz = got != 0
    assert torch.allclose(got[nz], full[nz] / 0.2)  # kept entries rescaled by 1 / (1 - p)
    down = FedSRD(download_p=0.8).server_aggregate(
        start, [FedSRD().upload(start, t, Context(0, 2, c)) for c, t in enumerate(trained)], None, Context(0, 2)
    )
    assert sorted(down) == [B1, B2]  # no A sent
    kept = {k: down[k].values.numel() for k in (B1, B2)}  # about 20 % of the 18 entries
    assert 0 < sum(kept.values()) < 18
    assert torch.equal(sparse.adapter[B1], start[B1] + down[B1].dense())
    # fp32 values, positions as int32 indices or a bitmask (12 and 6 bits: 2 and 1 bytes), the cheaper
    assert sparse.download_bytes[0] == sum(4 * k + min(4 * k, n) for k, n in ((kept[B1], 2), (kept[B2], 1)))


def test_fedicu_consensus_and_aligned_divergence():
    start = {"x.lora_A.weight": torch.zeros(1, 4)}
    t1 = {"x.lora_A.weight": torch.tensor([[4.0, 0.1, 2.0, 0.0]])}
    t2 = {"x.lora_A.weight": torch.tensor([[2.0, 0.0, -0.1, 6.0]])}
    up = FedICU(keep=0.5).upload(start, t1, Context(0, 1, 0))
    assert torch.equal(up["x.lora_A.weight"].dense(), torch.tensor([[4.0, 0.0, 2.0, 0.0]]))  # top half by |delta|
    d1, d2 = torch.tensor([4.0, 0.0, 2.0, 0.0]), torch.tensor([2.0, 0.0, 0.0, 6.0])
    c = (d1 + d2) / 2
    plain = FedICU(keep=0.5, divergence_weight=0.0).run_round(start, [t1, t2])
    assert torch.allclose(plain.adapter["x.lora_A.weight"][0], c)
    a = [max(0.0, float(d @ c / (d.norm() * c.norm()))) for d in (d1, d2)]
    omega = [x / sum(a) for x in a]
    want = c + 0.5 * (omega[0] * (d1 - c) + omega[1] * (d2 - c))
    got = FedICU(keep=0.5, divergence_weight=0.5).run_round(start, [t1, t2])
    assert torch.allclose(got.adapter["x.lora_A.weight"][0], want.float(), atol=1e-6)


def test_fedprox_wraps_any_strategy():
    gen = torch.Generator().manual_seed(9)
    start = adapter(gen)
    trained = trained_from(start, gen, 2)
    prox = FedProx(mu=0.1, inner=FlexLoRA())
    assert prox.linear is False and prox.name == "fedprox+flexlora"
    a, b = prox.run_round(start, trained), FlexLoRA().run_round(start, trained)
    assert all(torch.equal(a.adapter[k], b.adapter[k]) for k in start)


def test_flexlora_with_per_client_ranks():
    gen = torch.Generator().manual_seed(10)
    start = adapter(gen)  # rank 2 adapters
    trained = trained_from(start, gen, 2, scale=1.0)
    trained[0] = {
        k: (
            v.clone().index_fill_(0, torch.tensor([1]), 0)
            if "lora_A" in k
            else v.clone().index_fill_(1, torch.tensor([1]), 0)
        )
        for k, v in trained[0].items()
    }  # rank 1
    res = FlexLoRA().run_round(start, trained, ranks=[1, None])
    assert res.upload_bytes == [4 * 1 * (11 + 7), 4 * 2 * (11 + 7)]  # r_i (m + d) values per module
    assert res.download_bytes == [4 * 1 * (11 + 7), 4 * 2 * (11 + 7)]
    for a, b in ((A1, B1), (A2, B2)):
        mean = (product(trained[0], a, b) + product(trained[1], a, b)) / 2
        u, s, vh = torch.linalg.svd(mean)
        assert torch.allclose(product(res.adapter, a, b), u[:, :2] @ torch.diag(s[:2]) @ vh[:2], atol=1e-5)
        # the rank-1 client keeps the first component: the best rank-1 approximation
        kept = res.adapter[b][:, :1].double() @ res.adapter[a][:1].double()
        assert torch.allclose(kept, s[0] * torch.outer(u[:, 0], vh[0]), atol=1e-5)
