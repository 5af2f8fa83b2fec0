"""`ray job submit --working-dir . -- python -m jobs.train ...` against a local `ray start --head`."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from ray_helpers import REPO, ft_config, metrics, ray_cli, run_processes, tiny_config, write_config
from test_multinode import ppid


@pytest.mark.heavy
def test_ray_job_submit_runs_the_driver(ray_head, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    cfg = tiny_config(tiny_model_dir, run_dir, "federation.rounds=1", "federation.method=pubswap-balanced")
    # the head runs with Ray's token auth; the CLI sends ~/.ray/auth_token only in token mode
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_AUTH_MODE": "token"}
    proc = subprocess.run(
        [
            ray_cli(),
            "job",
            "submit",
            f"--address={ray_head}",
            f"--working-dir={REPO}",
            "--",
            sys.executable,
            "-m",
            "jobs.train",
            "--config",
            str(write_config(cfg)),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "succeeded" in proc.stdout.lower()
    assert "round 1/1 step 2/4 public" in proc.stdout
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1]
    assert json.loads((run_dir / "summary.json").read_text())["final_pass@1"] == records[0]["pass@1"]


def _job_env() -> dict:
    return {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_AUTH_MODE": "token"}


def _submit(address: str, config) -> str:
    """`ray job submit --no-wait`; the job's id."""
    proc = subprocess.run(
        [
            ray_cli(),
            "job",
            "submit",
            f"--address={address}",
            f"--working-dir={REPO}",
            "--no-wait",
            "--",
            sys.executable,
            "-m",
            "jobs.train",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        env=_job_env(),
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return re.search(r"raysubmit_\w+", proc.stdout + proc.stderr).group(0)


def _job_status(address: str, job_id: str) -> str:
    proc = subprocess.run(
        [ray_cli(), "job", "status", f"--address={address}", job_id],
        capture_output=True,
        text=True,
        env=_job_env(),
        timeout=60,
    )
    # e.g. "Job 'raysubmit_..' failed", "Job 'raysubmit_..' was stopped"
    found = re.search(r"Job '\w+' ([a-z ]+)", re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr))
    assert found, (proc.stdout[:1000], proc.stderr[:1000])
    return found.group(1)


def _driver_of(config, timeout_s: float = 180.0) -> int:
    """The pid of the job's Python driver (found in the process table by its config path)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid, cmd in _processes().items():
            if "-m jobs.train --config " + str(config) in cmd and not cmd.startswith("/bin/sh"):
                return pid
        time.sleep(0.5)
    raise AssertionError("the job's driver never started")


def _processes() -> dict[int, str]:
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out[int(pid)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            pass
    return out


def _wait_rounds(run_dir, n: int, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    path = run_dir / "metrics.jsonl"
    while not (path.exists() and len(path.read_text().splitlines()) >= n):
        assert time.monotonic() < deadline, f"{n} rounds not committed within {timeout_s:.0f}s"
        time.sleep(0.5)


def _run_processes_gone_within(started: set[int], seconds: float) -> dict[int, str]:
    """The run's processes (driver, actors) still alive `seconds` after now; empty when all exited."""
    t = time.monotonic()
    while (left := {p: c for p, c in run_processes().items() if p in started}) and time.monotonic() < t + seconds:
        time.sleep(0.5)
    print(f"{len(started)} processes of the run: {len(left)} left after {time.monotonic() - t:.1f}s")
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    return left


def test_a_stopped_or_failed_job_leaves_nothing_running(ray_head, digit_model_dir, tmp_path):
    """From outside, three times on one run: the job's entrypoint shell is SIGKILLed (Ray marks the job
    FAILED, the Python driver is orphaned); the resubmitted job is stopped with `ray job stop`; the driver
    of a third submission is SIGKILLed. Each time the driver and every actor of the run are gone within
    30 s, and each submission resumes after the last committed round."""
    cfg = ft_config(digit_model_dir, tmp_path / "run", "federation.rounds=100")
    config = write_config(cfg)
    run_dir = tmp_path / "run"

    job = _submit(ray_head, config)
    driver = _driver_of(config)
    shell = ppid(driver)
    assert _processes()[shell].startswith("/bin/sh -c")
    _wait_rounds(run_dir, 1)
    ours = {p for p, c in run_processes().items() if "ray::ClientActor" in c or "ray::ServerActor" in c}
    assert len([p for p in ours if "ClientActor" in _processes().get(p, "")]) == 2
    os.kill(shell, signal.SIGKILL)
    assert not _run_processes_gone_within(ours | {driver}, 30)
    assert _job_status(ray_head, job) == "failed"
    assert not (run_dir / "LEASE").exists()
    done = len(metrics(run_dir))

    job = _submit(ray_head, config)  # resumes the same run_dir
    driver = _driver_of(config)
    _wait_rounds(run_dir, done + 1)
    ours = {p for p, c in run_processes().items() if "ray::ClientActor" in c or "ray::ServerActor" in c}
    stop = subprocess.run(
        [ray_cli(), "job", "stop", f"--address={ray_head}", job],
        capture_output=True,
        text=True,
        env=_job_env(),
        timeout=120,
    )
    assert stop.returncode == 0, stop.stderr[-2000:]
    assert not _run_processes_gone_within(ours | {driver}, 30)
    assert _job_status(ray_head, job) == "was stopped"
    assert not (run_dir / "LEASE").exists()
    rounds = [r["round"] for r in metrics(run_dir)]
    assert rounds == list(range(1, len(rounds) + 1)) and done < len(rounds) < 100  # whole rounds, resumed once
    done = len(rounds)

    # the driver itself SIGKILLed (as when its node goes away): no cleanup runs, Ray ends the job's actors
    job = _submit(ray_head, config)
    driver = _driver_of(config)
    _wait_rounds(run_dir, done + 1)
    ours = {p for p, c in run_processes().items() if "ray::ClientActor" in c or "ray::ServerActor" in c}
    os.kill(driver, signal.SIGKILL)
    assert not _run_processes_gone_within(ours | {driver}, 30)
    assert _job_status(ray_head, job) == "failed"
    assert json.loads((run_dir / "LEASE").read_text())["pid"] == driver  # left for the next driver to take over
