"""PubSwap: federated GRPO with LoRA and public-response swapping. Pure algorithms, no Ray."""
