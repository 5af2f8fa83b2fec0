"""A driver ended from outside (SIGTERM: `timeout`, `ray job stop`, a scheduler) leaves nothing behind:
its client actors and their vLLM engine processes exit, and a rerun resumes (issue 13, item 1)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from ray_helpers import (
    EventWatch,
    cmdline,
    console_of,
    ft_config,
    metrics,
    run_driver,
    run_processes,
    start_logged_driver,
    still_running,
)

pytest.importorskip("vllm")


def test_sigterm_to_the_driver_leaves_no_actor_or_engine_behind(digit_model_dir, tmp_path):
    before = run_processes()
    # many rounds: the run must still be going when the signal comes, after the second driver was refused
    cfg = ft_config(digit_model_dir, tmp_path / "run", "rollout.backend=vllm", "federation.rounds=100")
    driver = start_logged_driver(cfg)
    try:
        EventWatch(driver, cfg.run_dir).wait(event="step", round=1, step=1)  # the engines are up, a step ran
        started = {p: c for p, c in run_processes().items() if p not in before}
        assert any("VLLM::EngineCore" in c for c in started.values()), started
        # a second driver on the same run_dir (a resubmitted job, a colleague) waits the lease's ttl for the
        # owner to exit (here 4 s), then is refused: one line, exit 5 (run_dir busy)
        second = run_driver(
            ft_config(
                digit_model_dir,
                tmp_path / "run",
                "rollout.backend=vllm",
                "federation.rounds=100",
                "fault_tolerance.lease_ttl_s=4",
            ),
            config_path=tmp_path / "second.yaml",
        )
        assert second.returncode == 5, second.stderr[-2000:]
        assert "waiting up to 4s" in second.stdout
        assert second.stderr.strip().splitlines() == [second.stderr.strip()]
        assert f"in use by a live driver, pid {driver.pid} on " in second.stderr
        driver.send_signal(signal.SIGTERM)
        code = driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    stderr = console_of(driver)
    assert code == 128 + signal.SIGTERM, stderr[-2000:]
    assert "stopped by SIGTERM" in stderr
    left = still_running(started, within_s=30)
    assert not left, f"still running 30 s after the driver exited: {left}"
    # only whole rounds were committed, the last one with its checkpoint
    rounds = [r["round"] for r in metrics(cfg.run_dir)]
    assert rounds == list(range(1, len(rounds) + 1)) and len(rounds) < 100
    assert (Path(cfg.run_dir) / "checkpoints" / f"round_{len(rounds):04d}").is_dir()
    assert not (Path(cfg.run_dir) / "LEASE").exists()  # released on the way out


@pytest.mark.heavy  # ~40 s of vLLM engines
def test_sigkilled_driver_leaves_no_engine_worker_behind(digit_model_dir, tmp_path):
    """SIGKILL runs no cleanup: Ray's daemons take the actors down, and each vLLM worker process, whose
    engine core dies with its actor, exits by itself once its parent is gone."""
    before = run_processes()
    cfg = ft_config(digit_model_dir, tmp_path / "run", "rollout.backend=vllm")
    driver = start_logged_driver(cfg)
    try:
        EventWatch(driver, cfg.run_dir).wait(event="step", round=1, step=1)
        engines = {p: c for p, c in run_processes().items() if p not in before and "VLLM::" in c}
        assert any("VLLM::Worker" in c for c in engines.values()), engines
        driver.kill()
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    left = still_running(engines, within_s=30)
    assert not left, f"engine processes still running 30 s after the driver was SIGKILLed: {left}"


def test_a_signal_that_lands_inside_rays_c_code_still_stops_cleanly(monkeypatch, tmp_path, capsys):
    """SIGTERM's handler raises Stopped; when the main thread is inside a Ray C call (ray.wait) at that
    moment, Python reports a SystemError caused by it. main() must still exit 128 + 15 with its line."""
    import jobs.train as driver

    def train(cfg, handle_signals=False, start_over=False):
        try:
            raise driver.Stopped(signal.SIGTERM)
        except driver.Stopped as stop:
            raise SystemError("<cyfunction CoreWorker.wait> returned a result with an exception set") from stop

    monkeypatch.setattr(driver, "train", train)
    monkeypatch.setattr(driver, "stop_on_sigterm", lambda: None)
    config = tmp_path / "c.yaml"
    config.write_text("model: {path: builtin:smollm2-135m-instruct}\n")
    assert driver.main(["--config", str(config)]) == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in capsys.readouterr().err

    def broken(cfg, handle_signals=False, start_over=False):
        raise SystemError("a real one")

    monkeypatch.setattr(driver, "train", broken)
    with pytest.raises(SystemError, match="a real one"):
        driver.main(["--config", str(config)])


def test_sigterm_while_ray_init_starts_the_local_cluster_leaves_no_ray_process(digit_model_dir, tmp_path):
    """The signal lands inside `ray.init`, once Ray's agents are up but before the driver has connected:
    Ray's own SIGTERM handler (installed by ray.init) exits before Ray knows its new node, so ray.shutdown
    has nothing to stop. The driver stops the processes its ray.init started itself."""
    import psutil

    before = set(run_processes())
    cfg = ft_config(digit_model_dir, tmp_path / "run")
    driver = start_logged_driver(cfg)
    # Ray's agents, before and after they rename themselves
    agents = ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "dashboard/agent.py", "runtime_env/agent/main.py")
    started: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and driver.poll() is None:
            try:
                tree = psutil.Process(driver.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                break
            started = {p.pid: cmdline(p.pid) for p in tree if p.pid not in before}
            if any(a in c for c in started.values() for a in agents):
                break
            time.sleep(0.05)
        assert any(a in c for c in started.values() for a in agents), (driver.poll(), started, console_of(driver))
        driver.send_signal(signal.SIGTERM)
        code = driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    stderr = console_of(driver)
    assert "client actors:" not in stderr  # the signal came before the driver had a cluster to use
    assert code == 128 + signal.SIGTERM, stderr[-2000:]
    assert "stopped by SIGTERM" in stderr
    # the driver ends them before it exits; left alone, Ray's agents, still connecting to the dead GCS, linger
    # (seen by hand: over 60 s)
    left = still_running(started, within_s=1)
    assert not left, f"still running 1 s after the driver exited: {left}"
