"""Limits of the vLLM engine that the config and the GPU budget must respect (no vLLM import here)."""

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_max_lora_rank(r: int) -> int:
    """The smallest rank vLLM accepts as max_lora_rank that holds an adapter of rank r."""
    for rank in VLLM_LORA_RANKS:
        if rank >= r:
            return rank
    raise ValueError(f"LoRA rank {r} exceeds vLLM's maximum {VLLM_LORA_RANKS[-1]}")
