"""FedIT (Zhang et al., 2024): average the LoRA factors A and B separately (paper eq. 3.3).

    B = sum_n w_n B_n,   A = sum_n w_n A_n,   w uniform (paper) or proportional to client sample counts.

Note this is not the average of the products B_n A_n; that mismatch is what FlexLoRA / FedSRD address.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from pubswap.aggregation.base import AggregationStrategy, normalized_weights
from pubswap.lora import Adapter


class FedIT(AggregationStrategy):
    name = "fedit"
    linear = True

    def aggregate(self, adapters: Sequence[Mapping[str, Tensor]], weights: Sequence[float] | None = None) -> Adapter:
        keys = self._check_same_keys(adapters)
        w = normalized_weights(weights, len(adapters))
        out: Adapter = {}
        for k in keys:
            acc = torch.zeros_like(adapters[0][k], dtype=torch.float32)
            for wi, a in zip(w, adapters):
                acc += wi * a[k].float()
            out[k] = acc.to(adapters[0][k].dtype)
        return out
