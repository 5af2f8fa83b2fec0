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

On object storage (a run_dir URI, pubswap/run/storage.py) the lease is the object `<run_dir>/LEASE`. Object
stores have no hard links, and pyarrow exposes no conditional write, so a fresh lease is created as a
takeover is: written only where none exists, then read back after CONFIRM_S; of two drivers racing for
it the one whose write landed last wins and the other refuses. S3 and GCS are strongly consistent
(read-after-write), which that read-back needs. The window left is two drivers that both saw no lease
within CONFIRM_S of each other and whose writes both landed before either read back: then both read the
last one and exactly one proceeds.
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


def _machine() -> dict:
    """What identifies this process's machine and pid namespace beyond the hostname, which containers of
    one pod (and clones of one image) can share: the kernel's boot id and the pid namespace's inode."""
    out = {}
    try:
        out["boot_id"] = open("/proc/sys/kernel/random/boot_id").read().strip()
    except OSError:
        pass
    try:
        out["pidns"] = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pass
    return out


def describe(owner: dict) -> str:
    return f"pid {owner.get('pid')} on {owner.get('host')} (since {owner.get('started', '?')})"


def read_owner(path: Path) -> dict | None:
    try:
        return _parse(Path(path).read_text())
    except FileNotFoundError:
        return None
    except OSError:
        return {}


def _parse(text: str | bytes | None) -> dict | None:
    if text is None:
        return None
    try:
        owner = json.loads(text)
        return owner if isinstance(owner, dict) else {}
    except ValueError:
        return {}  # being replaced, or torn by a crash: treated as a lease whose heartbeat does not move


class _LocalFile:
    """The lease as a file of a (possibly shared) POSIX file system."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LEASE_NAME
        self.where = str(self.path.parent)

    def prepare(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def read(self) -> dict | None:
        return read_owner(self.path)

    def create(self, owner: dict) -> bool:
        tmp = self._tmp(owner)
        tmp.write_text(json.dumps(owner))
        try:
            os.link(tmp, self.path)  # atomic, and fails if the file exists (also on NFS)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def replace(self, owner: dict) -> None:
        tmp = self._tmp(owner)
        tmp.write_text(json.dumps(owner))
        os.replace(tmp, self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def _tmp(self, owner: dict) -> Path:
        return self.path.with_name(f".{LEASE_NAME}.{owner['id'][:8]}.{threading.get_ident()}")


class _ObjectFile:
    """The lease as an object of a run_dir URI (see the module docstring for what guards it)."""

    def __init__(self, store):
        self.store = store
        self.where = store.uri

    def prepare(self) -> None:
        pass

    def read(self) -> dict | None:
        try:
            return _parse(self.store.read_bytes(LEASE_NAME))
        except OSError:
            return {}

    def create(self, owner: dict) -> bool:
        if self.store.exists(LEASE_NAME):
            return False
        self.replace(owner)
        time.sleep(CONFIRM_S)
        return (self.read() or {}).get("id") == owner["id"]

    def replace(self, owner: dict) -> None:
        self.store.write_bytes(LEASE_NAME, json.dumps(owner).encode())

    def remove(self) -> None:
        self.store.delete(LEASE_NAME)


class Lease:
    def __init__(self, run_dir: Path | None, ttl_s: float = 60.0, store=None):
        """The lease of `run_dir` (a local path), or of the object store `store` (pubswap.run.storage.ObjectStore)."""
        self.file = _ObjectFile(store) if store is not None else _LocalFile(run_dir)
        self.ttl_s = ttl_s
        pid = os.getpid()
        self.owner = {
            "id": uuid.uuid4().hex,
            "host": socket.gethostname(),
            **_machine(),
            "pid": pid,
            "pid_start": _pid_start(pid),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "beat": 0,
            "time": time.time(),
        }
        self.lost: str | None = None  # why the lease was lost (set by the heartbeat thread)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- taking it -----------------------------------------------------------------------------------

    def acquire(self, say: Callable[[str], None] = print) -> Lease:
        """Take the lease, waiting out a silent owner on another host; raises LeaseHeld if the owner lives."""
        self.file.prepare()
        where = self.file.where
        while True:
            if self.file.create(self.owner):
                return self
            owner = self.file.read()
            if owner is None:
                continue  # released in between: try to create it again
            dead = self._owner_dead(owner, say)
            if dead is None:
                continue  # released or taken over meanwhile: look again
            if not dead:
                raise LeaseHeld(
                    f"{where} is in use by a live driver, {describe(owner)}; stop it first, "
                    f"or use another run_dir (its lease: {where}/{LEASE_NAME})"
                )
            self.file.replace(self.owner)
            time.sleep(CONFIRM_S)
            now = self.file.read()
            if not now or now.get("id") != self.owner["id"]:
                raise LeaseHeld(
                    f"{where}: another driver took over the lease of the dead "
                    f"{describe(owner)} at the same time ({describe(now or {})})"
                )
            say(f"took over the lease of {where} from the dead driver {describe(owner)}")
            return self

    def _same_machine(self, owner: dict) -> bool:
        """Whether the owner's pid can be looked up here: same host name, boot and pid namespace."""
        return (
            bool(owner.get("pid"))
            and owner.get("host") == self.owner["host"]
            and all(k in owner and owner[k] == self.owner[k] for k in ("boot_id", "pidns") if k in self.owner)
        )

    def _pid_dead(self, owner: dict) -> bool:
        start = _pid_start(int(owner["pid"]))
        return start is None or (owner.get("pid_start") is not None and start != owner["pid_start"])

    def _owner_dead(self, owner: dict, say: Callable[[str], None]) -> bool | None:
        """True: dead; False: alive; None: the file changed owner while we watched. A live owner on this
        machine gets ttl_s to exit: a resubmitted job often starts while its predecessor is being killed."""
        if self._same_machine(owner):
            if self._pid_dead(owner):
                return True
            say(
                f"{self.file.where} is leased by the live {describe(owner)} on this machine; waiting up to "
                f"{self.ttl_s:.0f}s (fault_tolerance.lease_ttl_s) for it to exit"
            )
            return self._watch(owner, 0.5, lambda now: True if self._pid_dead(owner) else None, otherwise=False)
        # another host (or an unreadable file): dead if the heartbeat does not move for ttl_s on our clock
        say(
            f"{self.file.where} is leased by {describe(owner)}; waiting up to {self.ttl_s:.0f}s "
            "(fault_tolerance.lease_ttl_s) for its heartbeat"
        )
        return self._watch(
            owner, 1.0, lambda now: False if now.get("beat") != owner.get("beat") else None, otherwise=True
        )

    def _watch(
        self, owner: dict, period_s: float, verdict: Callable[[dict], bool | None], otherwise: bool
    ) -> bool | None:
        """Re-read the lease every `period_s` (at most ttl_s / 8) for ttl_s: None as soon as it names
        another owner, `verdict(now)` as soon as that is not None, else `otherwise`."""
        deadline = time.monotonic() + self.ttl_s
        while time.monotonic() < deadline:
            time.sleep(min(period_s, self.ttl_s / 8))
            now = self.file.read()
            if now is None or now.get("id") != owner.get("id"):
                return None
            decided = verdict(now)
            if decided is not None:
                return decided
        return otherwise

    # -- holding it ----------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise LeaseLost unless the lease file still names this driver (call before every commit)."""
        if self.lost:
            raise LeaseLost(self.lost)
        now = self.file.read()
        deadline = time.monotonic() + min(2.0, self.ttl_s / 4)
        while now == {} and time.monotonic() < deadline:  # unreadable (a storage hiccup, a torn write): look again
            time.sleep(0.2)
            now = self.file.read()
        if now == {}:
            self.lost = f"the lease of {self.file.where} is unreadable, so this driver cannot tell it is still its own"
            raise LeaseLost(self.lost)
        if not now or now.get("id") != self.owner["id"]:
            self.lost = (
                f"the lease of {self.file.where} was taken over by "
                f"{describe(now) if now else 'nobody (the file is gone)'}"
            )
            raise LeaseLost(self.lost)

    def renew(self) -> None:
        with self._lock:
            self.check()
            self.owner["beat"] += 1
            self.owner["time"] = time.time()
            self.file.replace(self.owner)

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
            now = self.file.read()
            if now and now.get("id") == self.owner["id"]:
                self.file.remove()
