"""Private prompts are drawn in shuffled epochs without replacement, per client, seeded and stateless."""

import pytest

from pubswap.config import FederationConfig
from pubswap.data.order import private_batch, private_steps_before


def seen(federation: FederationConfig, seed: int, client: int, n_rows: int, b: int, rounds: int) -> list[int]:
    """Every private row index `client` trains on, in order, over `rounds` rounds of the schedule."""
    from pubswap.algorithms.participation import participants

    out = []
    for r in range(1, rounds + 1):
        if client not in participants(seed, r, federation.num_clients, federation.clients_in_round()):
            continue
        for s in range(1, federation.tau + 1):
            if not federation.is_public_step(s):
                out += private_batch(seed, client, n_rows, b, private_steps_before(federation, seed, client, r, s))
    return out


@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_a_client_sees_every_private_prompt_once_before_any_repeats(participation):
    f = FederationConfig(method="pubswap-balanced", num_clients=4, tau=5, swap_period=2, participation=participation)
    n_rows, b = 23, 4  # batches straddle epoch boundaries
    order = seen(f, seed=7, client=2, n_rows=n_rows, b=b, rounds=12)
    assert len(order) >= 3 * n_rows
    for epoch in range(len(order) // n_rows):
        assert sorted(order[epoch * n_rows : (epoch + 1) * n_rows]) == list(range(n_rows))  # each row once per epoch
    assert order[:n_rows] != order[n_rows : 2 * n_rows]  # a fresh shuffle each epoch
    assert seen(f, 7, 3, n_rows, b, 12)[:n_rows] != order[:n_rows]  # and per client


def test_batches_follow_the_schedule_and_are_reproducible():
    f = FederationConfig(method="pubswap-balanced", num_clients=2, tau=4, swap_period=2)
    # steps 1 and 3 are private: round 1 uses batches 0 and 1, round 2 batches 2 and 3
    assert [private_steps_before(f, 0, 0, r, s) for r, s in [(1, 1), (1, 3), (2, 1), (2, 3)]] == [0, 1, 2, 3]
    assert private_batch(5, 1, 10, 3, 4) == private_batch(5, 1, 10, 3, 4)  # a redone or resumed step: same rows
    f.clients_per_round = 1  # a round a client sits out does not advance its position
    from pubswap.algorithms.participation import participants

    took_part = [0 in participants(0, r, 2, 1) for r in range(1, 9)]
    assert 0 < sum(took_part) < 8
    want = [2 * sum(took_part[: r - 1]) for r in range(1, 9)]
    assert [private_steps_before(f, 0, 0, r, 1) for r in range(1, 9)] == want


def test_rows_fewer_than_a_batch_wrap_into_the_next_epoch():
    batch = private_batch(0, 0, 3, 7, 0)
    assert len(batch) == 7 and sorted(batch[:3]) == [0, 1, 2] and sorted(batch[3:6]) == [0, 1, 2]
