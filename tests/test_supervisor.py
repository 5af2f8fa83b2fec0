"""jobs.supervise resubmits a failed training job to a local `ray start --head`; the rerun resumes."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_helpers import REPO, final_sha, ft_config, metrics, write_config
from tcp_proxy import TcpProxy

from jobs import supervise
from pubswap.run.faults import ENV as FAULT_ENV


@pytest.fixture
def token_auth():
    """Ray's token auth for this process's Jobs API calls (the locally started head uses it). Ray reads
    RAY_AUTH_MODE into its config once per process, so the config is refreshed, as Ray itself does when
    it turns token auth on (an earlier test in the same process may have read it unset: the calls then
    went out without the token), and refreshed again after the test with the variable restored."""
    from ray._raylet import Config

    before = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "token"
    Config.initialize("")
    yield
    if before is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = before
    Config.initialize("")


@pytest.mark.heavy  # ~39 s
def test_supervisor_resubmits_a_killed_driver_which_resumes_to_the_reference(
    ray_head, token_auth, ft_reference, digit_model_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = ft_config(digit_model_dir, tmp_path / "run")
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"who": "driver", "round": 2, "step": 1, "phase": "step"}))
    rc = supervise.main(
        [
            "--address",
            ray_head,
            "--working-dir",
            str(REPO),
            "--max-retries",
            "2",
            "--poll-s",
            "1",
            "--name",
            "sup-test",
            "--env",
            f"{FAULT_ENV}={fault}",
            "--",
            sys.executable,
            "-m",
            "jobs.train",
            "--config",
            str(write_config(cfg)),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert "job sup-test-0 failed" in out and "attempt 2/3: submitted job sup-test-1" in out
    assert "job sup-test-1 succeeded after 2 attempt(s)" in out and "sup-test-2" not in out
    assert "resuming after round 1" in out
    assert [r["round"] for r in metrics(cfg.run_dir)] == [1, 2]
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)
    # a driver that exits 2 (bad input: here a config error) is not resubmitted: it would fail the same way
    rc = supervise.main(
        [
            "--address",
            ray_head,
            "--working-dir",
            str(REPO),
            "--max-retries",
            "2",
            "--poll-s",
            "1",
            "--name",
            "sup-bad",
            "--",
            sys.executable,
            "-m",
            "jobs.train",
            "--config",
            str(write_config(cfg)),
            "grpo.K=0",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1 and "config error: grpo.K" in out and "exited with 2" in out, out[-3000:]
    assert "sup-bad-1" not in out


def test_supervisor_refuses_a_relative_run_dir(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        supervise.main(["--", sys.executable, "-m", "jobs.train", "run_dir=runs/x"])
    assert e.value.code == 2 and "run_dir=s3://bucket/prefix (or an absolute path" in capsys.readouterr().err
    assert supervise.run_dir_of(["x", "run_dir=s3://b/runs/x"], tmp_path) == "s3://b/runs/x"
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(f"run_dir: {tmp_path}/abs\n")
    assert (
        supervise.run_dir_of(["python", "-m", "jobs.train", "--config", str(cfg_file)], tmp_path) == f"{tmp_path}/abs"
    )
    assert supervise.run_dir_of(["x", "--config", str(cfg_file), "run_dir=/o"], tmp_path) == "/o"


def test_a_resubmission_resumes_instead_of_starting_over_again():
    first = "python -m jobs.train --config 'configs/a b.yaml' --start-over run_dir=s3://b/x"
    assert supervise.retry_entrypoint(first) == "python -m jobs.train --config 'configs/a b.yaml' run_dir=s3://b/x"
    plain = "python -m jobs.train --config configs/x.yaml"
    assert supervise.retry_entrypoint(plain) == plain
    assert 4 in supervise.FINAL_EXIT_CODES  # a full disk is not retried blindly


COUNT = "import sys, time\nfor i in range({n}):\n    print(f'line {{i}}', flush=True)\n    time.sleep({dt})\n"


def _supervisor(address: str, work: Path, name: str, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-u",
        "-m",
        "jobs.supervise",
        "--address",
        address,
        "--working-dir",
        str(work),
        "--name",
        name,
        "--poll-s",
        "0.5",
        *extra,
        "--",
        "python",
        "count.py",
        f"run_dir={work}/run",
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen) -> str:
    """The rest of its output (read through the same buffer as _read_until) once it exits."""
    rest = proc.stdout.read()
    proc.wait(timeout=60)
    return rest


def _read_until(proc: subprocess.Popen, marker: str, seen: list[str]) -> None:
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(marker):
            return
    raise AssertionError(f"{marker!r} never printed:\n" + "".join(seen)[-3000:])


def test_the_supervisor_outlives_a_dashboard_outage_and_its_own_death(ray_head, token_auth, tmp_path, monkeypatch):
    """A dropped connection to the dashboard (a real TCP proxy, cut for 6 s mid-job) is retried with
    backoff and every log line is printed exactly once; a supervisor SIGKILLed and started again with the
    same --name re-attaches to its running job instead of submitting a second one; one that loses the
    dashboard for longer than --patience-s gives up with one line and leaves the job running."""
    from ray.job_submission import JobSubmissionClient

    jobs = JobSubmissionClient(ray_head)
    work = tmp_path / "work"
    work.mkdir()
    (work / "count.py").write_text(COUNT.format(n=40, dt=0.3))
    host, port = ray_head.removeprefix("http://").split(":")
    proxy = TcpProxy(host, int(port))
    try:
        sup = _supervisor(f"http://127.0.0.1:{proxy.port}", work, "outage")
        seen: list[str] = []
        _read_until(sup, "line 5", seen)
        proxy.cut()
        time.sleep(6)
        proxy.restore()
        out = _finish(sup)
        text = "".join(seen) + out
        assert sup.returncode == 0, text[-3000:]
        assert "dashboard unreachable" in text, text[-3000:]
        lines = [line for line in text.splitlines() if line.startswith("line ")]
        assert lines == [f"line {i}" for i in range(40)], lines  # each once, in order, none lost
        assert "job outage-0 succeeded after 1 attempt(s)" in text
    finally:
        proxy.close()

    (work / "count.py").write_text(COUNT.format(n=30, dt=0.5))
    first = _supervisor(ray_head, work, "reattach")
    seen = []
    _read_until(first, "line 3", seen)
    first.kill()
    first.wait()
    second = _supervisor(ray_head, work, "reattach")
    out = _finish(second)
    assert second.returncode == 0, out[-3000:]
    assert "re-attached to job reattach-0 (RUNNING)" in out and "submitted job" not in out, out[-3000:]
    assert "line 29" in out and "job reattach-0 succeeded" in out
    assert [j.submission_id for j in jobs.list_jobs() if j.submission_id.startswith("reattach")] == ["reattach-0"]

    proxy = TcpProxy(host, int(port))
    sup = _supervisor(f"http://127.0.0.1:{proxy.port}", work, "patience", "--patience-s", "3")
    seen = []
    _read_until(sup, "line 1", seen)
    proxy.cut()
    out = _finish(sup)
    assert sup.returncode == 1
    assert "dashboard has been unreachable for" in out and "--name patience" in out, out[-3000:]
    assert str(jobs.get_job_status("patience-0").value) == "RUNNING"  # giving up did not stop the job
    jobs.stop_job("patience-0")
