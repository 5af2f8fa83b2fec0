"""A client actor dies with its vLLM engine.

vLLM runs its engine core (and on GPUs its workers) in child processes of the actor. When one of them
dies (a CUDA error, the kernel's OOM killer, a signal), vLLM logs "engine core exited unexpectedly" but a
`generate` in flight may never return, and the driver would wait forever on a live actor with a dead
engine. The watchdog polls the engine processes found right after the engine started; once one is gone
it prints one line, leaves it for the driver (actors/exit_note.py) and ends the actor's process. Ray
then restarts the actor (a fresh engine) and the driver, whose call failed with the actor's death (or
which saw the restarted actor's new process), redoes the round (jobs/federation.py).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

import psutil

from actors import exit_note

ENGINE_PREFIX = "VLLM::"  # vLLM names its engine core and worker processes so (setproctitle)


def engine_processes(root: int | None = None) -> list[psutil.Process]:
    """The running vLLM engine processes under `root` (default: this process)."""
    out = []
    for p in psutil.Process(root or os.getpid()).children(recursive=True):
        try:
            if any(part.startswith(ENGINE_PREFIX) for part in [p.name(), *p.cmdline()[:1]]):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _gone(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


class EngineWatchdog:
    """Watches `procs`; calls `on_death(line)` once if one of them ends before `stop()`."""

    def __init__(self, procs: list[psutil.Process], on_death: Callable[[str], None] | None = None, poll_s: float = 1.0):
        self.procs = list(procs)
        self.names = {p.pid: _name(p) for p in self.procs}
        self.poll_s = poll_s
        self.on_death = on_death or exit_actor
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-watchdog", daemon=True)
        if self.procs:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            dead = [p for p in self.procs if _gone(p)]
            if dead and not self._stop.is_set():
                p = dead[0]
                self.on_death(
                    f"vLLM engine process {p.pid} ({self.names[p.pid]}) of this client actor (pid {os.getpid()}) "
                    "exited; the actor exits too, so that it is restarted with a fresh engine and the "
                    "round is redone"
                )
                return

    def stop(self) -> None:
        """Before the engine is shut down on purpose."""
        self._stop.set()

    def engine_gone(self) -> bool:
        """Whether one of the engine processes has ended (the poll may not have seen it yet)."""
        return any(_gone(p) for p in self.procs)


def engine_dead(error: BaseException | None) -> bool:
    """Whether `error` (or an error it was raised from) is vLLM's EngineDeadError: a call reached the
    engine after its process died, before the watchdog's next poll."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if type(error).__name__ == "EngineDeadError":
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _name(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:
        return "vLLM engine"


def exit_actor(line: str) -> None:
    """End this actor's process at once, saying why: Ray restarts it, and its caller sees a lost actor."""
    print(line, file=sys.stderr, flush=True)
    exit_note.leave(line)  # the console line may not reach the driver; the note does
    os._exit(1)  # no cleanup: the engine is gone, and a graceful exit would wait on it
