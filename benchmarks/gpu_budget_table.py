"""What one client actor needs on a GPU at the paper's settings, per model (estimates, no GPU needed).

    python benchmarks/gpu_budget_table.py [--card-gib 80] [--micro-batch-tokens 16384]

Shapes are counted on the meta device from configs/models/*.json; the needs are pubswap/learner/gpu_budget.py's
estimates for one logical client per actor, b x K x (1024 + 2048) tokens, bf16 base, LoRA r=32 fp32,
gradient checkpointing on. Prints the trainer's and the engine's minimum, and whether the default split
(rollout.gpu_memory_utilization=0.5) fits one actor per card and two per card.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODELS = [
    ("qwen3-1.7b", "qwen3-1.7b.json", ["all-linear"], 8),
    ("qwen2.5-math-1.5b", "qwen2.5-math-1.5b.json", ["all-linear"], 8),
    ("qwen3-4b-instruct", "qwen3-4b-instruct-2507.json", ["all-linear"], 4),
    (
        "llama3.2-3b-instruct",
        "llama-3.2-3b-instruct.json",
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        8,
    ),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--card-gib", type=float, default=80.0)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--logprob-chunk", type=int, default=1024)
    args = ap.parse_args()

    from pubswap.learner.gpu_budget import GIB, GpuBudgetError, engine_need, model_shape, split_gpu, trainer_need

    print(
        f"| model | params | LoRA params (MiB fp32) | trainer GiB (weights / LoRA+AdamW / activations / logits / "
        f"CUDA) | engine min GiB | 1 actor per {args.card_gib:g} GiB card | 2 actors per card |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, cfg, targets, _b in MODELS:
        shape = model_shape(str(REPO / "configs" / "models" / cfg), 32, 64, targets)
        t = trainer_need(shape, "bfloat16", 1, args.micro_batch_tokens, args.logprob_chunk, True)
        e = engine_need(shape, "bfloat16", 3072, 1, 32, 32)
        fits = []
        for share in (1.0, 0.5):
            try:
                b = split_gpu(int(args.card_gib * GIB), share, 0.5, t, e)
                fits.append(f"yes ({b.kv_cache_bytes / GIB:.0f} GiB extra KV)")
            except GpuBudgetError:
                fits.append("no")
        parts = " / ".join(f"{v / GIB:.1f}" for v in t.values())
        print(
            f"| {name} | {shape.params / 1e9:.2f}B "
            f"| {shape.lora_params / 1e6:.1f}M ({shape.lora_params * 4 / 2**20:.0f}) "
            f"| {sum(t.values()) / GIB:.1f} ({parts}) | {sum(e.values()) / GIB:.1f} | {fits[0]} | {fits[1]} |"
        )


if __name__ == "__main__":
    main()
