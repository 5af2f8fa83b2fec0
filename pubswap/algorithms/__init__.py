"""The federated and decentralized algorithms: GRPO's objective, PubSwap's swap, participation,
aggregation strategies, communication graphs and gossip, evaluation. Pure functions on tensors and
rows; no Ray, no files."""
