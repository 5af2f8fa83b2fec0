"""Peak memory and time of one GRPO step on a narrow random model with a real-size vocabulary.

    python benchmarks/trainer_memory.py --seqs 8 --prompt-len 1024 --response-len 2048 --vocab 151936

The model is narrow (hidden 64, 2 layers by default) so that what is measured is the step's own
memory: the logits over a 151,936-token vocabulary, which at full batch would be [seqs, 3071, 151936]
fp32 (14.9 GB for 8 sequences) per copy. The last line is `peak_rss_gib=X step_s=Y` (peak resident
memory of this process, including Python and torch, ~0.4 GiB).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--response-len", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--r", type=int, default=8)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--logprob-chunk", type=int, default=1024)
    ap.add_argument("--grad-epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pubswap.config import GRPOConfig, LoraConfig
    from pubswap.learner.trainer import GRPOTrainer, Sample

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=args.hidden // 2,
        max_position_embeddings=args.prompt_len + args.response_len,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    grpo = GRPOConfig(
        micro_batch_tokens=args.micro_batch_tokens,
        logprob_chunk=args.logprob_chunk,
        grad_epochs=args.grad_epochs,
        gradient_checkpointing=False,
    )
    trainer = GRPOTrainer(model, LoraConfig(r=args.r, alpha=2 * args.r), grpo, device="cpu")
    g = torch.Generator().manual_seed(1)
    samples = [
        Sample(
            tuple(torch.randint(0, args.vocab, (args.prompt_len,), generator=g).tolist()),
            tuple(torch.randint(0, args.vocab, (args.response_len,), generator=g).tolist()),
            advantage=1.0 if i % 2 else -1.0,
        )
        for i in range(args.seqs)
    ]
    base_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t = time.perf_counter()
    metrics = trainer.step(samples)
    step_s = time.perf_counter() - t
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    tokens = args.seqs * (args.prompt_len + args.response_len)
    print(
        f"seqs={args.seqs} tokens/seq={args.prompt_len + args.response_len} vocab={args.vocab} "
        f"hidden={args.hidden} layers={args.layers} micro_batches={metrics['micro_batches']} "
        f"micro_batch_tokens={args.micro_batch_tokens} logprob_chunk={args.logprob_chunk}"
    )
    print(
        f"rss before step {base_gib:.2f} GiB; {tokens * args.grad_epochs / step_s:.0f} trained tokens/s; "
        f"loss {metrics['loss']:.4f}"
    )
    print(f"peak_rss_gib={peak_gib:.2f} step_s={step_s:.1f}")


if __name__ == "__main__":
    main()
