"""`ray job submit --working-dir . -- python -m jobs.train ...` against a local `ray start --head`."""

import json
import os
import subprocess
import sys

from ray_helpers import REPO, ray_cli, tiny_config, write_config


def test_ray_job_submit_runs_the_driver(ray_head, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    cfg = tiny_config(tiny_model_dir, run_dir, "federation.rounds=1", "federation.method=pubswap-balanced")
    # the head runs with Ray's token auth; the CLI sends ~/.ray/auth_token only in token mode
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_AUTH_MODE": "token"}
    proc = subprocess.run(
        [ray_cli(), "job", "submit", f"--address={ray_head}", f"--working-dir={REPO}", "--",
         sys.executable, "-m", "jobs.train", "--config", str(write_config(cfg))],
        capture_output=True, text=True, env=env, timeout=900, cwd=REPO,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "succeeded" in proc.stdout.lower()
    assert "round 1/1 step 2/4 public" in proc.stdout
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1]
    assert json.loads((run_dir / "summary.json").read_text())["final_pass@1"] == records[0]["pass@1"]
