"""Who trains in a round (seeded partial participation) and which actor hosts which client."""

import pytest

from placement import assign_clients
from pubswap.algorithms.participation import participants
from pubswap.config import ConfigError, load_config


def test_participants_are_seeded_by_seed_and_round_only():
    picks = participants(seed=0, round_idx=3, num_clients=32, count=8)
    assert picks == participants(0, 3, 32, 8)
    assert len(picks) == 8 and picks == sorted(set(picks)) and all(0 <= c < 32 for c in picks)
    assert participants(0, 4, 32, 8) != picks and participants(1, 3, 32, 8) != picks
    assert participants(0, 3, 5, 5) == [0, 1, 2, 3, 4] == participants(0, 3, 5, 9)
    with pytest.raises(ValueError):
        participants(0, 1, 4, 0)


def test_participation_is_uniform_over_clients():
    counts = [0] * 10
    for r in range(2000):
        for c in participants(7, r, 10, 3):
            counts[c] += 1
    assert all(540 <= n <= 660 for n in counts), counts  # expected 600 each


def test_clients_in_round_from_fraction_or_count(tmp_path):
    def cfg(*o):
        return load_config(None, [f"model.path={tmp_path}", "federation.num_clients=10", *o]).federation

    assert cfg().clients_in_round() == 10
    assert cfg("federation.participation=0.25").clients_in_round() == 2
    assert cfg("federation.participation=0.01").clients_in_round() == 1
    assert cfg("federation.participation=0.25", "federation.clients_per_round=7").clients_in_round() == 7
    with pytest.raises(ConfigError, match="federation.participation"):
        cfg("federation.participation=0")
    with pytest.raises(ConfigError, match="resources.num_actors"):
        cfg("resources.num_actors=11")


@pytest.mark.parametrize(
    "clients,actors,sizes",
    [(16, 4, [4, 4, 4, 4]), (10, 4, [3, 3, 2, 2]), (5, 0, [1] * 5), (3, 8, [1, 1, 1]), (7, 1, [7])],
)
def test_assign_clients_in_balanced_contiguous_blocks(clients, actors, sizes):
    blocks = assign_clients(clients, actors)
    assert [len(b) for b in blocks] == sizes
    assert [c for b in blocks for c in b] == list(range(clients))
