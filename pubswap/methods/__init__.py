"""The methods, one module per family behind pubswap/methods/base.py's interface, registered by name:

    federated.py    fedavg-grpo, fedprox-grpo, pubswap-balanced, pubswap-random
    gossip.py       dsgd-lora, chocosgd-lora, dsgd, chocosgd
    seedflood.py    seedflood
    centralized.py  centralized, centralized-full (the normalized-performance reference)

A new method is one module with its class added to FAMILIES, and its test.
"""

from __future__ import annotations

from pubswap.methods.base import Method, RoundContext, eval_record
from pubswap.methods.centralized import Centralized
from pubswap.methods.federated import Federated
from pubswap.methods.gossip import Gossip
from pubswap.methods.seedflood import SeedFlood

FAMILIES: tuple[type[Method], ...] = (Federated, Gossip, SeedFlood, Centralized)
METHODS: dict[str, type[Method]] = {name: family for family in FAMILIES for name in family.names}


def method_of(name: str) -> Method:
    """The method configured as federation.method = `name`."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known: {list(METHODS)}")
    return METHODS[name](name)


__all__ = ["FAMILIES", "METHODS", "Method", "RoundContext", "eval_record", "method_of"]
