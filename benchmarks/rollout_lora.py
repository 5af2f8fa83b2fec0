"""Decoding speed with a live LoRA adapter, as a ratio to the base model, on the same engine settings.

    python benchmarks/rollout_lora.py                      # SmolLM2-135M fp32, r=8, 32 seqs x 64 tokens
    python benchmarks/rollout_lora.py --dtype bfloat16 --r 32

Three vLLM engines, one after another in this process (one at a time: 2 cores), same prompts and seeds:
  base    the plain model (no LoRA support compiled in), no adapter;
  lora    vLLM's LoRA path (enable_lora, the adapter as a LoRARequest);
  merged  the adapter merged into the weights (actors/merged_lora.py; rollout.lora_mode=merged).
The base model is measured first and again last (their spread is the measurement's noise). The
adapter is random (B != 0, so it changes the outputs). Each engine generates once to warm up,
then --reps times; tokens/s is generated tokens over the median wall time. The merged engine's
time per adapter switch (weight rebuild) is measured separately. Correctness: the adapter's per-token
log-probs of one fixed sequence under the lora and merged engines and the PEFT trainer are printed
side by side (max abs difference).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--r", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=4, help="sequences per prompt")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    import torch

    from actors.rollout import VLLMEngine
    from pubswap.config import GRPOConfig, LoraConfig
    from pubswap.learner.trainer import GRPOTrainer, Sample
    from pubswap.lora import save_adapter
    from pubswap.models import resolve_model

    model_dir = resolve_model(args.model, Path("runs/_models").resolve())
    lora = LoraConfig(r=args.r, alpha=2 * args.r)
    trainer = GRPOTrainer.load(model_dir, lora, GRPOConfig(), dtype="float32", seed=0)
    gen = torch.Generator().manual_seed(0)
    adapter = {k: (torch.randn(v.shape, generator=gen) * 0.02) for k, v in trainer.adapter().items()}
    trainer.set_adapter(adapter)
    folder = save_adapter(
        Path("runs/_bench_adapter").resolve(),
        {k: v.to(getattr(torch, args.dtype)) for k, v in adapter.items()},
        trainer.lora_config,
    )
    tok = trainer.tokenizer
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": f"Count from {i} to {i + 40}, one number per line."}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for i in range(args.prompts)
    ]
    prompts = [list(p["input_ids"] if isinstance(p, dict) else p) for p in prompts]
    check = prompts[0] + tok.encode(" 1\n2\n3\n4\n5 and then some words to score", add_special_tokens=False)
    seqs = args.prompts * args.n
    print(
        f"model {args.model} {args.dtype}, LoRA r={args.r}, {seqs} sequences x {args.tokens} tokens, "
        f"median of {args.reps}, torch threads {torch.get_num_threads()}",
        flush=True,
    )

    results, logprobs = {}, {}
    for name in ("base", "lora", "merged", "base again"):  # the base model first and last: drift shows
        engine = VLLMEngine(
            model_dir,
            args.r,
            512,
            args.dtype,
            0,
            max_num_seqs=seqs,
            merged=name != "lora",
            lora_scale=lora.alpha / lora.r,
        )
        engine.set_adapter(None if name.startswith("base") else str(folder), key=0)

        def run(engine=engine):
            t = time.perf_counter()
            outs = engine.generate(
                prompts, n=args.n, temperature=1.0, max_tokens=args.tokens, seeds=list(range(len(prompts)))
            )
            return time.perf_counter() - t, sum(len(c.token_ids) for o in outs for c in o)

        run()
        times, tokens = zip(*(run() for _ in range(args.reps)))
        results[name] = tokens[0] / statistics.median(times)
        if name in ("lora", "merged"):
            logprobs[name] = engine.prompt_logprobs(check, key=0)
        if name == "merged":
            switch = []
            for _ in range(3):
                engine.set_adapter(str(folder), key=0)  # same weights, but marked changed: a full rebuild
                t0 = engine.merge_s
                engine._load_merged(0)
                switch.append(engine.merge_s - t0)
            results["switch_s"] = statistics.median(switch)
        print(f"  {name:<10} {results[name]:7.1f} tok/s", flush=True)
        del engine
        gc.collect()

    trainer_lp = trainer.response_logprobs([Sample(tuple(check[:1]), tuple(check[1:]), 0.0)], 1.0)[0].tolist()
    base = (results["base"] + results["base again"]) / 2
    print(f"\nlora   / base: {results['lora'] / base:.2f}x   (base: the mean of its two measurements)")
    print(f"merged / base: {results['merged'] / base:.2f}x")
    print(f"merged: one adapter switch (weight rebuild) {results['switch_s']:.3f} s")
    for name in ("lora", "merged"):
        diff = max(abs(a - b) for a, b in zip(logprobs[name], trainer_lp))
        print(f"log-probs of a {len(check) - 1}-token sequence, {name} engine vs PEFT trainer: max |diff| {diff:.2e}")


if __name__ == "__main__":
    main()
