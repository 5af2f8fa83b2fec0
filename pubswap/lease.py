"""One writer per run_dir: a lease file with an owner and a heartbeat.

    run_dir/LEASE   {"id": ..., "host": ..., "pid": ..., "pid_start": ..., "started": ..., "beat": N, "time": ...}

A driver takes the lease before it writes anything into run_dir and renews it every `ttl_s / 4` seconds
from a thread; before every commit (metrics line, checkpoint, logs) it checks that the file still names
it. Another driver on the same run_dir then:
- refuses with one line naming the owner, if the owner is alive: on the same host, its pid runs (with the
  same start time); on another host, its heartbeat moves within `ttl_s`;
- takes the lease over if the owner is dead: at once on the same host, else once its heartbeat has not
  moved for `ttl_s` (on our own clock, so clocks of different hosts need not agree).
A driver whose lease was taken over (it was paused past `ttl_s`, or partitioned from the storage) learns
it at its next renewal or commit check and stops without writing again.

It works on any shared file system that renames atomically (local disks, NFS, Lustre...): a fresh lease
is created with a hard link, which fails if the file exists; a takeover replaces the file and reads it
back after a pause, so of two drivers racing to take over a dead owner's lease only the last rename wins
and the other refuses. The remaining window is a renewal racing a takeover between its read and its
rename (microseconds), after which the renewing driver's next check finds the file is no longer its own.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

LEASE_NAME = "LEASE"
CONFIRM_S = 0.5  # a takeover re-reads the file this long after its rename


class LeaseHeld(RuntimeError):
    """run_dir belongs to a live driver; the message names it."""


class LeaseLost(RuntimeError):
    """This driver's lease was taken over by another; it must not write to run_dir again."""


def _pid_start(pid: int) -> str | None:
    """The start time of a process in clock ticks since boot (with the pid, identifies it), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else fields[19]
    except (OSError, IndexError):
        return None


def describe(owner: dict) -> str:
    return f"pid {owner.get('pid')} on {owner.get('host')} (since {owner.get('started', '?')})"


def read_owner(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # being replaced, or torn by a crash: treated as a lease whose heartbeat does not move


class Lease:
    def __init__(self, run_dir: Path, ttl_s: float = 60.0):
        self.path = Path(run_dir) / LEASE_NAME
        self.ttl_s = ttl_s
        pid = os.getpid()
        self.owner = {"id": uuid.uuid4().hex, "host": socket.gethostname(), "pid": pid, "pid_start": _pid_start(pid),
                      "started": time.strftime("%Y-%m-%d %H:%M:%S"), "beat": 0, "time": time.time()}
        self.lost: str | None = None  # why the lease was lost (set by the heartbeat thread)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- taking it -----------------------------------------------------------------------------------

    def acquire(self, say: Callable[[str], None] = print) -> "Lease":
        """Take the lease, waiting out a silent owner on another host; raises LeaseHeld if the owner lives."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            if self._create():
                return self
            owner = read_owner(self.path)
            if owner is None:
                continue  # released in between: try to create it again
            dead = self._owner_dead(owner, say)
            if dead is None:
                continue  # released or taken over meanwhile: look again
            if not dead:
                raise LeaseHeld(f"{self.path.parent} is in use by a live driver, {describe(owner)}; stop it first, "
                                f"or use another run_dir (its lease: {self.path})")
            self._write()
            time.sleep(CONFIRM_S)
            now = read_owner(self.path)
            if not now or now.get("id") != self.owner["id"]:
                raise LeaseHeld(f"{self.path.parent}: another driver took over the lease of the dead "
                                f"{describe(owner)} at the same time ({describe(now or {})})")
            say(f"took over the lease of {self.path.parent} from the dead driver {describe(owner)}")
            return self

    def _create(self) -> bool:
        tmp = self._tmp()
        tmp.write_text(json.dumps(self.owner))
        try:
            os.link(tmp, self.path)  # atomic, and fails if the file exists (also on NFS)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def _owner_dead(self, owner: dict, say: Callable[[str], None]) -> bool | None:
        """True: dead; False: alive; None: the file changed owner while we watched."""
        if owner.get("host") == self.owner["host"] and owner.get("pid"):
            start = _pid_start(int(owner["pid"]))
            return start is None or (owner.get("pid_start") is not None and start != owner["pid_start"])
        # another host (or an unreadable file): dead if the heartbeat does not move for ttl_s on our clock
        say(f"{self.path.parent} is leased by {describe(owner)}; waiting up to {self.ttl_s:.0f}s "
            "(fault_tolerance.lease_ttl_s) for its heartbeat")
        deadline = time.monotonic() + self.ttl_s
        while time.monotonic() < deadline:
            time.sleep(min(1.0, self.ttl_s / 8))
            now = read_owner(self.path)
            if now is None or now.get("id") != owner.get("id"):
                return None
            if now.get("beat") != owner.get("beat"):
                return False
        return True

    # -- holding it ----------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise LeaseLost unless the lease file still names this driver (call before every commit)."""
        if self.lost:
            raise LeaseLost(self.lost)
        now = read_owner(self.path)
        if not now or now.get("id") != self.owner["id"]:
            self.lost = (f"the lease of {self.path.parent} was taken over by "
                         f"{describe(now) if now else 'nobody (the file is gone)'}")
            raise LeaseLost(self.lost)

    def renew(self) -> None:
        with self._lock:
            self.check()
            self.owner["beat"] += 1
            self.owner["time"] = time.time()
            self._write()

    def start_heartbeat(self, on_lost: Callable[[str], None] | None = None) -> None:
        """Renew every ttl_s / 4 from a daemon thread; `on_lost(reason)` runs once if the lease is lost."""
        def beat():
            while not self._stop.wait(self.ttl_s / 4):
                try:
                    self.renew()
                except LeaseLost as e:
                    if on_lost is not None:
                        on_lost(str(e))
                    return
                except OSError:
                    pass  # storage hiccup: the next beat retries; a long outage ends in a takeover

        self._thread = threading.Thread(target=beat, name="run-dir-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and remove the lease file if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            now = read_owner(self.path)
            if now and now.get("id") == self.owner["id"]:
                self.path.unlink(missing_ok=True)

    def _write(self) -> None:
        tmp = self._tmp()
        tmp.write_text(json.dumps(self.owner))
        os.replace(tmp, self.path)

    def _tmp(self) -> Path:
        return self.path.with_name(f".{LEASE_NAME}.{self.owner['id'][:8]}.{threading.get_ident()}")
