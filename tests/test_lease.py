"""run_dir's lease (issue 13, item 2): one live writer; a dead owner's lease is taken over; a driver whose
lease was taken over notices before it writes again. Owners here are real processes (killed with real
signals) or lease files written as another host's driver would write them."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from pubswap.lease import LEASE_NAME, Lease, LeaseHeld, LeaseLost, read_owner


def _hold(run_dir: str, ready) -> None:
    Lease(run_dir, ttl_s=4).acquire(say=lambda _: None).start_heartbeat()
    ready.set()
    time.sleep(600)


@pytest.fixture
def holder(tmp_path):
    """A live process holding the lease of tmp_path (renewing it); yields the process."""
    ready = mp.get_context("spawn").Event()
    proc = mp.get_context("spawn").Process(target=_hold, args=(str(tmp_path), ready), daemon=True)
    proc.start()
    assert ready.wait(60)
    yield proc
    if proc.is_alive():
        proc.kill()
    proc.join()


def test_a_live_owner_is_refused_with_its_pid_and_a_dead_one_taken_over(tmp_path, holder):
    with pytest.raises(LeaseHeld, match=rf"in use by a live driver, pid {holder.pid} on "):
        Lease(tmp_path, ttl_s=4).acquire(say=lambda _: None)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    said = []
    t = time.monotonic()
    lease = Lease(tmp_path, ttl_s=60).acquire(say=said.append)  # same host: the dead pid is seen at once
    assert time.monotonic() - t < 5
    assert said and f"dead driver pid {holder.pid}" in said[-1]
    assert read_owner(tmp_path / LEASE_NAME)["pid"] == os.getpid()
    lease.release()
    assert not (tmp_path / LEASE_NAME).exists()


def _foreign(path, beat: int) -> dict:
    owner = {"id": "f" * 32, "host": "another-node", "pid": 1, "started": "then", "beat": beat, "time": 0}
    path.write_text(json.dumps(owner))
    return owner


def test_another_hosts_owner_is_dead_when_its_heartbeat_stops_and_alive_while_it_moves(tmp_path):
    path = tmp_path / LEASE_NAME
    _foreign(path, 0)
    t = time.monotonic()
    Lease(tmp_path, ttl_s=4).acquire(say=lambda _: None).release()  # a silent owner: waited out for ttl_s
    assert 4 <= time.monotonic() - t < 8

    _foreign(path, 0)
    stop = threading.Event()

    def beat():  # another host's driver renewing its lease
        n = 0
        while not stop.wait(1.0):
            n += 1
            _foreign(path, n)

    threading.Thread(target=beat, daemon=True).start()
    try:
        with pytest.raises(LeaseHeld, match="pid 1 on another-node"):
            Lease(tmp_path, ttl_s=4).acquire(say=lambda _: None)
    finally:
        stop.set()


def test_a_driver_whose_lease_was_taken_over_learns_it_before_writing(tmp_path):
    lease = Lease(tmp_path, ttl_s=4).acquire()
    lost = threading.Event()
    lease.start_heartbeat(on_lost=lambda why: lost.set())
    lease.check()  # ours
    _foreign(tmp_path / LEASE_NAME, 7)  # taken over (this driver was paused past the ttl, say)
    with pytest.raises(LeaseLost, match="taken over by pid 1 on another-node"):
        lease.check()
    assert lost.wait(3)  # the heartbeat noticed too, within ttl/4
    lease.release()
    assert read_owner(tmp_path / LEASE_NAME)["host"] == "another-node"  # not removed: not ours
