"""Today's padded GRPO step and the shared-prefix step, side by side in one process.

    python benchmarks/shared_prefix_step.py                 # the default config's shape, then the paper's
    python benchmarks/shared_prefix_step.py --shape default --repeats 5

Both variants run the production `GRPOTrainer.step` on the same samples, alternately (padded, shared,
padded, shared, ...), so that the machine's drift hits both alike; `grpo.shared_prefix` is the only
difference (pubswap/learner/shared_prefix.py). Per variant it prints the tokens through the decoder
(padding included), the attention scores computed, a forward-FLOP estimate of one step, the median
wall time of a step, and the peak resident memory the step adds (sampled every 2 ms after returning
freed memory to the OS with malloc_trim; on CUDA, torch's peak allocated), then the ratios shared/padded.

Shapes:
- default: configs/default.yaml as `make run` trains it: SmolLM2-135M-Instruct (float32), its real
  prompts (one solved example plus the question, from the run's split), b=2 prompts x K=8 responses of
  4-16 tokens (max_response_len 16), micro_batch_tokens 1024, one pass (grad_epochs 1, no KL).
- paper: b=8 prompts x K=8 responses, prompts of 256-1024 tokens, responses of 256-2048 (the paper's
  limits), LoRA r=32 on all linear layers, grad_epochs 2, KL to the reference. FLOPs and tokens are
  counted for Qwen3-1.7B (configs/models/qwen3-1.7b.json); the measured model is a narrow Qwen3 of the
  same depth-to-vocabulary proportions (hidden 256, 2 layers, vocabulary scaled so that the LM head's share
  of the linear FLOPs per token is Qwen3-1.7B's), with --paper-prompts prompts, as a CPU cannot step the
  real one. Its attention share of the FLOPs is larger than Qwen3-1.7B's (narrow model, long rows), so its
  time ratio is a lower bound on the saving's share that comes from attention, not a GPU prediction.

FLOPs of one forward: 2 x decoder params x decoder tokens + 2 x LM-head params x scored tokens +
4 x layers x (heads x head_dim) x attention scores; a step is the no-grad old-policy pass, the
reference pass when kl_coef > 0, and ~3 forwards (forward + backward) per epoch.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


class PeakRSS:
    """Peak resident memory above the level at entry, sampled every 2 ms in a thread."""

    def __enter__(self):
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed heap back to the OS: a fair baseline
        except OSError:
            pass
        self.base = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def added_gib(self) -> float:
        return (self.peak - self.base) / 2**30


def counts(trainer, samples, shared: bool) -> dict[str, float]:
    """Decoder tokens (padding included), scored tokens and attention scores of one pass's micro-batches."""
    mbs = trainer.micro_batches(samples, shared)
    decoder = scores = 0
    for mb in mbs:
        if mb.packed is None:
            n, t = mb.ids.shape
            decoder += n * t
            scores += n * t * t  # SDPA with a padding mask computes every query-key pair of a row
        else:
            decoder += mb.packed.ids.shape[1]
            for g in mb.packed.groups:
                scores += g.prompt_len**2 + sum(n * (g.prompt_len + n) for n in g.response_lens)
    return {
        "micro_batches": len(mbs),
        "decoder": decoder,
        "scored": sum(len(s.response_ids) for s in samples),
        "scores": scores,
    }


def param_counts(config) -> tuple[int, int, int]:
    """(decoder params without embeddings, LM-head params, heads x head_dim) of a transformers config."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings().weight.numel()
    embed = model.get_input_embeddings().weight.numel()
    total = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    decoder = total - embed - (0 if tied else head)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return decoder, head, config.num_attention_heads * head_dim * config.num_hidden_layers


def step_flops(c: dict[str, float], params: tuple[int, int, int], grpo) -> float:
    decoder, head, attn = params
    forward = 2 * decoder * c["decoder"] + 2 * head * c["scored"] + 4 * attn * c["scores"]
    passes = 1 + (1 if grpo.kl_coef > 0 else 0) + 3 * grpo.grad_epochs
    return forward * passes


def run_shape(name, trainer, samples, flop_params, repeats: int, device: str) -> dict[str, float]:
    import torch

    grpo = trainer.grpo
    print(
        f"\n== {name}: {len(samples)} sequences, prompts {min(len(s.prompt_ids) for s in samples)}-"
        f"{max(len(s.prompt_ids) for s in samples)} tokens, responses {min(len(s.response_ids) for s in samples)}-"
        f"{max(len(s.response_ids) for s in samples)}, micro_batch_tokens {grpo.micro_batch_tokens}, "
        f"grad_epochs {grpo.grad_epochs}, kl_coef {grpo.kl_coef}"
    )
    times: dict[bool, list[float]] = {False: [], True: []}
    mem: dict[bool, float] = {False: 0.0, True: 0.0}
    for i in range(repeats + 1):  # the first round warms both up and is not timed
        for shared in (False, True):
            trainer.shared_prefix = shared
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            with PeakRSS() as rss:
                t = time.perf_counter()
                trainer.step(samples)
                if device == "cuda":
                    torch.cuda.synchronize()
                dt = time.perf_counter() - t
            added = (torch.cuda.max_memory_allocated() - before) / 2**30 if device == "cuda" else rss.added_gib
            if i:
                times[shared].append(dt)
            mem[shared] = max(mem[shared], added)
    rows = {}
    for shared in (False, True):
        c = counts(trainer, samples, shared)
        rows[shared] = {
            **c,
            "flops": step_flops(c, flop_params, grpo),
            "step_s": statistics.median(times[shared]),
            "peak_gib": mem[shared],
        }
    print(
        f"{'':<8} {'micro-b.':>8} {'decoder tok':>12} {'scored tok':>10} {'attn scores':>12} "
        f"{'step TFLOP':>11} {'step s':>8} {'peak GiB':>9}"
    )
    for shared, label in ((False, "padded"), (True, "shared")):
        r = rows[shared]
        print(
            f"{label:<8} {r['micro_batches']:>8} {r['decoder']:>12,} {r['scored']:>10,} {r['scores']:>12,.3g} "
            f"{r['flops'] / 1e12:>11.3f} {r['step_s']:>8.2f} {r['peak_gib']:>9.2f}"
        )
    ratio = {k: rows[True][k] / rows[False][k] if rows[False][k] else float("nan") for k in rows[False]}
    print(
        f"{'ratio':<8} {ratio['micro_batches']:>8.2f} {ratio['decoder']:>12.3f} {ratio['scored']:>10.2f} "
        f"{ratio['scores']:>12.3f} {ratio['flops']:>11.3f} {ratio['step_s']:>8.3f} {ratio['peak_gib']:>9.3f}"
    )
    print(
        f"(step s: median of {repeats}: padded {[round(t, 2) for t in times[False]]}, "
        f"shared {[round(t, 2) for t in times[True]]})"
    )
    return ratio


def grouped_samples(prompts, K: int, response_lens: tuple[int, int], vocab: int, seed: int):
    from pubswap.learner.trainer import Sample

    rng = random.Random(seed)
    out = []
    for prompt in prompts:
        adv = [rng.gauss(0, 1) for _ in range(K)]
        mean = sum(adv) / K
        for a in adv:
            response = tuple(rng.randrange(vocab) for _ in range(rng.randint(*response_lens)))
            out.append(Sample(tuple(prompt), response, a - mean))
    return out


def default_shape(args, device):
    from transformers import AutoTokenizer

    from jobs.train import build_split
    from pubswap.config import load_config
    from pubswap.data.prompt_length import prompt_ids
    from pubswap.learner.trainer import GRPOTrainer
    from pubswap.models import resolve_model

    cfg = load_config(str(REPO / "configs/default.yaml"), [])
    model_dir = resolve_model(cfg.model.path, Path(cfg.run_dir).resolve().parent / "_models")
    split = build_split(cfg, model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = split.clients[0][: cfg.grpo.b]
    prompts = [prompt_ids(tok, r.prompt, r.context) for r in rows]
    trainer = GRPOTrainer.load(model_dir, cfg.lora, cfg.grpo, dtype=cfg.model.dtype, device=device)
    samples = grouped_samples(prompts, cfg.grpo.K, (4, cfg.model.max_response_len), len(tok), cfg.seed)
    params = param_counts(trainer.causal().config)
    return run_shape("default config (SmolLM2-135M, measured)", trainer, samples, params, args.repeats, device)


def paper_shape(args, device):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from pubswap.config import GRPOConfig, LoraConfig
    from pubswap.learner.trainer import GRPOTrainer

    real = AutoConfig.from_pretrained(str(REPO / "configs/models/qwen3-1.7b.json"))
    real_params = param_counts(real)
    grpo = GRPOConfig(K=8, b=args.paper_prompts, grad_epochs=2, kl_coef=0.001, micro_batch_tokens=16384)
    rng = random.Random(1)
    prompts = [[rng.randrange(1000, 100000) for _ in range(rng.randint(256, 1024))] for _ in range(8)]
    full = grouped_samples(prompts, 8, (256, 2048), real.vocab_size, 2)
    # the real model's counts at the paper's b=8, from the planner alone (no model weights needed)
    planner = GRPOTrainer.__new__(GRPOTrainer)  # micro_batches() needs only these three
    planner.grpo, planner.pad_id, planner.device = grpo, 0, "cpu"
    print("\n== paper shape, Qwen3-1.7B counted (b=8, K=8, not run):")
    for shared in (False, True):
        c = counts(planner, full, shared)
        print(
            f"{'shared' if shared else 'padded':<8} micro-batches {c['micro_batches']:>3}  "
            f"decoder tokens {c['decoder']:>9,}  scored {c['scored']:>8,}  attn scores {c['scores']:.3g}  "
            f"step {step_flops(c, real_params, grpo) / 1e15:.3f} PFLOP"
        )
    p, s = counts(planner, full, False), counts(planner, full, True)
    print(
        f"ratio    decoder tokens {s['decoder'] / p['decoder']:.3f}  step FLOPs "
        f"{step_flops(s, real_params, grpo) / step_flops(p, real_params, grpo):.3f}"
    )
    narrow = real.to_dict()
    narrow.pop("layer_types", None)
    narrow.update(
        hidden_size=256,
        intermediate_size=768,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_hidden_layers=2,
    )
    cfg = type(real).from_dict(narrow)
    dec, _, _ = param_counts(cfg)
    # keep Qwen3-1.7B's LM-head share of the linear FLOPs per scored token
    cfg.vocab_size = max(1024, int(real_params[1] / real_params[0] * dec / cfg.hidden_size))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(device)
    lora = LoraConfig(r=32, alpha=64)
    small = grpo.model_copy(update={"b": args.paper_prompts})
    trainer = GRPOTrainer(model, lora, small, device=device)
    samples = [
        type(x)(
            tuple(t % cfg.vocab_size for t in x.prompt_ids),
            tuple(t % cfg.vocab_size for t in x.response_ids),
            x.advantage,
        )
        for x in full[: 8 * args.paper_prompts]
    ]
    label = f"paper shape, narrow Qwen3 measured (hidden 256, 2 layers, vocab {cfg.vocab_size}, b={args.paper_prompts})"
    return run_shape(label, trainer, samples, param_counts(cfg), args.repeats, device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=["default", "paper", "both"], default="both")
    ap.add_argument("--repeats", type=int, default=3, help="timed steps per variant (after one untimed warm-up each)")
    ap.add_argument("--paper-prompts", type=int, default=1, help="prompts (x 8 responses) of the measured paper shape")
    ap.add_argument("--device", default="cuda" if os.environ.get("CUDA_VISIBLE_DEVICES") else "cpu")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.shape in ("default", "both"):
        default_shape(args, args.device)
    if args.shape in ("paper", "both"):
        paper_shape(args, args.device)


if __name__ == "__main__":
    main()
