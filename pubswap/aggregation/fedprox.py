"""FedProx (Li et al., 2020): FedIT averaging plus a proximal term in every client's local loss.

    local loss = GRPO loss + (mu / 2) * ||theta - theta_global||^2

over the LoRA tensors, theta_global being the round-start global adapter. The norm is SQUARED (paper
appendix; Li et al. eq. 2); some implementations write it unsquared, which changes the gradient
from mu * (theta - theta_global) to mu * (theta - theta_global) / ||theta - theta_global||.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from pubswap.aggregation.fedit import FedIT


class FedProx(FedIT):
    name = "fedprox"

    def __init__(self, mu: float = 0.01):
        if mu < 0:
            raise ValueError(f"mu must be >= 0, got {mu}")
        self.mu = float(mu)

    def client_penalty(self, params: Mapping[str, Tensor], global_adapter: Mapping[str, Tensor]) -> Tensor:
        if set(params) != set(global_adapter):
            raise ValueError("params and global adapter have different keys")
        total = sum(((params[k] - global_adapter[k].to(params[k].device, params[k].dtype)) ** 2).sum()
                    for k in sorted(params))
        return 0.5 * self.mu * total
