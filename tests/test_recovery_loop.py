"""Recovery covers the whole run, not just a round's body (issue 25): a client killed during the base
model's evaluation; the ServerActor SIGKILLed and SIGSTOPped from outside during a swap and during an
aggregation (a hung server is killed and restarted with the clients); a restart whose constructor fails.
Each run ends bitwise equal to the uninterrupted one."""

import json
import os
import shutil
import signal
import time

import pytest
from ray_helpers import (
    EventWatch,
    alive,
    cmdline,
    console_of,
    final_sha,
    ft_config,
    metrics,
    process_tree,
    run_driver,
    start_logged_driver,
)

from pubswap.run.events import read_events
from pubswap.run.faults import ENV as FAULT_ENV


def test_a_client_killed_during_the_base_evaluation_is_recovered(ft_reference, digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / "run")
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"who": "client", "client": 1, "round": 0, "step": 0, "phase": "evaluate"}))
    done = run_driver(cfg, {FAULT_ENV: str(fault)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "fault.json.fired").exists()
    assert [(e["phase"], e["round"]) for e in read_events(cfg.run_dir, "recovery")] == [("start", 0)]
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)


def server_of(driver: int) -> int:
    found = [p for p in process_tree(driver) if cmdline(p).startswith("ray::ServerActor")]
    assert len(found) == 1, found
    return found[0]


FEDSRD = ("federation.method=fedavg-grpo", "federation.clients_per_round=1", "federation.aggregation=fedsrd")


@pytest.mark.heavy  # ~77 s each
@pytest.mark.parametrize(
    "moment,overrides,before",
    [
        ("swap", (), 1),  # after step 1: step 2 is public, the server hands out the batch and swaps the answers
        # FedSRD's server aggregates the uploads after step 3; it is frozen after step 2, because after
        # step 3 the aggregation can be over before the freeze lands (then the fault hits the evaluation)
        ("aggregation", FEDSRD, 2),
    ],
)
def test_the_server_killed_or_hung_in_a_call_is_restarted_and_the_round_redone(
    moment, overrides, before, ft_reference_of, digit_model_dir, tmp_path
):
    """Round 1: the ServerActor is frozen (SIGSTOP) as the call arrives, then SIGKILLed with the call in
    flight; round 2: it is frozen and left so (fault_tolerance.step_timeout_s ends the wait, and the
    recovery kills it rather than leaving it stopped)."""
    cfg = ft_config(digit_model_dir, tmp_path / "run", *overrides, "fault_tolerance.step_timeout_s=10")
    proc = start_logged_driver(cfg)
    watch, killed, stopped = EventWatch(proc, cfg.run_dir), None, None
    try:
        watch.wait(event="step", round=1, step=before)
        killed = server_of(proc.pid)
        os.kill(killed, signal.SIGSTOP)
        time.sleep(5)  # the driver's call is waiting on it now
        os.kill(killed, signal.SIGKILL)
        watch.wait(event="step", round=2, step=before)
        stopped = server_of(proc.pid)
        os.kill(stopped, signal.SIGSTOP)
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in [p for p in (killed, stopped) if p]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert code == 0, console_of(proc)[-3000:]
    recoveries = read_events(cfg.run_dir, "recovery")
    assert [(e["phase"], e["round"]) for e in recoveries] == [("round", 1), ("round", 2)], console_of(proc)[-3000:]
    assert "hung" in recoveries[1]["error"]  # found by the step timeout, not by a death
    assert stopped != killed and not alive(stopped)  # the hung one was killed, not left stopped
    assert [r["recoveries"] for r in metrics(cfg.run_dir)] == [1, 1]
    assert final_sha(cfg.run_dir) == final_sha(ft_reference_of(*overrides))


def test_an_actor_whose_restart_fails_to_start_is_made_again(ft_reference, digit_model_dir, tmp_path):
    """A client SIGKILLed while the model's storage is away (here: its folder renamed): every restarted
    actor's constructor raises, which Ray never retries (the actor is dead for good); the recovery makes
    those actors again, backing off, until the storage is back (after the first failed start has been
    reported: a fixed delay lost the race on a slow day, the restart landing after the storage was back)."""
    model = tmp_path / "model"
    shutil.copytree(digit_model_dir, model)
    cfg = ft_config(model, tmp_path / "run")
    proc = start_logged_driver(cfg)
    watch = EventWatch(proc, cfg.run_dir)
    try:
        pids = watch.wait(event="actors")["pids"]
        watch.wait(event="step", round=1, step=1)
        model.rename(tmp_path / "away")
        os.kill(pids[1], signal.SIGKILL)
        deadline = time.monotonic() + 240
        while "failed to start" not in console_of(proc) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)  # one more failed start while the storage is still away
        (tmp_path / "away").rename(model)
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = console_of(proc)
    assert code == 0, text[-3000:]
    assert "failed to start" in text and "starting it again" in text, text[-3000:]  # the console says why
    assert [r["recoveries"] for r in metrics(cfg.run_dir)] == [1, 0]
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)
