"""Serverless training at 16-128 logical clients: one round of GRPO + gossip, end to end through Ray.

    python benchmarks/decentralized_scale.py [--sizes 16 32 64 128] [--actors 2]

The tiny digit model of the tests (built here in a second; LoRA r=8: 32,768 values, 128 KiB per client;
all its weights: 382,592 values, 1.5 MiB), HF rollouts, one local GRPO step (b=1 prompt x K=2) and one
gossip per round, no evaluation, on a fresh local Ray with the clients multiplexed on --actors actors,
for every decentralized method: dsgd-lora, chocosgd-lora, and the full-parameter dsgd, chocosgd and
seedflood (a zeroth-order step, then a flood of the (seed, scalar) messages). Per (size, topology, method): the round's
wall time, the part of it spent in gossip (payload + apply: the actors' "avg" phase, mean over actors), the
peak node memory the run added per client, and the bytes each client sent and received (mean).
SmolLM2-135M does not fit this table's time on 2 cores (one GRPO step per client is ~15 s, so 128
clients would take half an hour a round); its gossip layer alone is benchmarks/gossip_scale.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from scaling import PeakMemory  # noqa: E402

from jobs.train import build_split  # noqa: E402
from pubswap.config import load_config  # noqa: E402
from pubswap.methods import RoundContext  # noqa: E402
from pubswap.run.timing import breakdown  # noqa: E402


def one(model_dir: Path, out: Path, n: int, topology: str, method: str, actors: int) -> dict:
    import ray

    from jobs.federation import Federation
    from jobs.train import init_ray

    tasks = "data.tasks={basic_arithmetic: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}"
    cfg = load_config(
        None,
        [
            f"model.path={model_dir}",
            "model.dtype=float32",
            "model.max_prompt_len=96",
            "model.max_response_len=1",
            "lora.r=8",
            "lora.alpha=16",
            "grpo.K=2",
            "grpo.b=1",
            "data.reward_mode=lenient",
            tasks,
            "data.per_client=4",
            "data.public_size=4",
            "data.test_size=4",
            "rollout.backend=hf",
            "resources.cpus_per_client=0.5",
            f"resources.num_actors={actors}",
            f"federation.method={method}",
            f"federation.num_clients={n}",
            f"federation.topology={topology}",
            "federation.rounds=1",
            "federation.tau=1",
            f"run_dir={out / f'{method}_{topology}_{n}'}",
        ],
    )
    split = build_split(cfg, str(model_dir))
    mem = PeakMemory()
    init_ray()
    try:
        fed = Federation(cfg, split, str(model_dir), cfg.run_dir)
        start = fed.initial_adapter()
        fed.set_global(start)
        t = time.perf_counter()
        # steps and gossip (no evaluation)
        record, _, _ = cfg.federation.family.run_round(fed, cfg, 1, start, RoundContext(t))
        round_s = time.perf_counter() - t
        record["time"] = breakdown(fed.take_timing(), fed.calls_s, round_s)
        fed.shutdown()
    finally:
        ray.shutdown()
    gib = mem.stop()
    b = record["bytes"]
    return {
        "n": n,
        "topology": topology,
        "method": method,
        "round_s": round_s,
        "gossip_s": record["time"].get("avg_s", 0.0),
        "mib_per_client": gib * 1024 / n,
        "sent": sum(b["upload"]) / n,
        "received": sum(b["download"]) / n,
        "consensus": record["consensus"][-1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=[16, 32, 64, 128])
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--methods", nargs="*", default=["dsgd-lora", "chocosgd-lora", "dsgd", "chocosgd", "seedflood"])
    args = ap.parse_args()
    from tiny_model import build_tiny_model

    out = Path(tempfile.mkdtemp(prefix="decentral_scale_"))
    model_dir = build_tiny_model(out / "model", digits_only=True)
    print(
        f"{'clients':>7} {'topology':>9} {'method':>13} {'round s':>8} {'gossip s':>8} {'MiB/client':>10} "
        f"{'sent B/client':>13} {'recv B/client':>13} {'consensus':>10}",
        flush=True,
    )
    for n in args.sizes:
        for topology in ("ring", "meshgrid"):
            for method in args.methods:
                r = one(model_dir, out, n, topology, method, args.actors)
                print(
                    f"{n:>7} {topology:>9} {method:>13} {r['round_s']:>8.1f} {r['gossip_s']:>8.2f} "
                    f"{r['mib_per_client']:>10.1f} {r['sent']:>13,.0f} {r['received']:>13,.0f} "
                    f"{r['consensus']:>10.2e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
