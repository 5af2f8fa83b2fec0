"""A client actor restarted *between* calls is a lost actor too (issue 25): SIGKILLed from outside while it
sits idle as a non-participant, Ray restarts it with its initial state; the driver notices the new process
before it uses the actor again, recovers, and the run ends bitwise equal to an uninterrupted one (without
the check, FedIT's allreduce would reach a fresh actor outside the collective group and the driver exit 1)."""

import os
import re
import signal
import time

from pubswap.participation import participants
from ray_helpers import cmdline, final_sha, ft_config, metrics, process_tree, run_driver, start_driver

# a server-path strategy: every actor applies the sparse download to the global adapter it holds, so a
# restarted actor (holding the initial one) would silently train from a wrong global adapter
PARTIAL = ("federation.method=fedavg-grpo", "federation.clients_per_round=1", "federation.aggregation=fedsrd")


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wait_for_a_restarted_actor(tree_root: int, old: set[int], timeout_s: float = 300) -> int:
    """The pid of a new ClientActor process under `tree_root` once it has finished starting (idle for 2 s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fresh = [p for p in process_tree(tree_root) if p not in old and "ray::ClientActor" in cmdline(p)]
        for pid in fresh:
            try:
                before = cpu_ticks(pid)
                time.sleep(2.0)
                if cpu_ticks(pid) - before <= 5:  # <= 0.05 s of CPU in 2 s: its model and engine are loaded
                    return pid
            except OSError:
                pass
        time.sleep(0.5)
    raise AssertionError("no restarted client actor came up")


def test_an_idle_non_participant_restarted_between_calls_is_recovered_bitwise(digit_model_dir, tmp_path):
    reference = ft_config(digit_model_dir, tmp_path / "reference", *PARTIAL)
    done = run_driver(reference)
    assert done.returncode == 0, done.stderr[-3000:]

    cfg = ft_config(digit_model_dir, tmp_path / "run", *PARTIAL)
    proc = start_driver(cfg)
    out, killed = [], None
    try:
        for line in proc.stdout:
            out.append(line)
            m = re.match(r"client actors: 2, hosting clients \[\[0\], \[1\]\], pids \[(\d+), (\d+)\]", line)
            if m:
                pids = [int(m.group(1)), int(m.group(2))]
            if killed is None and line.startswith("round 1/2 step 1/3"):
                # the driver paused between its calls; the idle actor killed and fully restarted meanwhile, so
                # that the driver's next call reaches a live actor that holds its initial state
                os.kill(proc.pid, signal.SIGSTOP)
                idle = next(c for c in (0, 1) if c not in participants(cfg.seed, 1, 2, 1))
                killed = pids[idle]
                os.kill(killed, signal.SIGKILL)
                wait_for_a_restarted_actor(proc.pid, set(process_tree(proc.pid)))
                os.kill(proc.pid, signal.SIGCONT)
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
    text = "".join(out)
    assert code == 0, text[-3000:] + proc.stderr.read()[-3000:]
    # the restart is noticed either by the driver's incarnation check or, when the driver's first call after
    # the pause was queued for the old process, by Ray itself ("The actor was restarted"): never as a death
    # inside a call, and never missed
    assert killed is not None and ("were restarted since they were given their state" in text
                                   or "The actor was restarted" in text), text[-3000:]
    got, ref = metrics(cfg.run_dir), metrics(reference.run_dir)
    assert [r["recoveries"] for r in got] == [1, 0]
    assert [r["pass@1"] for r in got] == [r["pass@1"] for r in ref]  # every actor evaluated the right adapter
    assert final_sha(cfg.run_dir) == final_sha(reference.run_dir)
