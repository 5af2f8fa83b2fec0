"""Shared set-up for the tests that run on a local Ray cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from pubswap.config import RunConfig, load_config
from pubswap.run.checkpoint import latest_checkpoint
from pubswap.run.faults import ENV as FAULT_ENV


def tiny_config(model_dir: Path, run_dir: Path, *overrides: str) -> RunConfig:
    """2 clients, 2 rounds of tau=4 with public steps at 2 and 4, on the tiny random model."""
    base = [
        f"model.path={model_dir}",
        "model.dtype=float32",
        "model.max_prompt_len=96",
        "model.max_response_len=6",
        "lora.r=8",
        "lora.alpha=16",
        "grpo.K=8",
        "grpo.b=4",
        "grpo.lr=1e-3",
        "federation.num_clients=2",
        "federation.rounds=2",
        "federation.tau=4",
        "federation.swap_period=2",
        "data.tasks={chain_sum: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}, "
        "basic_arithmetic: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}",
        "data.per_client=24",
        "data.public_size=12",
        "data.test_size=8",
        "rollout.backend=hf",
        "resources.cpus_per_client=0.5",
        f"run_dir={run_dir}",
        # the tiny models answer with a bare digit, never a \boxed{}: only the lenient reward credits them,
        # and without rewards there are no advantages, no updates and no swaps to test
        "data.reward_mode=lenient",
    ]
    return load_config(None, base + list(overrides))


RAY_ENV = {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": "1"}}


# --- fault tolerance: a small 2-round PubSwap run driven as a real `python -m jobs.train` process ------

REPO = Path(__file__).resolve().parents[1]
FT = ["federation.rounds=2", "federation.tau=3", "model.max_response_len=1", "federation.method=pubswap-balanced"]


def ft_config(model_dir: Path, run_dir: Path, *extra: str) -> RunConfig:
    """2 rounds of tau=3 (steps 1 private, 2 public, 3 private), 2 clients, digit model."""
    return tiny_config(model_dir, run_dir, *FT, *extra)


def write_config(cfg: RunConfig, path: Path | None = None) -> Path:
    """The config as a YAML file: `path`, or beside a local run_dir."""
    path = path or Path(cfg.run_dir).parent / f"{Path(cfg.run_dir).name}.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    return path


def _driver_env(env_extra: dict | None = None) -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", FAULT_ENV)} | (env_extra or {})


def run_driver(
    cfg: RunConfig, env_extra: dict | None = None, args: tuple[str, ...] = (), config_path: Path | None = None
) -> subprocess.CompletedProcess:
    """`python -m jobs.train --config X [args]` in a fresh process (which starts its own local Ray)."""
    return subprocess.run(
        [sys.executable, "-m", "jobs.train", "--config", str(write_config(cfg, config_path)), *args],
        cwd=REPO,
        env=_driver_env(env_extra),
        capture_output=True,
        text=True,
        timeout=600,
    )


def start_driver(
    cfg: RunConfig, stderr=subprocess.PIPE, env_extra: dict | None = None, config_path: Path | None = None
) -> subprocess.Popen:
    """Like run_driver, but running: read its stdout line by line, signal it, wait for it."""
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.train", "--config", str(write_config(cfg, config_path))],
        cwd=REPO,
        env=_driver_env(env_extra),
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def parent_pid(pid: int) -> int | None:
    """A process's parent pid from /proc/PID/stat (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def process_tree(pid: int) -> list[int]:
    """`pid` and every process descended from it (a driver's local Ray: GCS, raylet, workers, agents)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (ppid := parent_pid(int(d))) is not None:
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def stop_ray_in(temp_dir: str, grace_s: float = 10.0) -> None:
    """Stop the Ray started with `ray start --temp-dir=temp_dir` and nothing else: its daemons (their
    command lines name the directory) and every process they started (workers rename themselves
    ray::..., so they are found as descendants). `ray stop --force` would end every Ray on the machine:
    a user's run, or another cluster of the same test session."""
    import signal
    import time

    mine, p = set(), os.getpid()  # this process and its ancestors may name the directory too
    while p is not None and p > 1:
        mine.add(p)
        p = parent_pid(p)
    roots = [int(d) for d in os.listdir("/proc") if d.isdigit() and temp_dir in cmdline(int(d))]
    pids = {p for root in roots if root not in mine for p in process_tree(root)} - mine
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.2)


def metrics(run_dir) -> list[dict]:
    return [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def final_sha(run_dir, rounds: int = 2) -> str:
    """sha256 of the final global adapter's weights file: equal means equal to the last bit."""
    ck = latest_checkpoint(Path(run_dir) / "checkpoints")
    assert ck is not None and ck.round == rounds
    return ck.state["weights_sha256"]


def step_rewards(run_dir) -> list:
    return [[c["reward_mean"] for st in rec["steps"] for c in st["clients"]] for rec in metrics(run_dir)]


def ray_cli() -> str:
    import shutil

    exe = Path(sys.executable).with_name("ray")
    return str(exe) if exe.exists() else shutil.which("ray")


def tb_scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in run_dir/tensorboard, as {tag: [(step, value), ...]} in file order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(Path(run_dir) / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# --- the process table: what a run leaves behind ------------------------------------------------

RUN_PROCESSES = (
    "ray::ClientActor",
    "ray::ServerActor",
    "VLLM::EngineCore",
    "VLLM::Worker",
    "raylet",
    "gcs_server",
    "ray::DashboardAgent",
    "ray::RuntimeEnvAgent",
)


def cmdline(pid: int) -> str:
    """A process's command line ('' if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def proc_state(pid: int) -> str:
    """A process's state letter from /proc/PID/stat ('R', 'S', 'T', 'Z', ...; 'X' if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def alive(pid: int) -> bool:
    return proc_state(pid) not in ("Z", "X")


def still_running(pids, within_s: float) -> dict[int, str]:
    """pid -> command line of those of `pids` still alive after waiting up to `within_s` for them to end.
    Those are then SIGKILLed, so that none is left to the next test (the caller asserts on the result)."""
    deadline = time.monotonic() + within_s
    while (left := {p: cmdline(p) for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def run_processes() -> dict[int, str]:
    """pid -> command line of every process of a local Ray run (actors, engines, Ray's daemons)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        cmd = cmdline(int(pid))
        if cmd and alive(int(pid)) and any(name in cmd for name in RUN_PROCESSES):
            out[int(pid)] = cmd
    return out


def kill_cluster_when(
    proc: subprocess.Popen, marker: str | None = None, run_dir: Path | None = None, timeout_s: float = 30.0, **event
) -> list[int]:
    """Wait for the driver's `event` in run_dir/events.jsonl (a driver from start_logged_driver) or, for a
    run_dir in an object store, read its stdout until a line contains `marker`; then SIGKILL the driver and
    every process descended from it (its whole local Ray cluster) at once, from outside, and wait until
    none is left; returns the killed pids. Fails with the driver's output if the moment never comes."""
    import signal
    import time

    seen = []
    try:
        if marker is None:
            EventWatch(proc, run_dir).wait(**event)
        else:
            for line in proc.stdout:
                seen.append(line)
                if marker in line:
                    break
        tree = process_tree(proc.pid)
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "".join(seen)[-2000:]
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in tree):
        assert time.monotonic() < deadline, (
            f"processes of the killed cluster still alive: {[p for p in tree if alive(p)]}"
        )
        time.sleep(0.5)
    return tree


def start_logged_driver(cfg: RunConfig, env_extra: dict | None = None) -> subprocess.Popen:
    """Like start_driver, but the console (stdout and stderr) goes to a file beside run_dir, read with
    console_of(proc): the test follows the run through its events (EventWatch), not its console text."""
    path = Path(cfg.run_dir).parent / f"{Path(cfg.run_dir).name}.console"
    with open(path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.train", "--config", str(write_config(cfg))],
            cwd=REPO,
            env=_driver_env(env_extra),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    proc.console = path
    return proc


def console_of(proc: subprocess.Popen) -> str:
    return proc.console.read_text(errors="replace")


class EventWatch:
    """Follows a running driver's run_dir/events.jsonl: each wait() returns the first event after those
    already looked at whose fields include `match` (so successive waits follow the run forward)."""

    def __init__(self, proc: subprocess.Popen, run_dir: Path | str):
        self.proc, self.run_dir, self.seen = proc, Path(run_dir), 0

    def wait(self, timeout_s: float = 600, **match) -> dict:
        import time

        from pubswap.run.events import read_events

        deadline = time.monotonic() + timeout_s
        while True:
            exited = self.proc.poll() is not None  # before reading: its last events are written by then
            events = read_events(self.run_dir)
            for i in range(self.seen, len(events)):
                if all(events[i].get(k) == v for k, v in match.items()):
                    self.seen = i + 1
                    return events[i]
            self.seen = len(events)
            tail = console_of(self.proc)[-3000:] if hasattr(self.proc, "console") else ""
            assert not exited, f"the driver exited ({self.proc.returncode}) before an event {match}:\n{tail}"
            assert time.monotonic() < deadline, f"no event {match} in {timeout_s:.0f}s:\n{tail}"
            time.sleep(0.05)
