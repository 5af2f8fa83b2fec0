"""FFA-LoRA (Sun et al., ICLR 2024): A frozen at its initialisation, only B trained, sent and averaged.

Every client starts from the same seeded A (the trainer's PEFT init under the run seed), never updates
it and never sends it, so all clients share A and the mean of the products is the product of the
means: sum_i w_i B_i A = (sum_i w_i B_i) A. Aggregation is therefore exact, and linear (an allreduce of
the B tensors). Each direction carries d r values per adapted module (d x m weight) instead of r (m + d).
"""

from __future__ import annotations

from pubswap.algorithms.aggregation.base import AggregationStrategy


class FFALoRA(AggregationStrategy):
    name = "ffa-lora"
    linear = True

    def trains(self, key: str) -> bool:
        return "lora_A" not in key
