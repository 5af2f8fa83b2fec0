"""Shared set-up for the tests that run on a local Ray cluster."""

from __future__ import annotations

from pathlib import Path

from pubswap.config import RunConfig, load_config


def tiny_config(model_dir: Path, run_dir: Path, *overrides: str) -> RunConfig:
    """2 clients, 2 rounds of tau=4 with public steps at 2 and 4, on the tiny random model."""
    base = [
        f"model.path={model_dir}", "model.dtype=float32", "model.max_prompt_len=96", "model.max_response_len=6",
        "lora.r=8", "lora.alpha=16", "grpo.K=8", "grpo.b=4", "grpo.lr=1e-3",
        "federation.num_clients=2", "federation.rounds=2", "federation.tau=4", "federation.swap_period=2",
        "data.tasks=[chain_sum,basic_arithmetic]", "data.per_client=24", "data.public_size=12", "data.test_size=8",
        "rollout.backend=hf", "resources.cpus_per_client=0.5", f"run_dir={run_dir}",
    ]
    return load_config(None, base + list(overrides))


RAY_ENV = {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": "1"}}
