"""One client's learner: the GRPO trainer on LoRA adapters or every weight, its micro-batching and
log-probs, the models it loads, and what it needs on a GPU."""
