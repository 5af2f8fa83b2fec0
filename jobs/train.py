"""The round driver, a Ray Job entrypoint.

    python -m jobs.train --config configs/default.yaml [dotted.key=value ...]      # starts a local Ray
    ray job submit --working-dir . -- python -m jobs.train --config configs/X.yaml run_dir=/shared/runs/X

One round (DESIGN.md): broadcast the global adapter; tau local steps, every swap_period-th a public
step for PubSwap methods; average the adapters (allreduce among clients); save the global adapter;
evaluate pass@1 on the server's test set; append one line to metrics.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from pubswap.config import ConfigError, RunConfig, load_config
from pubswap.data import dirichlet_split, format_histogram
from pubswap.data.reasoning_gym_tasks import reasoning_gym_rows
from pubswap.data.split import FederatedSplit
from pubswap.models import resolve_model


def build_split(cfg: RunConfig) -> FederatedSplit:
    d, f = cfg.data, cfg.federation
    if d.source != "reasoning_gym":
        raise ConfigError(f"data.source: {d.source!r} is not available yet (only 'reasoning_gym')")
    total = f.num_clients * d.per_client + d.public_size + d.test_size
    # twice what is needed per task, so a skewed Dirichlet prior does not exhaust a topic at once
    rows, report = reasoning_gym_rows(d.tasks, -(-2 * total // len(d.tasks)), cfg.seed)
    if report.total_rejected:
        print(f"data: {report}", flush=True)
    return dirichlet_split(rows, f.num_clients, d.per_client, d.dirichlet_alpha, d.public_size, d.test_size, cfg.seed)


def init_ray() -> None:
    import ray

    if ray.is_initialized():
        return
    env = {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": os.environ.get(
        "VLLM_CPU_KVCACHE_SPACE", "1"), "PYTHONUNBUFFERED": "1",
                         # fewer glibc malloc arenas: multi-threaded torch processes hold less idle RSS
                         "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2")}}
    if os.environ.get("RAY_ADDRESS"):
        ray.init(runtime_env=env)  # inside `ray job submit`, or a user-chosen cluster
    else:
        ray.init(runtime_env=env, include_dashboard=False)


def _step_line(r: int, rounds: int, s: int, tau: int, out: dict, elapsed: float) -> str:
    clients = out["clients"]
    rewards = " ".join(f"{c['reward_mean']:.2f}" for c in clients)
    kind = "public " if out["public"] else "private"
    extra = f" swapped_in {out['swapped_in']}" if out["public"] else ""
    gen = max(c["gen_s"] for c in clients)
    train = max(c["train_s"] for c in clients)
    return (f"round {r}/{rounds} step {s}/{tau} {kind} reward [{rewards}]{extra} "
            f"gen {gen:.1f}s train {train:.1f}s ({elapsed:.0f}s total)")


def train(cfg: RunConfig) -> dict:
    """Run the configured rounds; returns {'base_pass@1', 'final_pass@1', 'run_dir', 'wall_s'}."""
    import ray

    from jobs.federation import Federation, mean
    from pubswap.lora import num_bytes

    t0 = time.perf_counter()
    run_dir = Path(cfg.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    model_dir = resolve_model(cfg.model.path, run_dir.parent / "_models")
    split = build_split(cfg)
    print(f"run dir: {run_dir}\nmodel: {model_dir}\nclient topic split (Dirichlet alpha={cfg.data.dirichlet_alpha}):\n"
          f"{format_histogram(split)}", flush=True)

    init_ray()
    f = cfg.federation
    fed = Federation(cfg, split, model_dir, str(run_dir))
    metrics_path = run_dir / "metrics.jsonl"
    metrics_path.write_text("")
    try:
        global_adapter = fed.initial_adapter()
        adapter_bytes = num_bytes(global_adapter)
        lora_config = ray.get(fed.clients[0].lora_config.remote())
        fed.set_global(global_adapter)
        base_pass, n_eval = fed.evaluate(0)
        print(f"base model pass@1 = {base_pass:.3f} on {n_eval} test prompts ({time.perf_counter() - t0:.0f}s)",
              flush=True)
        final_pass = base_pass
        for r in range(1, f.rounds + 1):
            # every client already holds the global adapter with a fresh optimizer: the broadcast
            # before the base evaluation (round 1) or the allreduce that ended the previous round
            t_round = time.perf_counter()
            steps = []
            for s in range(1, f.tau + 1):
                out = fed.public_step(r, s) if f.is_public_step(s) else fed.private_step(r, s)
                steps.append(out)
                print(_step_line(r, f.rounds, s, f.tau, out, time.perf_counter() - t0), flush=True)
            global_adapter, avg = fed.average()
            fed.save_global(global_adapter, r, lora_config)
            record = {"round": r, "steps": steps, "drift_sq": [a["drift_sq"] for a in avg]}
            if r % cfg.eval_every == 0 or r == f.rounds:
                final_pass, _ = fed.evaluate(r)
                record["pass@1"] = final_pass
            n = f.num_clients
            gen_s = sum(max(c["gen_s"] for c in st["clients"]) for st in steps)
            train_s = sum(max(c["train_s"] for c in st["clients"]) for st in steps)
            round_s = time.perf_counter() - t_round
            record["time"] = {"round_s": round_s, "gen_s": gen_s, "train_s": train_s,
                              "other_s": round_s - gen_s - train_s}
            record["bytes"] = {"adapter": adapter_bytes, "broadcast": n * adapter_bytes,
                               "allreduce": 2 * (n - 1) * adapter_bytes,
                               "public_pool": 2 * sum(st.get("pool_bytes", 0) for st in steps)}
            record["reward_mean"] = [mean([st["clients"][i]["reward_mean"] for st in steps]) for i in range(n)]
            with metrics_path.open("a") as fh:
                fh.write(json.dumps(record) + "\n")
            pass_txt = f" pass@1 {record['pass@1']:.3f}" if "pass@1" in record else ""
            print(f"round {r}/{f.rounds} done in {round_s:.0f}s (gen {gen_s:.0f}s, train {train_s:.0f}s, "
                  f"other {round_s - gen_s - train_s:.0f}s) drift {mean(record['drift_sq']):.2e}{pass_txt}",
                  flush=True)
    finally:
        fed.shutdown()
    wall = time.perf_counter() - t0
    summary = {"base_pass@1": base_pass, "final_pass@1": final_pass, "run_dir": str(run_dir), "wall_s": wall}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"base pass@1 {base_pass:.3f} -> final pass@1 {final_pass:.3f} in {wall:.0f}s; run dir {run_dir}",
          flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Federated GRPO / PubSwap round driver")
    parser.add_argument("--config", default=None, help="YAML config file")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. federation.tau=4")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
