"""Time of the round's adapter average: one allreduce of the flat LoRA vector among client actors.

    python benchmarks/collective.py [--actors 2] [--elements 34865152] [--repeats 5] [--backend gloo]

The default size is Qwen3-1.7B's adapter at the paper's LoRA (r=32 on all linear layers: 34,865,152
fp32 values, 133 MiB). Runs real Ray actors with `ray.util.collective` on this machine (gloo over
loopback; nccl needs GPUs and cupy) and prints per-repeat seconds and the median, plus the cost of
flattening the adapter and copying it off/onto the device (what the gloo path adds on a GPU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--elements", type=int, default=34_865_152)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    args = ap.parse_args()

    import ray
    import torch

    from actors.collective import tensor_device

    @ray.remote(num_cpus=0)
    class Member:
        def __init__(self, n: int, rank: int, world: int, backend: str):
            import ray.util.collective as col

            self.col = col
            col.init_collective_group(world, rank, backend=backend, group_name="bench")
            self.flat = torch.full((n,), float(rank + 1)).to(tensor_device(backend))

        def allreduce(self) -> float:
            t = time.perf_counter()
            self.col.allreduce(self.flat, group_name="bench")
            if self.flat.is_cuda:
                torch.cuda.synchronize()
            return time.perf_counter() - t

        def value(self) -> float:
            return float(self.flat[0])

    ray.init(include_dashboard=False, num_cpus=max(2, args.actors))
    gpus = 1 if args.backend == "nccl" else 0
    members = [
        Member.options(num_gpus=gpus).remote(args.elements, r, args.actors, args.backend) for r in range(args.actors)
    ]
    times = []
    for _ in range(args.repeats):
        times.append(max(ray.get([m.allreduce.remote() for m in members])))
    # the sum of 1..world after the first repeat, then multiplied by world each further repeat
    world = args.actors
    expected = (world * (world + 1) / 2) * world ** (args.repeats - 1)
    assert abs(ray.get(members[0].value.remote()) - expected) < 1e-3 * expected
    ray.shutdown()

    adapter = {f"t{i}": torch.randn(args.elements // 64) for i in range(64)}
    from pubswap.lora import flatten, unflatten

    t = time.perf_counter()
    flat, spec = flatten(adapter)
    unflatten(flat, spec)
    flatten_s = time.perf_counter() - t
    mib = args.elements * 4 / 2**20
    print(" ".join(f"{x:.3f}" for x in times))
    print(
        f"backend={args.backend} actors={args.actors} size_mib={mib:.0f} "
        f"allreduce_median_s={statistics.median(times):.3f} "
        f"flatten_unflatten_s={flatten_s:.3f}"
    )


if __name__ == "__main__":
    main()
