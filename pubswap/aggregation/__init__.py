"""Aggregation strategies: one module each behind `AggregationStrategy`.

    strategy = make_strategy(cfg.federation)
    global_adapter = strategy.aggregate(client_adapters, weights)
    loss = loss + strategy.client_penalty(params, global_adapter)   # FedProx; zero for FedIT
"""

from pubswap.aggregation.base import AggregationStrategy, normalized_weights
from pubswap.aggregation.fedit import FedIT
from pubswap.aggregation.fedprox import FedProx

STRATEGIES: dict[str, type[AggregationStrategy]] = {"fedit": FedIT, "fedprox": FedProx}


def make_strategy(federation) -> AggregationStrategy:
    """The strategy a FederationConfig asks for (fedprox-grpo = FedIT averaging + the proximal term)."""
    if federation.uses_prox:
        return FedProx(mu=federation.fedprox_mu)
    try:
        return STRATEGIES[federation.aggregation]()
    except KeyError:
        raise ValueError(f"unknown aggregation {federation.aggregation!r}; known: {sorted(STRATEGIES)}") from None


__all__ = ["AggregationStrategy", "FedIT", "FedProx", "STRATEGIES", "make_strategy", "normalized_weights"]
