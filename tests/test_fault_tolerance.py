"""Faults injected mid-round end with the same final global adapter as an uninterrupted run, bitwise.

One reference run (2 clients, PubSwap Balanced, 2 rounds of tau=3: steps 1 private, 2 public,
3 private) and, against it: a client SIGKILLed in a private step, in a public step and before the
allreduce; the driver SIGKILLed mid-round and rerun; the newest checkpoint truncated and the run
resumed. "Same" is the sha256 of the final checkpoint's weights file, i.e. every bit of the adapter.
"""

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import ray
from ray_helpers import (
    RAY_ENV,
    EventWatch,
    console_of,
    final_sha,
    ft_config,
    metrics,
    run_driver,
    start_logged_driver,
    step_rewards,
    tb_scalars,
)

from jobs.train import train
from pubswap.lora import WEIGHTS_NAME, read_adapter
from pubswap.run.checkpoint import ResumeError
from pubswap.run.faults import ENV as FAULT_ENV


def test_driver_sigkilled_mid_round_then_rerun_matches_reference(ft_reference, digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / "run")
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"who": "driver", "round": 2, "step": 2, "phase": "step"}))
    killed = run_driver(cfg, {FAULT_ENV: str(fault)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert "round 2/2 step 1/3" in killed.stdout and "round 2/2 step 2/3" not in killed.stdout
    assert [r["round"] for r in metrics(cfg.run_dir)] == [1]
    assert [s for s, _ in tb_scalars(cfg.run_dir)["critic/rewards/mean"]] == [1, 2, 3]  # round 1 was logged
    dead_pid = json.loads((Path(cfg.run_dir) / "LEASE").read_text())["pid"]  # the SIGKILLed driver's lease stays
    resumed = run_driver(cfg)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming after round 1" in resumed.stdout and "round 1/2 step" not in resumed.stdout
    assert f"took over the lease of {cfg.run_dir} from the dead driver pid {dead_pid} on" in resumed.stdout
    assert [r["round"] for r in metrics(cfg.run_dir)] == [1, 2]
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)
    assert step_rewards(cfg.run_dir) == step_rewards(ft_reference)
    # TensorBoard continues across the resume with every step once, as in the uninterrupted run
    got, ref = tb_scalars(cfg.run_dir), tb_scalars(ft_reference)
    assert set(got) == set(ref) and "val/pass@1" in got and "client_1/actor/grad_norm" in got
    for tag, points in got.items():
        assert [s for s, _ in points] == [s for s, _ in ref[tag]], tag  # no duplicate, none missing
    assert [s for s, _ in got["critic/rewards/mean"]] == [1, 2, 3, 4, 5, 6]
    for tag in ("critic/rewards/mean", "client_0/critic/rewards/mean", "fed/swapped_in", "val/pass@1"):
        assert got[tag] == ref[tag], tag


@pytest.mark.heavy  # ~45 s
def test_a_driver_whose_lease_is_taken_over_stops_without_writing_and_the_run_resumes(
    ft_reference, digit_model_dir, tmp_path
):
    """From outside: after round 1 is committed, another node's driver takes the lease (as one would after
    judging this driver dead, e.g. across a network partition). This driver must stop at once without
    committing round 2; a resuming driver then waits the silent owner out, takes over, and finishes the
    run bitwise equal to the uninterrupted one."""
    cfg = ft_config(digit_model_dir, tmp_path / "run", "fault_tolerance.lease_ttl_s=4")
    lease_path = Path(cfg.run_dir) / "LEASE"
    driver = start_logged_driver(cfg)
    try:
        EventWatch(driver, cfg.run_dir).wait(event="round", round=1)
        assert json.loads(lease_path.read_text())["pid"] == driver.pid
        lease_path.write_text(
            json.dumps({"id": "x" * 32, "host": "node-b", "pid": 4242, "started": "now", "beat": 0, "time": 0})
        )
        code = driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    stderr = console_of(driver)
    assert code == 3, stderr[-2000:]
    assert "stopped: the lease of" in stderr and "taken over by pid 4242 on node-b" in stderr
    assert [r["round"] for r in metrics(cfg.run_dir)] == [1]
    assert not (Path(cfg.run_dir) / "checkpoints" / "round_0002").exists()
    assert json.loads(lease_path.read_text())["host"] == "node-b"  # the lost lease was left alone
    resumed = run_driver(cfg)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "took over the lease" in resumed.stdout and "pid 4242 on node-b" in resumed.stdout
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)


@pytest.mark.heavy  # ~24 s
def test_truncated_latest_checkpoint_is_skipped_and_the_round_redone(ft_reference, digit_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(ft_reference, run_dir)
    weights = run_dir / "checkpoints" / "round_0002" / WEIGHTS_NAME
    weights.write_bytes(weights.read_bytes()[:1000])
    proc = run_driver(ft_config(digit_model_dir, run_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "round_0002 is unusable" in proc.stderr and "resuming after round 1" in proc.stdout
    assert [r["round"] for r in metrics(run_dir)] == [1, 2]
    assert final_sha(run_dir) == final_sha(ft_reference)
    adapter = read_adapter(run_dir / "checkpoints/round_0002")
    ref_adapter = read_adapter(ft_reference / "checkpoints/round_0002")
    assert all((adapter[k] - ref_adapter[k]).abs().max().item() == 0.0 for k in ref_adapter)


def test_finished_run_does_nothing_and_another_config_is_refused(ft_reference, digit_model_dir, capsys):
    before = (ft_reference / "metrics.jsonl").read_text()
    summary = train(ft_config(digit_model_dir, ft_reference))  # no Ray is started for this
    assert "already finished" in capsys.readouterr().out
    assert not ray.is_initialized()
    assert (ft_reference / "metrics.jsonl").read_text() == before
    assert summary["final_pass@1"] == metrics(ft_reference)[-1]["pass@1"]
    with pytest.raises(ResumeError, match=r"federation\.method: 'pubswap-balanced' -> 'fedavg-grpo'") as e:
        train(ft_config(digit_model_dir, ft_reference, "federation.method=fedavg-grpo", "federation.rounds=3"))
    assert "grpo.K" not in str(e.value)


@pytest.fixture(scope="module")
def ray_with_faults(tmp_path_factory):
    fault = tmp_path_factory.mktemp("faults") / "fault.json"
    env = {"env_vars": {**RAY_ENV["env_vars"], FAULT_ENV: str(fault)}}
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=env)
    yield fault
    ray.shutdown()


@pytest.mark.parametrize(
    "client,step,phase,actors",
    [
        (1, 1, "private_train", 0),
        pytest.param(0, 2, "public_answer", 0, marks=pytest.mark.heavy),
        pytest.param(1, 0, "average", 0, marks=pytest.mark.heavy),
        (1, 2, "public_train", 1),
    ],
)
def test_client_killed_mid_round_is_restarted_and_the_round_redone(
    ft_reference, digit_model_dir, tmp_path, ray_with_faults, client, step, phase, actors, capsys
):
    """actors=1: both clients on one actor, which the fault kills (the reference has one actor each; with
    two clients the local sum and the allreduce add the same two terms, so the result is still bitwise)."""
    fault = ray_with_faults
    fault.write_text(json.dumps({"who": "client", "client": client, "round": 2, "step": step, "phase": phase}))
    train(ft_config(digit_model_dir, tmp_path / "run", f"resources.num_actors={actors}"))
    assert not fault.exists() and Path(f"{fault}.fired").exists()  # the client really was killed
    os.unlink(f"{fault}.fired")
    assert "an actor died" in capsys.readouterr().out
    assert [r["recoveries"] for r in metrics(tmp_path / "run")] == [0, 1]
    assert final_sha(tmp_path / "run") == final_sha(ft_reference)
    assert step_rewards(tmp_path / "run") == step_rewards(ft_reference)
