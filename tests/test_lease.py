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

from pubswap.run.lease import LEASE_NAME, Lease, LeaseHeld, LeaseLost, read_owner


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


def test_a_live_owner_on_this_machine_that_exits_within_the_ttl_is_taken_over(tmp_path, holder):
    """A resubmitted job often starts while its predecessor's driver is still being killed: it waits."""
    threading.Timer(1.0, os.kill, (holder.pid, signal.SIGKILL)).start()
    said = []
    t = time.monotonic()
    Lease(tmp_path, ttl_s=8).acquire(say=said.append).release()
    assert 1.0 <= time.monotonic() - t < 8
    assert "waiting up to 8s" in said[0] and f"dead driver pid {holder.pid}" in said[-1]


def test_the_same_hostname_on_another_machine_is_not_judged_by_its_pid(tmp_path):
    """Containers of one pod share a hostname: a pid there says nothing here, so the heartbeat decides."""
    mine = Lease(tmp_path, ttl_s=4).owner
    other = {**mine, "id": "e" * 32, "boot_id": "another-boot", "pid": os.getpid()}  # "our" pid, alive here
    (tmp_path / LEASE_NAME).write_text(json.dumps(other))
    said = []
    t = time.monotonic()
    Lease(tmp_path, ttl_s=4).acquire(say=said.append).release()  # waited out as a silent owner elsewhere
    assert 4 <= time.monotonic() - t < 8 and "for its heartbeat" in said[0]


def test_an_unreadable_lease_is_not_mistaken_for_a_takeover(tmp_path):
    lease = Lease(tmp_path, ttl_s=8).acquire()
    path = tmp_path / LEASE_NAME
    ours = path.read_text()
    path.write_text('{"id": "tor')  # a torn write, repaired within the check's patience
    threading.Timer(0.5, path.write_text, (ours,)).start()
    lease.check()
    path.write_text("\0\0\0")  # unreadable for good
    with pytest.raises(LeaseLost, match="unreadable"):
        lease.check()
    path.write_text(ours)
    lease.release()
