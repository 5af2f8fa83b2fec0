"""Pins the PubSwap rules of paper 3.4 with exact small cases."""

import numpy as np
import pytest

from pubswap.algorithms.swap import Response, balanced_group, balanced_swap, random_swap, swap


def R(origin, correct, tag=""):
    return Response(text=f"c{origin}-{tag}", reward=float(correct), correct=bool(correct), origin=origin)


def make_pool(correct_counts, K=8, n_prompts=1):
    """pool[n][p] with client n having correct_counts[n] correct responses (first ones) per prompt."""
    return [
        [[R(n, k < c, f"p{p}k{k}") for k in range(K)] for p in range(n_prompts)] for n, c in enumerate(correct_counts)
    ]


def n_correct(group):
    return sum(r.correct for r in group)


def test_balanced_k8_c3_replaces_exactly_one_incorrect_with_donor_correct():
    pool = make_pool([3, 8])
    groups, stats = balanced_swap(pool, seed=0, round_idx=0, step=2)
    g = groups[0][0]
    assert len(g) == 8
    foreign = [r for r in g if r.origin != 0]
    assert len(foreign) == 1 and foreign[0].correct and foreign[0].origin == 1
    # own correct responses are all kept; exactly one own incorrect one is gone
    own = [r for r in g if r.origin == 0]
    assert n_correct(own) == 3 and len(own) == 7
    assert n_correct(g) == 4
    assert stats.swapped_in == [1, 0]
    # client 1 had 8/8 correct -> keeps its own
    assert groups[1][0] == pool[1][0]


def test_balanced_exactly_half_keeps_own():
    pool = make_pool([4, 8])
    groups, stats = balanced_swap(pool, 0, 0, 2)
    assert groups[0][0] == pool[0][0]
    assert stats.swapped_in == [0, 0]


def test_balanced_zero_correct_gets_k_over_2_donors_from_others_only():
    pool = make_pool([0, 8, 8])
    groups, stats = balanced_swap(pool, 0, 0, 2)
    g = groups[0][0]
    assert n_correct(g) == 4
    assert all(r.origin in (1, 2) for r in g if r.correct)
    assert sum(r.origin == 0 for r in g) == 4
    assert stats.swapped_in[0] == 4


def test_balanced_fewer_donors_means_fewer_replacements():
    pool = make_pool([1, 2])  # client 0 wants 3, only 2 donors exist; client 1 wants 2, 1 donor exists
    groups, stats = balanced_swap(pool, 0, 0, 2)
    assert n_correct(groups[0][0]) == 3 and stats.swapped_in[0] == 2 and stats.missing_donors[0] == 1
    assert n_correct(groups[1][0]) == 3 and stats.swapped_in[1] == 1 and stats.missing_donors[1] == 1


def test_balanced_never_takes_own_responses_as_donors():
    # client 0 has 0 correct and nobody else has any: nothing to swap even though the pool is large
    pool = make_pool([0, 0, 0, 0])
    groups, stats = balanced_swap(pool, 0, 0, 2)
    for n in range(4):
        assert groups[n][0] == pool[n][0]
    assert stats.swapped_in == [0, 0, 0, 0]
    assert stats.missing_donors == [4, 4, 4, 4]


def test_balanced_all_correct_everywhere_is_identity():
    pool = make_pool([8, 8, 8], n_prompts=3)
    groups, stats = balanced_swap(pool, 0, 0, 2)
    assert groups == [[list(g) for g in c] for c in pool]
    assert stats.swapped_in == [0, 0, 0]


def test_balanced_single_client_cannot_swap():
    pool = make_pool([1])
    groups, stats = balanced_swap(pool, 0, 0, 2)
    assert groups[0][0] == pool[0][0] and stats.swapped_in == [0] and stats.missing_donors == [3]


def test_balanced_odd_k_targets_floor_half():
    pool = make_pool([1, 7], K=7)
    groups, _ = balanced_swap(pool, 0, 0, 2)
    assert n_correct(groups[0][0]) == 3  # floor(7/2)
    pool = make_pool([3, 7], K=7)  # 3 < 3.5 but floor(K/2) - 3 = 0: nothing to replace
    groups, stats = balanced_swap(pool, 0, 0, 2)
    assert groups[0][0] == pool[0][0] and stats.swapped_in[0] == 0


def test_balanced_replaces_only_incorrect_slots_and_preserves_positions():
    own = [R(0, k in (1, 5), f"k{k}") for k in range(8)]
    donors = [R(1, True, f"d{i}") for i in range(8)]
    group, n_swap, _ = balanced_group(own, donors, np.random.default_rng(0))
    assert n_swap == 2
    assert group[1] is own[1] and group[5] is own[5]
    changed = [i for i in range(8) if group[i] is not own[i]]
    assert len(changed) == 2 and all(not own[i].correct for i in changed)
    assert len({id(group[i]) for i in changed}) == 2  # donors drawn without replacement


def test_balanced_counts_invariant_random_pools():
    gen = np.random.default_rng(123)
    for trial in range(50):
        N, K, P = int(gen.integers(1, 6)), int(gen.integers(2, 10)), int(gen.integers(1, 4))
        pool = [
            [[R(n, bool(gen.random() < 0.3), f"{trial}-{p}-{k}") for k in range(K)] for p in range(P)] for n in range(N)
        ]
        groups, stats = balanced_swap(pool, seed=trial, round_idx=1, step=2)
        for n in range(N):
            swapped = 0
            for p in range(P):
                g, own = groups[n][p], pool[n][p]
                c = n_correct(own)
                donors = sum(r.correct for m in range(N) if m != n for r in pool[m][p])
                assert len(g) == K
                expected_swaps = 0 if c >= K / 2 else min(K // 2 - c, donors)
                foreign = [r for r in g if r.origin != n]
                assert len(foreign) == expected_swaps and all(r.correct for r in foreign)
                assert n_correct(g) == c + expected_swaps
                swapped += expected_swaps
            assert stats.swapped_in[n] == swapped


def test_balanced_is_seeded_by_round_and_step():
    pool = make_pool([0, 3, 3, 3], n_prompts=2)
    a, _ = balanced_swap(pool, seed=7, round_idx=1, step=2)
    b, _ = balanced_swap(pool, seed=7, round_idx=1, step=2)
    assert a == b
    others = [balanced_swap(pool, seed=7, round_idx=1, step=s)[0] for s in (4, 6, 8, 10)]
    assert any(o != a for o in others)


def test_random_draws_k_from_pool_and_gives_everyone_the_same_set():
    pool = make_pool([0, 2, 5, 8], n_prompts=3)
    groups, stats = random_swap(pool, seed=1, round_idx=0, step=2)
    for p in range(3):
        everyone = [r for n in range(4) for r in pool[n][p]]
        g = groups[0][p]
        assert len(g) == 8 and len(set(g)) == 8  # without replacement
        assert all(r in everyone for r in g)
        for n in range(1, 4):
            assert groups[n][p] == g
    assert stats.swapped_in == [sum(r.origin != n for p in range(3) for r in groups[0][p]) for n in range(4)]


def test_random_is_uniform_over_the_pool():
    pool = make_pool([0, 0], K=4)
    counts = {}
    for step in range(2000):
        groups, _ = random_swap(pool, seed=0, round_idx=0, step=step)
        for r in groups[0][0]:
            counts[r.text] = counts.get(r.text, 0) + 1
    assert len(counts) == 8
    # each of 8 responses appears with probability 4/8 per draw: 1000 expected, sd ~22
    assert all(880 < c < 1120 for c in counts.values()), counts


def test_random_single_client_returns_a_permutation_of_own():
    pool = make_pool([3])
    groups, stats = random_swap(pool, 0, 0, 2)
    assert sorted(r.text for r in groups[0][0]) == sorted(r.text for r in pool[0][0])
    assert stats.swapped_in == [0]


def test_pool_shape_and_origin_are_checked():
    pool = make_pool([1, 1])
    pool[1][0] = pool[1][0][:5]
    with pytest.raises(ValueError, match="expected K=8"):
        balanced_swap(pool, 0, 0, 2)
    bad = make_pool([1, 1])
    bad[0][0][0] = R(1, False)
    with pytest.raises(ValueError, match="origin=0"):
        random_swap(bad, 0, 0, 2)
    with pytest.raises(ValueError, match="unknown swap rule"):
        swap("greedy", make_pool([1]), 0, 0, 2)


def test_participants_pool_is_keyed_by_client_ids():
    """Partial participation: pool[j] belongs to client_ids[j]; donors and seeds follow the ids."""
    from pubswap.seeding import rng as seeded

    def group(cid, correct):
        return [Response(f"{cid}-{k}", float(k < correct), k < correct, cid) for k in range(8)]

    pool = [[group(3, 0)], [group(7, 8)]]
    groups, stats = swap("balanced", pool, seed=1, round_idx=2, step=4, client_ids=[3, 7])
    assert stats.swapped_in == [4, 0]
    assert sorted(r.origin for r in groups[0][0]) == [3] * 4 + [7] * 4
    # the draw is seeded by the client id (3), not by its position (0) in the pool
    alone, _, _ = balanced_group(pool[0][0], pool[1][0], seeded(1, "balanced", 2, 4, 3, 0))
    assert groups[0][0] == alone
    with pytest.raises(ValueError, match="origin=7"):
        swap("balanced", [[group(3, 0)], [group(8, 8)]], 1, 2, 4, client_ids=[3, 7])
    with pytest.raises(ValueError, match="once each"):
        swap("random", pool, 1, 2, 4, client_ids=[3, 3])
