"""FedIT (Zhang et al., 2024): average the LoRA factors A and B separately (paper eq. 3.3).

    B = sum_n w_n B_n,   A = sum_n w_n A_n,   w uniform (paper) or proportional to client sample counts.

Note this is not the average of the products B_n A_n; that mismatch is what FlexLoRA / FedSRD address.
Each client sends its dense A and B up and receives the averaged ones: r (m + d) values per adapted
module (d x m weight) in each direction. Linear: it runs as an allreduce among the client actors.
"""

from __future__ import annotations

from pubswap.algorithms.aggregation.base import AggregationStrategy


class FedIT(AggregationStrategy):
    name = "fedit"
    linear = True
