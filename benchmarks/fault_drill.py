"""Fault drill: run a config uninterrupted, then once per injected fault, and compare final adapters.

    python benchmarks/fault_drill.py --config configs/X.yaml [--faults private,public,average,driver] \\
        [dotted.key=value ...]

Each run is a real `python -m jobs.train` process on its own local Ray, in its own run dir under
--out. Faults (all in the last round, client 1 or the driver):
  private  client 1 SIGKILLed in local step 1, after its rollouts, before training
  public   client 1 SIGKILLed in the first public step, after answering, before the swap
  average  client 1 SIGKILLed just before the allreduce
  driver   the driver SIGKILLed before step 2, then the same command run again (a resume)
Prints, per fault: recoveries logged, max |delta| over all adapter tensors, and whether the weights file
is bitwise identical (same sha256) to the uninterrupted run's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pubswap.config import load_config  # noqa: E402
from pubswap.run.checkpoint import latest_checkpoint  # noqa: E402
from pubswap.run.faults import ENV  # noqa: E402


def run(cfg_path: Path, fault: dict | None, fault_file: Path, log: Path) -> tuple[int, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", ENV)}
    if fault:
        fault_file.write_text(json.dumps(fault))
        env[ENV] = str(fault_file)
    t = time.perf_counter()
    with open(log, "a") as fh:
        proc = subprocess.run(
            [sys.executable, "-m", "jobs.train", "--config", str(cfg_path)],
            cwd=REPO,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    return proc.returncode, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--faults", default="private,public,average,driver")
    ap.add_argument("--out", default="runs/fault_drill")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    base = load_config(args.config, args.overrides)
    f = base.federation
    last = f.rounds
    public = next((s for s in range(1, f.tau + 1) if f.is_public_step(s)), None)
    specs = {
        "private": {"who": "client", "client": 1, "round": last, "step": 1, "phase": "private_train"},
        "public": {"who": "client", "client": 1, "round": last, "step": public, "phase": "public_answer"},
        "average": {"who": "client", "client": 1, "round": last, "step": 0, "phase": "average"},
        "driver": {"who": "driver", "round": last, "step": min(2, f.tau), "phase": "step"},
    }
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in ["reference", *args.faults.split(",")]:
        if name == "public" and public is None:
            continue
        cfg = load_config(args.config, [*args.overrides, f"run_dir={out / name}"])
        cfg_path = out / f"{name}.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg.to_dict()))
        log = out / f"{name}.log"
        rc, secs = run(cfg_path, specs.get(name), out / f"{name}.fault.json", log)
        if name == "driver":
            rc2, secs2 = run(cfg_path, None, out / "unused.json", log)
            rc, secs = (rc2 if rc == -9 else 1), secs + secs2
        if rc != 0:
            print(f"{name}: the run failed (exit {rc}); see {log}", file=sys.stderr)
            return 1
        ck = latest_checkpoint(out / name / "checkpoints")
        records = [json.loads(x) for x in (out / name / "metrics.jsonl").read_text().splitlines()]
        results.append((name, ck, sum(r.get("recoveries", 0) for r in records), secs))
    ref = results[0][1]
    ref_adapter = ref.adapter()
    print(f"{'fault':<10}{'recoveries':>11}{'max |delta|':>14}{'bitwise':>9}{'wall s':>9}")
    for name, ck, recoveries, secs in results:
        adapter = ck.adapter()
        delta = max((adapter[k].float() - ref_adapter[k].float()).abs().max().item() for k in ref_adapter)
        same = ck.state["weights_sha256"] == ref.state["weights_sha256"]
        print(f"{name:<10}{recoveries:>11}{delta:>14.3e}{str(same):>9}{secs:>9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
