"""Each method family is one module behind one interface (pubswap/methods/); the config asks it what the
method is and what it needs. The rounds themselves run in the Ray tests (test_round_protocol.py,
test_decentralized_ray.py, test_full_parameter_ray.py, test_centralized.py), bitwise against references."""

import typing

import pytest

from pubswap.config import ConfigError, MethodName, RunConfig, load_config
from pubswap.methods import FAMILIES, METHODS, method_of


def test_every_configurable_method_has_exactly_one_family():
    assert set(typing.get_args(MethodName)) == set(METHODS)
    names = [n for family in FAMILIES for n in family.names]
    assert len(names) == len(set(names))
    with pytest.raises(ValueError, match="unknown method 'fedsgd'"):
        method_of("fedsgd")


@pytest.mark.parametrize(
    "name, decentralized, full, swap, gossip",
    [
        ("fedavg-grpo", False, False, None, None),
        ("pubswap-random", False, False, "random", None),
        ("dsgd-lora", True, False, None, "dsgd"),
        ("chocosgd", True, True, None, "choco"),
        ("seedflood", True, True, None, "seedflood"),
        ("centralized-full", False, True, None, None),
    ],
)
def test_what_a_method_is(name, decentralized, full, swap, gossip):
    m = method_of(name)
    assert (m.decentralized, m.full_parameter, m.swap_rule, m.gossip_rule) == (decentralized, full, swap, gossip)
    assert m.checkpoints_in_round == (not decentralized)
    f = RunConfig().federation.model_copy(update={"method": name, "tau": 6, "swap_period": 3})
    assert [s for s in range(1, 7) if f.is_public_step(s)] == ([3, 6] if swap else [])


def test_a_method_states_its_own_requirements(tmp_path):
    base = [f"model.path={tmp_path}", "federation.tau=4"]
    with pytest.raises(ConfigError, match="^federation.swap_period: must be < federation.tau"):
        load_config(None, [*base, "federation.method=pubswap-balanced", "federation.swap_period=4"])
    # the same swap period is fine for a method without public steps
    assert load_config(None, [*base, "federation.method=fedavg-grpo", "federation.swap_period=4"])
    with pytest.raises(ConfigError, match="^federation.participation: decentralized"):
        load_config(None, [*base, "federation.method=chocosgd-lora", "federation.participation=0.5"])
    with pytest.raises(ConfigError, match="^rollout.backend: federation.method seedflood trains every weight"):
        load_config(None, [*base, "federation.method=seedflood"])
    assert load_config(None, [*base, "federation.method=seedflood", "rollout.backend=hf"]).federation.full_parameter
