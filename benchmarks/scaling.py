"""Scaling benchmark: one round with N logical clients, multiplexed on a few actors vs one actor per client.

    python benchmarks/scaling.py [--clients 2,4,8,16,32] [--actors 2] [--config configs/default.yaml]
                                 [dotted.key=value ...]

For each N it runs one round (tau local steps, a public step among them, the allreduce; no evaluation)
on a fresh local Ray: N clients on min(--actors, N/2) actors, and, where it fits in memory, N actors
of one client each. It prints the round's wall time, the time per client, the round's gen/train seconds as
the driver logs them (per step the slowest client's, summed over steps: clients of one actor train
one after another, so this understates an actor's training time), the peak node memory added by the
run (sampled every 0.5 s) and that memory per logical client. One actor per client is skipped when
N x (memory of one actor, measured in the multiplexed run) would exceed 80% of the machine's memory.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobs.train import build_split  # noqa: E402
from pubswap.config import load_config  # noqa: E402
from pubswap.methods import RoundContext  # noqa: E402
from pubswap.models import resolve_model  # noqa: E402
from pubswap.run.timing import breakdown  # noqa: E402


class PeakMemory:
    """Peak of the node's used memory above the level when started, sampled in a thread."""

    def __init__(self, interval_s: float = 0.5):
        self.base = psutil.virtual_memory().used
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.peak = max(self.peak, psutil.virtual_memory().used)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return (self.peak - self.base) / 2**30


def one_round(config: str, overrides: list[str], n: int, actors: int, out: Path) -> dict:
    import ray

    from jobs.federation import Federation
    from jobs.train import init_ray

    cpus = psutil.cpu_count() or 1
    cfg = load_config(
        config,
        [
            *overrides,
            f"federation.num_clients={n}",
            f"resources.num_actors={actors}",
            f"run_dir={out / f'n{n}_a{actors}'}",
            "federation.rounds=1",
        ],
    )
    cfg.resources.cpus_per_client = min(cfg.resources.cpus_per_client, cpus / actors)  # all actors fit the node
    cfg.data.per_client = max(8, min(cfg.data.per_client, 2000 // n))  # enough rows for every client, cheaply
    model_dir = resolve_model(cfg.model.path, out / "_models")
    split = build_split(cfg, model_dir)
    mem = PeakMemory()
    t0 = time.perf_counter()
    init_ray()
    try:
        fed = Federation(cfg, split, model_dir, str(out / f"n{n}_a{actors}"))
        start_s = time.perf_counter() - t0
        g = fed.initial_adapter()
        fed.set_global(g)
        t = time.perf_counter()
        # the round's training work and average (no evaluation)
        record, _, _ = cfg.federation.family.run_round(fed, cfg, 1, g, RoundContext(t))
        round_s = time.perf_counter() - t
        record["time"] = breakdown(fed.take_timing(), fed.calls_s, round_s)
        fed.shutdown()
    finally:
        ray.shutdown()
    gib = mem.stop()
    return {
        "n": n,
        "actors": len(fed.actors),
        "start_s": start_s,
        "round_s": round_s,
        "per_client_s": round_s / n,
        "gen_s": record["time"]["gen_s"],
        "train_s": record["time"]["train_s"],
        "mem_gib": gib,
        "mem_per_client_gib": gib / n,
    }


def attempt(config: str, overrides: list[str], n: int, actors: int, out: Path) -> dict:
    """one_round, or a row that says why it failed (an OOM-killed actor, a placement error)."""
    try:
        return one_round(config, overrides, n, actors, out)
    except Exception as e:  # a benchmark row, not a crash of the whole table
        return {"n": n, "skip": f"{actors} actors failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    ap.add_argument("--clients", default="2,4,8,16,32")
    ap.add_argument("--actors", type=int, default=2, help="actors in the multiplexed runs")
    ap.add_argument("--out", default="runs/scaling")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    out = Path(args.out).resolve()
    total_gib = psutil.virtual_memory().total / 2**30
    rows = []
    for n in (int(x) for x in args.clients.split(",")):
        # at least 2 clients per actor, so even the smallest N compares sharing an actor with not sharing
        mux = attempt(args.config, args.overrides, n, max(1, min(args.actors, n // 2)), out)
        rows.append(("multiplexed", mux))
        if "skip" in mux:
            print_table(rows)
            continue
        per_actor = mux["mem_gib"] / mux["actors"]
        if n * per_actor <= 0.8 * total_gib:
            rows.append(("1 per actor", attempt(args.config, args.overrides, n, n, out)))
        else:
            rows.append(("1 per actor", {"n": n, "skip": f"~{n * per_actor:.0f} GiB > 80% of {total_gib:.0f} GiB"}))
        print_table(rows)
    return 0


def print_table(rows) -> None:
    print(
        f"\n{'clients':>7} {'layout':<12} {'actors':>6} {'start s':>8} {'round s':>8} {'s/client':>9} "
        f"{'gen s':>6} {'train s':>8} {'mem GiB':>8} {'GiB/client':>10}"
    )
    for layout, r in rows:
        if "skip" in r:
            print(f"{r['n']:>7} {layout:<12} {'-':>6}  skipped: {r['skip']}")
            continue
        print(
            f"{r['n']:>7} {layout:<12} {r['actors']:>6} {r['start_s']:>8.0f} {r['round_s']:>8.1f} "
            f"{r['per_client_s']:>9.2f} {r['gen_s']:>6.1f} {r['train_s']:>8.1f} {r['mem_gib']:>8.2f} "
            f"{r['mem_per_client_gib']:>10.3f}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
