"""The paper's models with their hyperparameters (Tables 9-12), as config overrides.

Shared by all four (and equal to RunConfig's defaults): 4 clients, K=8 responses per prompt, 2 gradient
epochs, AdamW lr 1e-5 / weight decay 0.01, clip 0.2 / 0.25, KL 1e-4, entropy 0, temperature 0.7 for
rollouts and validation, LoRA r=32 / alpha=64, FedIT, prompts up to 1024 and responses up to 2048 tokens,
vLLM rollouts. Chat templates come with each model's tokenizer (applied by the client actor).
"""

from __future__ import annotations

from dataclasses import dataclass

LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class ModelPreset:
    name: str
    hub_id: str
    table: int  # the paper's configuration table
    b: int = 8  # prompts per step ("train batch size")
    target_modules: tuple[str, ...] = ("all-linear",)
    step_s_h100: float = 45.0  # ASSUMED seconds per GRPO step per client on one H100 (not measured here)

    def overrides(self) -> dict:
        return {
            "model": {"path": self.hub_id, "dtype": "bfloat16", "max_prompt_len": 1024, "max_response_len": 2048},
            "lora": {"r": 32, "alpha": 64, "target_modules": list(self.target_modules)},
            "grpo": {
                "K": 8,
                "b": self.b,
                "grad_epochs": 2,
                "lr": 1e-5,
                "weight_decay": 0.01,
                "clip_low": 0.2,
                "clip_high": 0.25,
                "kl_coef": 1e-4,
                "entropy_coef": 0.0,
                "temperature": 0.7,
                "val_temperature": 0.7,
            },
            "rollout": {"backend": "vllm"},
        }


MODELS = {
    p.name: p
    for p in [
        ModelPreset("qwen3-1.7b", "Qwen/Qwen3-1.7B", table=9),
        ModelPreset("qwen2.5-math-1.5b", "Qwen/Qwen2.5-Math-1.5B", table=10),
        ModelPreset("qwen3-4b-instruct", "Qwen/Qwen3-4B-Instruct-2507", table=11, b=4, step_s_h100=75.0),
        ModelPreset(
            "llama3.2-3b-instruct",
            "meta-llama/Llama-3.2-3B-Instruct",
            table=12,
            target_modules=tuple(LLAMA_TARGETS),
            step_s_h100=75.0,
        ),
    ]
}

# data sections per dataset: the paper's split sizes (appendix B.1) and reward
DATASETS = {
    "math": {"source": "math", "per_client": 2500, "public_size": 1250, "test_size": 1250, "reward": "math"},
    "deepmath": {
        "source": "deepmath",
        "subsample": 20000,
        "per_client": 4000,
        "public_size": 3000,
        "test_size": 1000,
        "reward": "math",
    },
    "medical": {"source": "medical", "per_client": 3956, "public_size": 1977, "test_size": 1977, "reward": "choice"},
}
