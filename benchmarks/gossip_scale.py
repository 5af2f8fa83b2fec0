"""The gossip layer alone at 16-128 clients: time, memory and bytes per client per gossip round.

    python benchmarks/gossip_scale.py [--sizes 16 32 64 128] [--model smollm2-lora | smollm2-full | small-lora]

Every client holds a copy of the shared tensors (LoRA r=8 on SmolLM2-135M's 7 linear layers x 30
blocks: 2.4M values, or a small stand-in shape of 2 blocks); one gossip round is DSGD's mixing, CHOCO-SGD's
compressed exchange (top-10% values + positions: a bitmask, gamma 0.2) or SeedFlood's flooding of one
(seed, scalar) message per client plus applying the messages that arrived. No GRPO step runs here: this
is the cost of the communication layer that the decentralized methods add (pubswap/algorithms/gossip.py), in one
process. Memory per client: the tensors it must keep (its x; CHOCO also the public copies of itself
and its neighbours).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pubswap.algorithms.gossip import Choco, SeedMessage, apply_messages, flood, flood_period, mix, top_k  # noqa: E402
from pubswap.algorithms.topology import make_topology  # noqa: E402

MODELS = {  # name -> list of (rows, cols) LoRA tensors
    "smollm2-lora": [
        s
        for _ in range(30)
        for d, m in ((576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536))
        for s in ((8, m), (d, 8))
    ],
    # every weight of SmolLM2-135M (tied embeddings; norms as (576, 1)): 134.5M values, 513 MiB a client
    "smollm2-full": [(49152, 576), (576, 1)]
    + [
        s
        for _ in range(30)
        for s in (
            (576, 576),
            (192, 576),
            (192, 576),
            (576, 576),
            (1536, 576),
            (1536, 576),
            (576, 1536),
            (576, 1),
            (576, 1),
        )
    ],
    "small-lora": [
        s for _ in range(2) for d, m in ((64, 64),) * 4 + ((128, 64), (128, 64), (64, 128)) for s in ((8, m), (d, 8))
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=[16, 32, 64, 128])
    ap.add_argument("--model", default="smollm2-lora", choices=list(MODELS))
    ap.add_argument("--mem-gib", type=float, default=20.0, help="full models: skip what needs more memory than this")
    args = ap.parse_args()
    shapes = MODELS[args.model]
    values = sum(r * c for r, c in shapes)
    mib = 2**20
    print(
        f"{args.model}: {len(shapes)} tensors, {values / 1e6:.2f}M fp32 values ({values * 4 / mib:.1f} MiB) per client"
    )
    if args.model.endswith("-full"):
        return full_model(shapes, values, args.sizes, args.mem_gib)
    print(
        f"{'clients':>7} {'topology':>9} {'method':>10} {'s/round':>8} {'ms/client':>9} {'MiB held/client':>15} "
        f"{'bytes sent/client':>17} {'diam':>4} {'gap':>7}"
    )
    for n in args.sizes:
        gen = torch.Generator().manual_seed(0)
        xs = [{f"t{i}": torch.randn(s, generator=gen) * 0.01 for i, s in enumerate(shapes)} for _ in range(n)]
        for kind in ("ring", "meshgrid"):
            g = make_topology(kind, n)
            W = g.mixing()
            deg = sum(len(nb) for nb in g.neighbours) / n
            rows = []
            t = time.perf_counter()
            mix(W, xs, g)
            rows.append(("dsgd", time.perf_counter() - t, values * 4, values * 4 * deg))
            choco = Choco(g, gamma=0.2, compress=top_k(0.1))
            choco.step(xs, 0)  # the first exchange fills the public copies
            t = time.perf_counter()
            _, sent = choco.step(xs, 1)
            rows.append(("chocosgd", time.perf_counter() - t, values * 4 * (2 + deg), sum(sent) / n))
            held = [set() for _ in range(n)]
            fresh = [set() for _ in range(n)]
            t = time.perf_counter()
            sent = flood(g, [[SeedMessage(0, i, i, 1e-3)] for i in range(n)], held, fresh)
            for i in range(n):  # each client applies what reached it this round
                apply_messages(xs[i], [m for m in held[i]])
            rows.append(("seedflood", time.perf_counter() - t, values * 4, sum(sent) / n))
            for method, secs, mem, sent_b in rows:
                print(
                    f"{n:>7} {kind:>9} {method:>10} {secs:>8.2f} {1000 * secs / n:>9.1f} {mem / mib:>15.1f} "
                    f"{sent_b:>17,.0f} {g.diameter():>4} {g.spectral_gap():>7.4f}"
                )


def full_model(shapes: list[tuple[int, int]], values: int, sizes: list[int], mem_gib: float) -> None:
    """Every weight of the model. DSGD and CHOCO hold n copies (CHOCO also 2 + degree public copies a
    client) and are only reported when that fits in `mem_gib`; SeedFlood is measured as the actors run
    it: the clients of an actor share one copy between floods, and a flood's cost is applying the n
    messages of a step (one Gaussian direction over all weights regenerated per message).
    "GiB needed": all n clients' copies for DSGD / CHOCO, in one process; for SeedFlood an actor's
    shared copy and the copy a flood builds."""
    gib = 2**30
    print(
        f"{'clients':>7} {'topology':>9} {'method':>10} {'s/flood':>8} {'ms/client':>9} {'GiB needed':>14} "
        f"{'bytes sent/client':>17} {'diam':>4}"
    )
    gen = torch.Generator().manual_seed(0)
    x = {f"t{i}": torch.randn(s, generator=gen) * 0.01 for i, s in enumerate(shapes)}
    for n in sizes:
        for kind in ("ring", "meshgrid"):
            g = make_topology(kind, n)
            deg = sum(len(nb) for nb in g.neighbours) / n
            for method, copies in (("dsgd", 2 * n), ("chocosgd", n * (3 + deg))):
                need = copies * values * 4 / gib
                if need > mem_gib:
                    print(
                        f"{n:>7} {kind:>9} {method:>10} {'-':>8} {'-':>9} {need:>14.1f} "
                        f"{f'(does not fit in {mem_gib:g} GiB)':>17} {g.diameter():>4}"
                    )
                elif method == "dsgd":
                    xs = [{k: v + 1e-4 * i for k, v in x.items()} for i in range(n)]
                    t = time.perf_counter()
                    mixed = mix(g.mixing(), xs, g)
                    secs = time.perf_counter() - t
                    del xs, mixed
                    print(
                        f"{n:>7} {kind:>9} {method:>10} {secs:>8.1f} {1000 * secs / n:>9.0f} {need:>14.1f} "
                        f"{values * 4 * deg:>17,.0f} {g.diameter():>4}",
                        flush=True,
                    )
                else:
                    raise SystemExit(f"--mem-gib {mem_gib}: measuring {method} at this size is not implemented")
            hops, sent, _ = flood_period(g, [[SeedMessage(1, i, i, 1e-3)] for i in range(n)])
            t = time.perf_counter()
            apply_messages(x, [SeedMessage(1, i, i, 1e-3) for i in range(n)])
            secs = time.perf_counter() - t
            print(
                f"{n:>7} {kind:>9} {'seedflood':>10} {secs:>8.1f} {1000 * secs / n:>9.0f} "
                f"{2 * values * 4 / gib:>14.1f} "
                f"{sum(sent) / n:>17,.0f} {g.diameter():>4}",
                flush=True,
            )


if __name__ == "__main__":
    main()
