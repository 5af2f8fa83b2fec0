"""`ray job submit --working-dir . -- python -m jobs.train ...` against a local `ray start --head`."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from ray_helpers import tiny_config

REPO = Path(__file__).resolve().parents[1]


def ray_cli() -> str:
    exe = Path(sys.executable).with_name("ray")
    return str(exe) if exe.exists() else shutil.which("ray")


@pytest.fixture
def head():
    port, dash = 6390, 8275
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths must fit 107 chars
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    subprocess.run([ray_cli(), "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=true",
                    f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1", f"--temp-dir={temp_dir}"],
                   check=True, capture_output=True, env=env, timeout=180)
    try:
        yield f"http://127.0.0.1:{dash}"
    finally:
        subprocess.run([ray_cli(), "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_ray_job_submit_runs_the_driver(head, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    cfg = tiny_config(tiny_model_dir, run_dir, "federation.rounds=1", "federation.method=pubswap-balanced")
    cfg_path = tmp_path / "job.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg.to_dict()))
    # the head runs with Ray's token auth; the CLI sends ~/.ray/auth_token only in token mode
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_AUTH_MODE": "token"}
    proc = subprocess.run(
        [ray_cli(), "job", "submit", f"--address={head}", f"--working-dir={REPO}", "--",
         sys.executable, "-m", "jobs.train", "--config", str(cfg_path)],
        capture_output=True, text=True, env=env, timeout=900, cwd=REPO,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "succeeded" in proc.stdout.lower()
    assert "round 1/1 step 2/4 public" in proc.stdout
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1]
    assert json.loads((run_dir / "summary.json").read_text())["final_pass@1"] == records[0]["pass@1"]
