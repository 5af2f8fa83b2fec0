"""Run untrusted generated code (HumanEval / MBPP style: a program that passes when it exits 0) in a
separate, limited process, never in the driver's or an actor's own process.

Layers, each of which stops something on its own:
  - a fresh Python (`-I`: no user site, no PYTHON* variables) in a new temporary working directory that
    is removed afterwards, with an environment of PATH and HOME only, in its own process group, killed
    (the whole group) at the wall-clock limit;
  - resource limits: address space (`memory_mb`), CPU seconds, file size, open files;
  - where the kernel allows an unprivileged user namespace (`unshare --user --net`), no network device
    at all;
  - an audit hook (PEP 578) installed before the program runs, which it cannot remove: files may be
    read only in the working directory and the Python installation, written, renamed or deleted only in
    the working directory; sockets, fork, exec, subprocesses and ctypes are refused.
A program that is stopped, runs out of time or memory, or breaks a rule exits non-zero: a failure.
This bounds what a model's mistake (or a hostile prompt's answer) can do; it is not a jail for an
attacker who can escape the Python interpreter (a memory-safety bug in it), and without a user
namespace the network is refused by the audit hook alone.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# Runs in the child before the program: the audit hook, then the program itself.
_BOOTSTRAP = r"""
import os, sys
_root = os.path.realpath(os.getcwd())
_py = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
_py |= {os.path.realpath(os.path.dirname(os.__file__))}
_devices = {"/dev/null", "/dev/urandom", "/dev/zero"}
_denied = ("socket.", "subprocess.", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
           "os.system", "os.kill", "os.killpg", "ctypes.", "pty.", "os.chdir", "os.chroot", "os.setuid")
_writes = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod", "os.chown",
           "os.link", "os.symlink", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"}

_write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def _inside(path, roots):
    if isinstance(path, int):
        return True  # an already open descriptor
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    real = os.path.realpath(os.path.join(_root, path))
    return real in _devices or any(real == r or real.startswith(r + os.sep) for r in roots)

def _hook(event, args):
    if event.startswith(_denied):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        path, mode, flags = args[0], args[1], args[2] or 0
        writing = bool(mode and any(c in mode for c in "wax+")) or bool(flags & _write_flags)
        if path is not None and not _inside(path, {_root} if writing else {_root, *_py}):
            raise PermissionError(f"sandbox: open({path!r}, {mode!r}) outside the working directory")
    elif event in _writes or event in ("os.listdir", "os.scandir"):
        roots = {_root} if event in _writes else {_root, *_py}  # imports list the library's folders
        for p in args:
            if isinstance(p, (str, bytes, os.PathLike)) and not _inside(os.fspath(p), roots):
                raise PermissionError(f"sandbox: {event}({p!r}) outside the working directory")

sys.addaudithook(_hook)
del _hook
_code = open("program.py").read()
exec(compile(_code, "program.py", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class Outcome:
    passed: bool  # exit status 0 within the limits
    reason: str  # "passed", "failed (exit N)", "timeout", "killed by signal N"
    stdout: str
    stderr: str


@cache
def network_namespace() -> bool:
    """Whether `unshare --user --map-root-user --net` works here (an unprivileged user namespace)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--net", "true"], timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _limits(memory_mb: int, cpu_s: int):
    def apply() -> None:
        memory = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 2**20, 16 * 2**20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_program(program: str, timeout_s: float = 10.0, memory_mb: int = 1024, output_chars: int = 4000) -> Outcome:
    """Run `program` (Python source) in the sandbox; it passes when it exits 0 within `timeout_s`."""
    workdir = Path(tempfile.mkdtemp(prefix="pubswap-sandbox-"))
    try:
        (workdir / "program.py").write_text(program)
        cmd = [sys.executable, "-I", "-c", _BOOTSTRAP]
        if network_namespace():
            cmd = ["unshare", "--user", "--map-root-user", "--net", *cmd]
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env={"PATH": "/usr/bin:/bin", "HOME": str(workdir), "PYTHONHASHSEED": "0"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: killed whole
            preexec_fn=_limits(memory_mb, max(1, int(timeout_s) + 1)),
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
            reason = None
        except subprocess.TimeoutExpired:
            reason = "timeout"
            _kill_group(proc.pid)
            out, err = proc.communicate()
        finally:
            _kill_group(proc.pid)  # anything the program left in its group
        if reason is None:
            code = proc.returncode
            reason = "passed" if code == 0 else (f"killed by signal {-code}" if code < 0 else f"failed (exit {code})")
        return Outcome(reason == "passed", reason, out[-output_chars:], err[-output_chars:])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
