"""jobs.supervise resubmits a failed training job to a local `ray start --head`; the rerun resumes."""

import json
import sys

import pytest

from jobs import supervise
from pubswap.faults import ENV as FAULT_ENV
from ray_helpers import REPO, final_sha, ft_config, metrics, write_config


@pytest.mark.heavy  # ~39 s; CI has a SIGKILLed driver rerun to the reference in test_fault_tolerance.py
def test_supervisor_resubmits_a_killed_driver_which_resumes_to_the_reference(ray_head, ft_reference, digit_model_dir,
                                                                             tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # the locally started head uses Ray's token auth
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = ft_config(digit_model_dir, tmp_path / "run")
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"who": "driver", "round": 2, "step": 1, "phase": "step"}))
    rc = supervise.main(["--address", ray_head, "--working-dir", str(REPO), "--max-retries", "2", "--poll-s", "1",
                         "--name", "sup-test", "--env", f"{FAULT_ENV}={fault}", "--",
                         sys.executable, "-m", "jobs.train", "--config", str(write_config(cfg))])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert "job sup-test-0 failed" in out and "attempt 2/3: submitted job sup-test-1" in out
    assert "job sup-test-1 succeeded after 2 attempt(s)" in out and "sup-test-2" not in out
    assert "resuming after round 1" in out
    assert [r["round"] for r in metrics(cfg.run_dir)] == [1, 2]
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)
    # a driver that exits 2 (bad input: here a config error) is not resubmitted: it would fail the same way
    rc = supervise.main(["--address", ray_head, "--working-dir", str(REPO), "--max-retries", "2", "--poll-s", "1",
                         "--name", "sup-bad", "--", sys.executable, "-m", "jobs.train", "--config",
                         str(write_config(cfg)), "grpo.K=0"])
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
    assert supervise.run_dir_of(["python", "-m", "jobs.train", "--config", str(cfg_file)], tmp_path) == f"{tmp_path}/abs"
    assert supervise.run_dir_of(["x", "--config", str(cfg_file), "run_dir=/o"], tmp_path) == "/o"


def test_a_resubmission_resumes_instead_of_starting_over_again():
    first = "python -m jobs.train --config 'configs/a b.yaml' --start-over run_dir=s3://b/x"
    assert supervise.retry_entrypoint(first) == "python -m jobs.train --config 'configs/a b.yaml' run_dir=s3://b/x"
    plain = "python -m jobs.train --config configs/x.yaml"
    assert supervise.retry_entrypoint(plain) == plain
    assert 4 in supervise.FINAL_EXIT_CODES  # a full disk is not retried blindly
