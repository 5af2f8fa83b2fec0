"""What an in-round checkpoint costs at the paper's shape, and the cadence that follows from it.

    python benchmarks/step_checkpoint.py [--model qwen3-1.7b.json] [--r 32] [--step-s 45] [--upload-mbs 200]

One logical client's in-round state is its LoRA adapter and AdamW's two moments, all fp32, plus a step
count per tensor (pubswap/run/step_checkpoint.py). The LoRA shapes are counted from configs/models/<model>
on the meta device (all linear layers, rank r). The script writes one client's real checkpoint to this
machine's disk with the production code (safetensors, sha256, fsync, rename) and times it (median of 3);
32 clients per actor are computed as 32x (one file of 32x the tensors: the write is linear in bytes).
The upload to an object store is computed at --upload-mbs (measure your bucket: a loopback S3 server
says nothing about it). The cadence table takes --step-s seconds per local step (issue 24: ~45 s on a
GPU at the paper's shape) and shows, per `checkpoint.every_steps`, the most work a preemption loses and
the share of step time the checkpoints cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def lora_shapes(model_json: Path, r: int) -> dict[str, tuple[int, ...]]:
    import torch
    from peft import get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from pubswap.lora import peft_lora_config

    config = AutoConfig.from_pretrained(str(model_json))
    with torch.device("meta"):
        model = get_peft_model(AutoModelForCausalLM.from_config(config), peft_lora_config(r, 2 * r, ["all-linear"]))
    return {n: tuple(p.shape) for n, p in model.named_parameters() if p.requires_grad}


def client_state(shapes: dict[str, tuple[int, ...]], seed: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    adapter = {n: torch.randn(s, generator=g) for n, s in shapes.items()}
    opt = {
        i: {
            "step": torch.tensor(10.0),
            "exp_avg": torch.randn(s, generator=g),
            "exp_avg_sq": torch.rand(s, generator=g),
        }
        for i, s in enumerate(shapes.values())
    }
    return {"adapter": adapter, "opt": opt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-1.7b.json")
    ap.add_argument("--r", type=int, default=32)
    ap.add_argument("--step-s", type=float, default=45.0)
    ap.add_argument("--upload-mbs", type=float, default=200.0, help="object-store upload bandwidth, MB/s")
    args = ap.parse_args()

    from pubswap.run import step_checkpoint

    shapes = lora_shapes(REPO / "configs" / "models" / args.model, args.r)
    values = sum(int(__import__("math").prod(s)) for s in shapes.values())
    state = {0: client_state(shapes, 0)}
    times, size = [], 0
    with tempfile.TemporaryDirectory(dir=REPO) as tmp:  # the repo's disk, not a RAM-backed /tmp
        for rep in range(3):
            t = time.perf_counter()
            folder = step_checkpoint.save(tmp, 1, rep + 1, [], state)
            times.append(time.perf_counter() - t)
            size = sum(f.stat().st_size for f in folder.iterdir())
        t = time.perf_counter()
        loaded = step_checkpoint.load(tmp, 1)
        load_s = time.perf_counter() - t
        assert loaded is not None and loaded.step == 3
    write_s = statistics.median(times)
    mib = size / 2**20
    print(
        f"{args.model} LoRA r={args.r}: {len(shapes)} tensors, {values / 1e6:.1f} M values; one client's in-round "
        f"state (adapter + AdamW moments, fp32) = {mib:.0f} MiB"
    )
    print(
        f"measured here (2-core CPU, local disk): write {write_s:.2f} s (median of 3: "
        f"{', '.join(f'{x:.2f}' for x in times)}), {mib / write_s:.0f} MiB/s; read + verify {load_s:.2f} s"
    )
    print(
        f"{'clients per actor':<18}{'size':>10}{'write (measured x n)':>22}"
        f"{'upload at ' + str(int(args.upload_mbs)) + ' MB/s':>22}"
    )
    for n in (1, 32):
        up = n * size / 1e6 / args.upload_mbs
        print(f"{n:<18}{n * mib / 1024:>8.2f} GiB{n * write_s:>20.1f} s{up:>20.1f} s")
    cost = write_s + size / 1e6 / args.upload_mbs
    print(f"\ncadence at {args.step_s:g} s per step, 1 client per actor (checkpoint = write + upload = {cost:.1f} s):")
    print(f"{'every_steps':<13}{'most lost per preemption':>26}{'checkpoint share of step time':>32}")
    for every in (1, 2, 5, 10, 13, 20):
        print(f"{every:<13}{every * args.step_s / 60:>22.1f} min{100 * cost / (every * args.step_s):>30.2f} %")
    print(
        "With n clients per actor a step takes about n times as long (each client trains in turn) and the "
        "state is n times larger: the shares stay about the same."
    )


if __name__ == "__main__":
    main()
