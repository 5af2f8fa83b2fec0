"""A client whose vLLM engine died, and a client that hangs, are dead clients (issue 13, items 5 and 6).

Injected from outside the run, in one real `python -m jobs.train` with vLLM engines: in round 1 a client
actor is frozen with SIGSTOP (its calls never return: `fault_tolerance.step_timeout_s` ends the wait);
in round 2 the engine core process of a client actor is SIGKILLed (as a CUDA error or the OOM killer
would); in round 3, while the driver is paused between two calls (SIGSTOP), an idle actor's engine core
is SIGKILLed: the actor's watchdog ends the actor, Ray restarts it with its initial state, and the driver
notices the new process before it uses it (issue 25). Each time the clients are restarted and the round
redone, and the final adapter is bitwise equal to an uninterrupted run's; the frozen actor and the dead
engines' processes are gone afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest
from ray_helpers import EventWatch, console_of, final_sha, ft_config, metrics, run_driver, start_logged_driver

from pubswap.run.events import read_events

pytest.importorskip("vllm")

VLLM = ("rollout.backend=vllm", "fault_tolerance.step_timeout_s=15", "federation.rounds=3")


def client_actors() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if "ray::ClientActor" in " ".join(p.info["cmdline"] or [])]


def kill_an_idle_engine(driver: subprocess.Popen) -> psutil.Process:
    """Pause the driver between calls, SIGKILL an actor's engine core, wait until the watchdog has ended
    that actor and Ray has restarted it (a new ClientActor process, idle), resume the driver."""
    os.kill(driver.pid, signal.SIGSTOP)
    try:
        before = {p.pid for p in client_actors()}
        actor = client_actors()[1]
        core = next(c for c in actor.children(recursive=True) if "EngineCore" in c.name())
        core.kill()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            fresh = [p for p in client_actors() if p.pid not in before]
            if (
                fresh
                and any("EngineCore" in c.name() for c in fresh[0].children(recursive=True))
                and fresh[0].cpu_percent(interval=2.0) < 3
            ):
                return core
            time.sleep(0.5)
        raise AssertionError("the actor whose engine was killed did not come back")
    finally:
        os.kill(driver.pid, signal.SIGCONT)


@pytest.mark.heavy  # ~205 s
def test_hung_client_and_dead_engine_are_restarted_and_the_rounds_redone(digit_model_dir, tmp_path):
    reference = run_driver(ft_config(digit_model_dir, tmp_path / "reference", *VLLM))
    assert reference.returncode == 0, reference.stderr[-3000:]
    cfg = ft_config(digit_model_dir, tmp_path / "run", *VLLM)
    driver = start_logged_driver(cfg)
    watch, frozen, engines, idle_core = EventWatch(driver, cfg.run_dir), None, [], None
    try:
        watch.wait(event="step", round=1, step=1)
        frozen = client_actors()[0]
        frozen.send_signal(signal.SIGSTOP)
        watch.wait(event="step", round=2, step=1)
        actor = client_actors()[0]
        engines = [c for c in actor.children(recursive=True) if "VLLM::" in c.name()]
        core = next(c for c in engines if "EngineCore" in c.name())
        core.kill()
        watch.wait(event="step", round=3, step=1)
        idle_core = kill_an_idle_engine(driver)
        code = driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    text = console_of(driver)
    assert code == 0, text[-3000:]
    recoveries = read_events(cfg.run_dir, "recovery")
    assert [(e["phase"], e["round"]) for e in recoveries] == [("round", 1), ("round", 2), ("round", 3)], text[-3000:]
    assert "fault_tolerance.step_timeout_s=15" in recoveries[0]["error"]  # round 1: hung
    # the watchdog's line, left by the actor (actors/exit_note.py), in the recovery's event and console line,
    # whichever way the driver found out in round 3: the restarted actor's new pid, its failed call, or a
    # call timed out because the driver was paused through the restart (the CPUs busy with a new engine)
    why = f"vLLM engine process {idle_core.pid} (VLLM::EngineCore)"
    assert why in recoveries[2]["error"] and why in text, recoveries[2]["error"]
    assert "vLLM engine" in recoveries[1]["error"], recoveries[1]["error"]  # round 2: the engine died in a call
    assert [r["recoveries"] for r in metrics(cfg.run_dir)] == [1, 1, 1]
    assert final_sha(cfg.run_dir, rounds=3) == final_sha(tmp_path / "reference", rounds=3)
    deadline = time.monotonic() + 30
    while (
        left := [p for p in [frozen, *engines, idle_core] if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    ) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"still running: {left}"
