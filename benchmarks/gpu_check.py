"""The GPU check: the trainer and a rollout at the paper's shape on one GPU, no download, < 8 minutes.

    python benchmarks/gpu_check.py            # on a GPU machine (torch + transformers + peft; Ray/vLLM optional)
    python benchmarks/gpu_check.py --smoke    # the same parts at toy sizes, on CPU: checks the script itself

Parts, each run on its own and reported even when an earlier one failed:
  1. exactness on the GPU: the micro-batched step equals the full-batch step (fp32 tiny model)
  2. Qwen3-1.7B's architecture (configs/models/qwen3-1.7b.json, random weights, vocab 151,936) as the
     trainer holds it (bf16 base, fp32 LoRA r=32 on all linear layers, gradient checkpointing): one
     GRPO step at the paper's shape, b x K = 64 sequences of 1024 + 2048 tokens, 2 gradient epochs,
     on the micro-batched path; peak GPU memory, step time, tokens/s
  3. determinism: the same step twice under `deterministic` switches, bitwise or not, and its cost
  4. a rollout of b=8 prompts x K=8 responses: vLLM if importable, else transformers' generate
Prints one `RESULT name key=value ...` line per part.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def result(name: str, **kv) -> None:
    print(f"RESULT {name} " + " ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def part(fn):
    def run(args):
        t = time.perf_counter()
        print(f"\n=== {fn.__name__} ===", flush=True)
        try:
            fn(args)
        except Exception as e:  # go on: the next part may still run
            traceback.print_exc()
            result(fn.__name__, status="failed", error=repr(str(e)[:300]))
        print(f"({fn.__name__}: {time.perf_counter() - t:.1f}s)", flush=True)

    return run


def _device():
    import torch

    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def _samples(n: int, prompt_len: int, response_len: int, vocab: int, seed: int = 1, ragged: bool = False):
    import torch

    from pubswap.learner.trainer import Sample

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        r = response_len if not ragged else max(1, int(response_len * (0.2 + 0.8 * (i % 5) / 4)))
        out.append(
            Sample(
                tuple(torch.randint(0, vocab, (prompt_len,), generator=g).tolist()),
                tuple(torch.randint(0, vocab, (r,), generator=g).tolist()),
                advantage=float(torch.randn((), generator=g)),
            )
        )
    return out


def _qwen3(args, dtype):
    import json

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = json.loads((REPO / "configs" / "models" / "qwen3-1.7b.json").read_text())
    if args.smoke:  # the same architecture, toy sizes
        fields.update(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            max_window_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            vocab_size=args.vocab,
        )
    cfg = AutoConfig.for_model(**fields)
    torch.manual_seed(0)
    with torch.device(_device()):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model, cfg


@part
def exactness(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pubswap.config import GRPOConfig, LoraConfig
    from pubswap.learner.trainer import GRPOTrainer

    def run(budget):
        torch.manual_seed(0)
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=1000,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
            )
        )
        t = GRPOTrainer(
            model,
            LoraConfig(r=8, alpha=16),
            GRPOConfig(lr=1e-4, micro_batch_tokens=budget, kl_coef=0.05),
            device=_device(),
        )
        torch.manual_seed(3)
        t.set_adapter({k: torch.randn_like(v) * 0.05 for k, v in t.adapter().items()})
        t.step(_samples(12, 20, 60, 1000, ragged=True))
        return t.adapter()

    torch.backends.cuda.matmul.allow_tf32 = False
    full = run(10**6)
    worst = 0.0
    for budget in (400, 100, 1):
        got = run(budget)
        worst = max(worst, max((got[k] - full[k]).abs().max().item() for k in full))
    result("exactness", device=_device().type, max_abs_diff_vs_full_batch=f"{worst:.2e}", ok=worst <= 1e-6)


def _paper_step(args, deterministic: bool = False, repeats: int = 1):
    import torch
    from peft import get_peft_model_state_dict  # noqa: F401 (peft must import)

    from pubswap.config import GRPOConfig, LoraConfig
    from pubswap.learner.trainer import GRPOTrainer

    model, cfg = _qwen3(args, torch.bfloat16)
    grpo = GRPOConfig(
        micro_batch_tokens=args.micro_batch_tokens, logprob_chunk=args.logprob_chunk, gradient_checkpointing=True
    )
    trainer = GRPOTrainer(model, LoraConfig(r=32, alpha=64), grpo, device=_device())
    samples = _samples(args.seqs, args.prompt_len, args.response_len, cfg.vocab_size)
    start = trainer.adapter()
    outs, times = [], []
    for _ in range(repeats):
        trainer.set_adapter(start)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        metrics = trainer.step(samples)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        outs.append(trainer.adapter())
    return trainer, metrics, times, outs, cfg


@part
def paper_step(args):
    import torch

    trainer, metrics, times, _, cfg = _paper_step(args)
    tokens = args.seqs * (args.prompt_len + args.response_len)
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    reserved = torch.cuda.max_memory_reserved() / 2**30 if torch.cuda.is_available() else float("nan")
    result(
        "paper_step",
        model="qwen3-1.7b-arch" + ("-smoke" if args.smoke else ""),
        seqs=args.seqs,
        tokens_per_seq=args.prompt_len + args.response_len,
        vocab=cfg.vocab_size,
        micro_batches=metrics["micro_batches"],
        peak_alloc_gib=f"{peak:.1f}",
        peak_reserved_gib=f"{reserved:.1f}",
        step_s=f"{times[0]:.1f}",
        trained_tokens_per_s=f"{tokens * 2 / times[0]:.0f}",
        all_tokens_per_s=f"{tokens / times[0]:.0f}",
    )


@part
def determinism(args):
    import torch

    seqs = min(args.seqs, 8)
    small = argparse.Namespace(**{**vars(args), "seqs": seqs})
    _, _, t_default, outs, _ = _paper_step(small, repeats=2)
    same_default = all(torch.equal(outs[0][k], outs[1][k]) for k in outs[0])
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        _, _, t_det, outs, _ = _paper_step(small, repeats=2)
        same_det = all(torch.equal(outs[0][k], outs[1][k]) for k in outs[0])
    finally:
        torch.use_deterministic_algorithms(False)
    result(
        "determinism",
        seqs=seqs,
        bitwise_default=same_default,
        bitwise_deterministic=same_det,
        step_s_default=f"{t_default[1]:.1f}",
        step_s_deterministic=f"{t_det[1]:.1f}",
        cost=f"{t_det[1] / t_default[1]:.2f}x",
    )


@part
def rollout(args):
    """vLLM if it imports, else transformers' generate."""
    import torch

    n_prompts, k = (2, 2) if args.smoke else (8, 8)
    try:
        import vllm  # noqa: F401

        have_vllm = True
    except Exception as e:
        have_vllm = False
        print(f"vLLM not importable ({type(e).__name__}: {e}); rolling out with transformers' generate", flush=True)
    if have_vllm:
        _vllm_rollout(args, n_prompts, k)
        return
    model, cfg = _qwen3(args, torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    model.eval()
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, cfg.vocab_size, (n_prompts, args.prompt_len), generator=g).repeat_interleave(k, 0)
    prompts = prompts.to(_device())
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=True,
            temperature=0.7,
            max_new_tokens=args.gen_tokens,
            min_new_tokens=args.gen_tokens,
            pad_token_id=0,
        )
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    s = time.perf_counter() - t
    new = (out.shape[1] - prompts.shape[1]) * out.shape[0]
    result(
        "rollout",
        engine="hf-generate",
        sequences=out.shape[0],
        prompt_len=args.prompt_len,
        new_tokens_per_seq=out.shape[1] - prompts.shape[1],
        seconds=f"{s:.1f}",
        tokens_per_s=f"{new / s:.0f}",
    )


def _vllm_rollout(args, n_prompts: int, k: int) -> None:
    """vLLM on the same random architecture, from a temporary folder (no tokenizer: token prompts)."""
    import gc
    import shutil
    import tempfile

    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    model, cfg = _qwen3(args, dtype)
    folder = tempfile.mkdtemp(prefix="gpu_check_model_")
    try:
        model.save_pretrained(folder)
        del model
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        kwargs = dict(
            model=folder,
            skip_tokenizer_init=True,
            dtype="bfloat16" if dtype == torch.bfloat16 else "float32",
            max_model_len=args.prompt_len + args.gen_tokens,
            seed=0,
            max_num_seqs=n_prompts * k,
        )
        if torch.cuda.is_available():
            kwargs["gpu_memory_utilization"] = 0.5
        else:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            kwargs.update(enforce_eager=True, enable_chunked_prefill=False)
        t = time.perf_counter()
        llm = LLM(**kwargs)
        start_s = time.perf_counter() - t
        g = torch.Generator().manual_seed(0)
        prompts = [
            TokensPrompt(prompt_token_ids=torch.randint(0, cfg.vocab_size, (args.prompt_len,), generator=g).tolist())
            for _ in range(n_prompts)
        ]
        params = SamplingParams(
            n=k,
            temperature=0.7,
            max_tokens=args.gen_tokens,
            min_tokens=args.gen_tokens,
            ignore_eos=True,
            detokenize=False,
            seed=0,
        )
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        s = time.perf_counter() - t
        new = sum(len(c.token_ids) for o in outs for c in o.outputs)
        result(
            "rollout",
            engine="vllm",
            sequences=n_prompts * k,
            prompt_len=args.prompt_len,
            new_tokens_per_seq=args.gen_tokens,
            engine_start_s=f"{start_s:.0f}",
            seconds=f"{s:.1f}",
            tokens_per_s=f"{new / s:.0f}",
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="toy sizes (runs on CPU in about a minute)")
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--response-len", type=int, default=2048)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--logprob-chunk", type=int, default=1024)
    ap.add_argument(
        "--gen-tokens", type=int, default=512, help="new tokens per rollout sequence (random weights never stop early)"
    )
    ap.add_argument("--parts", default="exactness,paper_step,determinism,rollout")
    args = ap.parse_args()
    if args.smoke:
        args.seqs, args.prompt_len, args.response_len, args.gen_tokens = 4, 32, 64, 16
        args.micro_batch_tokens, args.vocab = 200, 151936
    else:
        args.vocab = 151936
    import torch

    dev = _device()
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    print(f"device {name}; torch {torch.__version__}; cuda {torch.version.cuda}", flush=True)
    if dev.type != "cuda" and not args.smoke:
        print("no CUDA device: the full-size parts would take hours on a CPU; use --smoke here", flush=True)
        sys.exit(2)
    t = time.perf_counter()
    parts = {"exactness": exactness, "paper_step": paper_step, "determinism": determinism, "rollout": rollout}
    for p in args.parts.split(","):
        parts[p](args)
    print(f"\ntotal {time.perf_counter() - t:.0f}s", flush=True)


if __name__ == "__main__":  # vLLM's engine core is a spawned process: the guard is required
    main()
