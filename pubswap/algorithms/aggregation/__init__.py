"""Aggregation strategies: one module each behind `AggregationStrategy` (base.py explains the round).

strategy = make_strategy(cfg.federation)          # federation.aggregation (+ aggregation_kwargs)
result = strategy.run_round(start, trained, weights, seed, round_idx)   # or split across actors
loss = loss + strategy.client_penalty(params, global_adapter)           # FedProx; zero otherwise
"""

import inspect

from pubswap.algorithms.aggregation.base import AggregationStrategy, Context, RoundResult, normalized_weights
from pubswap.algorithms.aggregation.fed_dare import FedDARE
from pubswap.algorithms.aggregation.fedicu import FedICU
from pubswap.algorithms.aggregation.fedit import FedIT
from pubswap.algorithms.aggregation.fedprox import FedProx
from pubswap.algorithms.aggregation.fedsrd import FedSRD, FedSRDe
from pubswap.algorithms.aggregation.ffa_lora import FFALoRA
from pubswap.algorithms.aggregation.flexlora import FlexLoRA
from pubswap.algorithms.aggregation.payload import Sparse, payload_bytes

STRATEGIES: dict[str, type[AggregationStrategy]] = {
    s.name: s for s in (FedIT, FFALoRA, FlexLoRA, FedDARE, FedSRD, FedSRDe, FedICU)
}


def strategy_params(name: str) -> list[str]:
    """The keyword arguments `federation.aggregation_kwargs` may set for strategy `name`."""
    return [
        p
        for p in inspect.signature(STRATEGIES[name].__init__).parameters
        if p != "self"
        and inspect.signature(STRATEGIES[name].__init__).parameters[p].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
    ]


def make_strategy(federation) -> AggregationStrategy:
    """The strategy a FederationConfig asks for; fedprox-grpo adds the proximal term to it."""
    try:
        cls = STRATEGIES[federation.aggregation]
    except KeyError:
        raise ValueError(f"unknown aggregation {federation.aggregation!r}; known: {sorted(STRATEGIES)}") from None
    strategy = cls(**dict(getattr(federation, "aggregation_kwargs", None) or {}))
    return FedProx(mu=federation.fedprox_mu, inner=strategy) if federation.uses_prox else strategy


__all__ = [
    "AggregationStrategy",
    "Context",
    "FFALoRA",
    "FedDARE",
    "FedICU",
    "FedIT",
    "FedProx",
    "FedSRD",
    "FedSRDe",
    "FlexLoRA",
    "RoundResult",
    "STRATEGIES",
    "Sparse",
    "make_strategy",
    "normalized_weights",
    "payload_bytes",
    "strategy_params",
]
