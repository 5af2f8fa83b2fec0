"""Recovery covers the whole run, not just a round's body (issue 25): a client killed during the base
model's evaluation, and a ServerActor SIGSTOPped from outside in the middle of a public step (a hung
server is killed and restarted with the clients); each run ends bitwise equal to the uninterrupted one."""

import json
import os
import re
import shutil
import signal
import threading

from pubswap.faults import ENV as FAULT_ENV
from ray_helpers import alive, cmdline, final_sha, ft_config, metrics, process_tree, run_driver, start_driver


def test_a_client_killed_during_the_base_evaluation_is_recovered(ft_reference, digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / "run")
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"who": "client", "client": 1, "round": 0, "step": 0, "phase": "evaluate"}))
    done = run_driver(cfg, {FAULT_ENV: str(fault)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "fault.json.fired").exists()
    assert "start: an actor died or hung" in done.stdout and "restarting the clients to evaluate the base model" in done.stdout
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)


def test_a_hung_server_in_a_public_step_is_restarted_and_the_round_redone(ft_reference, digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / "run", "fault_tolerance.step_timeout_s=10")
    proc = start_driver(cfg)
    out, stopped = [], None
    try:
        for line in proc.stdout:
            out.append(line)
            if stopped is None and line.startswith("round 1/2 step 1/3"):  # step 2 is public: it needs the server
                stopped = [p for p in process_tree(proc.pid) if cmdline(p).startswith("ray::ServerActor")]
                assert len(stopped) == 1
                os.kill(stopped[0], signal.SIGSTOP)
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in stopped or []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    text = "".join(out)
    assert code == 0, text[-3000:] + proc.stderr.read()[-3000:]
    assert "a client is hung" in text or "round 1: an actor died or hung" in text, text[-3000:]
    assert not alive(stopped[0])  # killed, not left stopped
    assert [r["recoveries"] for r in metrics(cfg.run_dir)] == [1, 0]
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)



def test_an_actor_whose_restart_fails_to_start_is_made_again(ft_reference, digit_model_dir, tmp_path):
    """A client SIGKILLed while the model's storage is away (here: its folder renamed): every restarted
    actor's constructor raises, which Ray never retries (the actor is dead for good); the recovery makes
    those actors again, backing off, until the storage is back 8 s later."""
    model = tmp_path / "model"
    shutil.copytree(digit_model_dir, model)
    cfg = ft_config(model, tmp_path / "run")
    proc = start_driver(cfg)
    out = []
    try:
        for line in proc.stdout:
            out.append(line)
            m = re.match(r"client actors: 2, hosting clients \[\[0\], \[1\]\], pids \[(\d+), (\d+)\]", line)
            if m:
                pids = [int(m.group(1)), int(m.group(2))]
            if line.startswith("round 1/2 step 1/3"):
                model.rename(tmp_path / "away")
                os.kill(pids[1], signal.SIGKILL)
                threading.Timer(8.0, (tmp_path / "away").rename, args=(model,)).start()
                break
        rest = proc.stdout.read()
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(out) + rest
    assert code == 0, text[-3000:] + proc.stderr.read()[-3000:]
    assert "failed to start" in text and "starting it again" in text, text[-3000:]
    assert [r["recoveries"] for r in metrics(cfg.run_dir)] == [1, 0]
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)
