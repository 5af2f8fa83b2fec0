"""The GPU check: the trainer and a rollout at the paper's shape on one GPU, no download, < 8 minutes.

    python benchmarks/gpu_check.py            # on a GPU machine (torch + transformers + peft; Ray/vLLM optional)
    python benchmarks/gpu_check.py --smoke    # the same parts at toy sizes, on CPU: checks the script itself

Parts, each run on its own and reported even when an earlier one failed:
  1. exactness on the GPU: the micro-batched step equals the full-batch step (fp32 tiny model)
  2. Qwen3-1.7B's architecture (configs/models/qwen3-1.7b.json, random weights, vocab 151,936) as the
     trainer holds it (bf16 base, fp32 LoRA r=32 on all linear layers, gradient checkpointing): one
     GRPO step at the paper's shape, b=8 prompts of 1024 tokens x K=8 responses of 410-2048 tokens
     (ragged), 2 gradient epochs, with the trainer's defaults (shared-prefix packed rows, LoRA under
     bf16 autocast, larger no-grad micro-batches); peak GPU memory, step time, tokens/s
  3. step_variants: one step of b=2 x K=8 at the same lengths, padded rows with fp32 LoRA (the previous
     step), shared-prefix rows, and shared-prefix rows with bf16 LoRA: time and peak memory, ratios
  4. determinism: the same step twice under `deterministic` switches, bitwise or not, and its cost
  5. a rollout of b=8 prompts x K=8 responses: vLLM if importable, else transformers' generate
  6. nccl: a one-rank NCCL allreduce through cupy (what ray.util.collective's NCCL backend calls)
  7. engine_vs_trainer: a vLLM engine in LoRA mode (actors/rollout.py, sleep mode on a GPU) serving the
     trainer's live adapter, saved as a PEFT folder: its prompt log-probs against the trainer's, awake
     and after a sleep/wake cycle (tiny random model from tests/tiny_model.py; needs vLLM)
  8. client_core: a whole ClientCore in this process (actors/client.py: trainer and vLLM engine in LoRA mode
     on one card), sleep mode off and on: one private GRPO step, then the engine's log-probs of a sampled
     response under the client's live adapter against the trainer's (needs vLLM and Ray installed)
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
# engine against trainer log-probs of the same tokens: the largest difference taken as agreement
LOGPROB_TOL = {"bfloat16": 5e-2, "float32": 1e-3}
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


def _groups(prompts: int, k: int, prompt_len: int, response_len: int, vocab: int, seed: int = 1):
    """GRPO groups: `prompts` prompts with `k` responses each, of 0.2-1.0 x response_len tokens."""
    import torch

    from pubswap.learner.trainer import Sample

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(prompts):
        prompt = tuple(torch.randint(0, vocab, (prompt_len,), generator=g).tolist())
        for i in range(k):
            r = max(1, int(response_len * (0.2 + 0.8 * (i % 5) / 4)))
            adv = float(torch.randn((), generator=g))
            out.append(Sample(prompt, tuple(torch.randint(0, vocab, (r,), generator=g).tolist()), advantage=adv))
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
    samples = _groups(max(1, args.seqs // 8), 8, args.prompt_len, args.response_len, cfg.vocab_size)
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
    return trainer, metrics, times, outs, cfg, samples


@part
def paper_step(args):
    import torch

    trainer, metrics, times, _, cfg, samples = _paper_step(args)
    tokens = sum(len(s) for s in samples)
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    reserved = torch.cuda.max_memory_reserved() / 2**30 if torch.cuda.is_available() else float("nan")
    result(
        "paper_step",
        model="qwen3-1.7b-arch" + ("-smoke" if args.smoke else ""),
        seqs=len(samples),
        tokens=tokens,
        shared_prefix=trainer.shared_prefix,
        lora_autocast=trainer.autocast_dtype is not None,
        nograd_micro_batch_tokens=trainer.nograd_tokens,
        vocab=cfg.vocab_size,
        micro_batches=metrics["micro_batches"],
        peak_alloc_gib=f"{peak:.1f}",
        peak_reserved_gib=f"{reserved:.1f}",
        step_s=f"{times[0]:.1f}",
        trained_tokens_per_s=f"{tokens * 2 / times[0]:.0f}",
        all_tokens_per_s=f"{tokens / times[0]:.0f}",
    )


@part
def step_variants(args):
    """The same b=2 x K=8 step: padded rows + fp32 LoRA, shared-prefix rows, shared-prefix + bf16 LoRA."""
    import torch

    small = argparse.Namespace(**{**vars(args), "seqs": 16})
    trainer, _, _, _, _, samples = _paper_step(small)
    start = trainer.adapter()
    bf16 = trainer.autocast_dtype
    rows = {}
    for name, shared, autocast in [
        ("padded_fp32lora", False, None),
        ("shared", True, None),
        ("shared_bf16lora", True, bf16),
    ]:
        trainer.shared_prefix, trainer.autocast_dtype = shared, autocast
        times, peak = [], float("nan")
        for _ in range(2):  # the first warms up
            trainer.set_adapter(start)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t = time.perf_counter()
            trainer.step(samples)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() / 2**30
            times.append(time.perf_counter() - t)
        rows[name] = (times[-1], peak)
    base_s, base_gib = rows["padded_fp32lora"]
    result(
        "step_variants",
        seqs=len(samples),
        **{f"{n}_s": f"{s:.2f}" for n, (s, _) in rows.items()},
        **{f"{n}_peak_gib": f"{m:.1f}" for n, (_, m) in rows.items()},
        **{f"{n}_time_ratio": f"{s / base_s:.2f}" for n, (s, _) in rows.items() if n != "padded_fp32lora"},
        **{f"{n}_mem_ratio": f"{m / base_gib:.2f}" for n, (_, m) in rows.items() if n != "padded_fp32lora"},
    )


@part
def nccl(args):
    """One rank, one GPU: the NCCL communicator and allreduce that ray.util.collective's backend uses."""
    import cupy
    from cupy.cuda import nccl as cnccl

    comm = cnccl.NcclCommunicator(1, cnccl.get_unique_id(), 0)
    x = cupy.arange(1 << 20, dtype=cupy.float32)
    stream = cupy.cuda.Stream.null
    t = time.perf_counter()
    comm.allReduce(x.data.ptr, x.data.ptr, x.size, cnccl.NCCL_FLOAT32, cnccl.NCCL_SUM, stream.ptr)
    stream.synchronize()
    s = time.perf_counter() - t
    ok = bool((x == cupy.arange(1 << 20, dtype=cupy.float32)).all())  # one rank: the sum is itself
    result("nccl", version=cnccl.get_version(), elements=x.size, seconds=f"{s:.4f}", ok=ok)


@part
def engine_vs_trainer(args):
    """The engine's and the trainer's log-probs of the same tokens under the same live adapter."""
    import shutil
    import tempfile

    import torch

    sys.path.insert(0, str(REPO / "tests"))
    from tiny_model import build_tiny_model

    from actors.rollout import VLLMEngine
    from pubswap.config import GRPOConfig, LoraConfig
    from pubswap.learner.trainer import GRPOTrainer, Sample
    from pubswap.lora import save_adapter

    cuda = torch.cuda.is_available()
    dtype = "bfloat16" if cuda else "float32"
    folder = Path(tempfile.mkdtemp(prefix="gpu_check_engine_"))
    try:
        model_dir = build_tiny_model(folder / "model")
        trainer = GRPOTrainer.load(str(model_dir), LoraConfig(r=8, alpha=16), GRPOConfig(), dtype=dtype)
        torch.manual_seed(5)  # a non-zero B: the adapter changes the log-probs
        trainer.set_adapter({k: v + torch.randn_like(v) * 0.1 for k, v in trainer.adapter().items()})
        adapter_dir = save_adapter(folder / "adapter", trainer.adapter(), trainer.lora_config)
        engine = VLLMEngine(str(model_dir), 8, 128, dtype, 0, merged=False, sleep_mode=cuda)
        engine.set_adapter(str(adapter_dir), key=1)
        g = torch.Generator().manual_seed(0)
        vocab = trainer.causal().config.vocab_size
        prompt = tuple(torch.randint(3, vocab, (24,), generator=g).tolist())
        response = tuple(torch.randint(3, vocab, (16,), generator=g).tolist())
        (own,) = trainer.response_logprobs([Sample(prompt, response, 0.0)], 1.0)
        diffs = {}
        for phase in ("awake", "after_sleep"):
            if phase == "after_sleep":
                engine.sleep()  # a no-op without sleep mode (CPU)
            lps = engine.prompt_logprobs(prompt + response, key=1)[len(prompt) - 1 :]
            diffs[phase] = (torch.tensor(lps) - own.float()).abs().max().item()
        base = engine.prompt_logprobs(prompt + response, key=0)[len(prompt) - 1 :]
        moved = (torch.tensor(base) - own.float()).abs().max().item()  # the adapter is really served
        result(
            "engine_vs_trainer",
            dtype=dtype,
            sleep_mode=engine.sleep_mode,
            max_abs_diff_awake=f"{diffs['awake']:.2e}",
            max_abs_diff_after_sleep=f"{diffs['after_sleep']:.2e}",
            base_model_diff=f"{moved:.2e}",
            ok=max(diffs.values()) <= LOGPROB_TOL[dtype] < moved,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@part
def client_core(args):
    """A whole ClientCore in this process (trainer and vLLM engine in LoRA mode on one card), with sleep mode
    off and on: one private GRPO step, then the engine's log-probs of a sampled response under the client's
    live adapter against the trainer's."""
    import gc
    import shutil
    import tempfile

    import torch

    sys.path.insert(0, str(REPO / "tests"))
    from ray_helpers import tiny_config
    from tiny_model import build_tiny_model

    from actors.client import ClientCore
    from jobs.train import build_split

    cuda = torch.cuda.is_available()
    dtype = "bfloat16" if cuda else "float32"
    folder = Path(tempfile.mkdtemp(prefix="gpu_check_client_"))
    try:
        model_dir = build_tiny_model(folder / "model", digits_only=True)
        for sleep in (False, True) if cuda else (False,):  # vLLM's sleep mode needs a GPU
            cfg = tiny_config(
                model_dir,
                folder / f"run_sleep_{sleep}",
                "rollout.backend=vllm",
                "rollout.lora_mode=lora",
                f"rollout.sleep_mode={str(sleep).lower()}",
                f"model.dtype={dtype}",
                "federation.num_clients=1",
            )
            split = build_split(cfg, str(model_dir))
            t = time.perf_counter()
            core = ClientCore(cfg.to_dict(), {0: split.clients[0]}, str(model_dir))
            start_s = time.perf_counter() - t
            try:
                torch.manual_seed(5)  # a non-zero B, so the engine really serves an adapter (it is synced here)
                core.set_global({k: v + torch.randn_like(v) * 0.1 for k, v in core.get_adapter(0).items()})
                before = core.get_adapter(0)
                t = time.perf_counter()
                (step,) = core.private_steps(0, 1)  # rollout, then train with the engine asleep (sleep mode)
                step_s = time.perf_counter() - t
                moved = max((v - before[k]).abs().max().item() for k, v in core.get_adapter(0).items())
                pids = list(core.prompt_ids(split.test[0]))
                response = list(core.engine.generate([pids], 1, 1.0, 16, seeds=[0], keys=[0])[0][0].token_ids)
                engine = torch.tensor(core.engine_logprobs(pids + response)[len(pids) - 1 :])
                trainer = torch.tensor(core.trainer_logprobs(pids, response))
                diff = (engine - trainer).abs().max().item()
                result(
                    f"client_core_sleep_{'on' if sleep else 'off'}",
                    dtype=dtype,
                    engine_start_s=f"{start_s:.0f}",
                    step_s=f"{step_s:.1f}",
                    reward_mean=f"{step['reward_mean']:.3f}",
                    adapter_step_max=f"{moved:.2e}",
                    response_tokens=len(response),
                    max_abs_diff=f"{diff:.2e}",
                    ok=diff <= LOGPROB_TOL[dtype],
                )
            finally:
                del core  # its engine (and the engine core process) goes with it before the next one starts
                gc.collect()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@part
def determinism(args):
    import torch

    seqs = min(args.seqs, 8)
    small = argparse.Namespace(**{**vars(args), "seqs": seqs})
    _, _, t_default, outs, _, _ = _paper_step(small, repeats=2)
    same_default = all(torch.equal(outs[0][k], outs[1][k]) for k in outs[0])
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        _, _, t_det, outs, _, _ = _paper_step(small, repeats=2)
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
    ap.add_argument(
        "--parts",
        default="exactness,paper_step,step_variants,determinism,rollout,nccl,engine_vs_trainer,client_core",
    )
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
    parts = {
        "exactness": exactness,
        "paper_step": paper_step,
        "step_variants": step_variants,
        "determinism": determinism,
        "rollout": rollout,
        "nccl": nccl,
        "engine_vs_trainer": engine_vs_trainer,
        "client_core": client_core,
    }
    for p in args.parts.split(","):
        parts[p](args)
    print(f"\ntotal {time.perf_counter() - t:.0f}s", flush=True)


if __name__ == "__main__":  # vLLM's engine core is a spawned process: the guard is required
    main()
