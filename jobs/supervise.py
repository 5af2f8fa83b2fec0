"""Submit a training job and resubmit it when it fails; each attempt resumes from the last checkpoint.

    python -m jobs.supervise --address http://localhost:8265 --max-retries 3 -- \\
        python -m jobs.train --config configs/X.yaml run_dir=s3://bucket/runs/X

Ray Jobs are never retried by Ray itself: a driver that dies (its node preempted, OOM-killed) leaves a FAILED
job. This supervisor runs beside the cluster (a laptop, a CI runner, the head node), streams the job's log,
and on FAILED submits the same entrypoint again, up to --max-retries times. The driver then continues after
its newest intact checkpoint, so run_dir must be storage every attempt can reach: an object-store URI (s3://,
gs://), or an absolute path on a file system every node mounts (each attempt gets a fresh working directory).
Resubmissions never carry --start-over: they resume. A job stopped by a user (STOPPED) is not resubmitted;
Ctrl-C stops the running job and exits.

The dashboard may be unreachable for a while (restarting, a dropped port-forward): every call is retried
with backoff for up to --patience-s. The log is streamed, not re-read. Submission ids are <name>-<attempt>:
a supervisor started again with the same --name (the default is derived from run_dir) re-attaches to
the job still running instead of submitting a second driver for the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import re
import shlex
import sys
import time
from pathlib import Path

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# driver exit codes (jobs/train.py) that another attempt cannot fix
# 5 (run_dir busy: another live driver holds its lease) is retried: it is often the previous attempt's
# driver, still being killed, and each attempt first waits the lease's ttl for it to exit
FINAL_EXIT_CODES = {
    2: "bad config, data or model, or a run_dir that cannot be resumed",
    3: "another driver took over run_dir",
    4: "the run's storage is full: free space, then resubmit",
}
START_OVER = "--start-over"


def run_dir_of(command: list[str], working_dir: Path) -> str | None:
    """The run_dir the training command will use: a `run_dir=` override, else its --config's run_dir."""
    for arg in reversed(command):
        if arg.startswith("run_dir="):
            return arg.partition("=")[2]
    if "--config" in command and command.index("--config") + 1 < len(command):
        path = Path(command[command.index("--config") + 1])
        path = path if path.is_absolute() else working_dir / path
        if path.is_file():
            from pubswap.config import ConfigError, read_yaml

            try:
                return read_yaml(path).get("run_dir")  # with the files it extends
            except ConfigError:
                return None  # the driver will say what is wrong with it
    return None


def retry_entrypoint(entrypoint: str) -> str:
    """A resubmission must resume what the first attempt wrote: never pass --start-over again."""
    return shlex.join(w for w in shlex.split(entrypoint) if w != START_OVER)


class Unreachable(RuntimeError):
    """The dashboard stayed unreachable for longer than the supervisor's patience."""


def transient(err: BaseException) -> bool:
    """An error another try may not see: the dashboard down or restarting, a dropped connection, a 5xx."""
    import aiohttp
    import requests

    if isinstance(
        err,
        (
            requests.ConnectionError,
            requests.Timeout,
            aiohttp.ClientError,
            ConnectionError,
            asyncio.TimeoutError,
            TimeoutError,
        ),
    ):
        return True
    text = str(err)
    # JobSubmissionClient: "Request failed with status code 503: ..."; tail_job_logs: "WebSocket ... closed"
    return isinstance(err, RuntimeError) and (
        re.search(r"status code 5\d\d", text) is not None or "WebSocket" in text or "Failed to connect" in text
    )


class Dashboard:
    """The Jobs API through `JobSubmissionClient`, each call retried with exponential backoff (1, 2, 4, ...
    30 s) while it fails with a transient error, for up to `patience_s` of consecutive failure. The client
    itself is made lazily (its constructor asks the dashboard for its version, which can fail too)."""

    def __init__(self, make_client, patience_s: float = 600.0, out=print, sleep=time.sleep):
        self._make, self._client, self.patience_s, self.out, self.sleep = make_client, None, patience_s, out, sleep

    @property
    def client(self):
        if self._client is None:
            self._client = self._make()
        return self._client

    def backoff(self, what: str, err: BaseException, failing_since: float, tries: int) -> None:
        """Sleep before the next try, or raise Unreachable when patience is spent."""
        waited = time.monotonic() - failing_since
        if waited >= self.patience_s:
            raise Unreachable(f"the dashboard has been unreachable for {waited:.0f} s ({what}: {err})") from err
        delay = min(30.0, 2.0**tries, max(0.1, self.patience_s - waited))
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        self.out(f"[supervise] dashboard unreachable ({what}: {first}); retrying in {delay:.0f} s")
        self.sleep(delay)

    def call(self, what: str, method: str, *args, **kwargs):
        failing_since, tries = None, 0
        while True:
            try:
                return getattr(self.client, method)(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - sorted by transient()
                if not transient(err):
                    raise
                failing_since = failing_since or time.monotonic()
                self.backoff(what, err, failing_since, tries)
                tries += 1


class LogFollower:
    """Prints a job's log as it grows, line by line, each line once. The log is streamed over the
    dashboard's websocket (no whole-log re-reads while connected); the stream starts at the log's first
    byte, so after a reconnect the characters already consumed are skipped."""

    def __init__(self, out=print):
        self.out, self.consumed, self.partial = out, 0, ""

    def feed(self, chunk: str, offset: int) -> None:
        """`chunk` starts at character `offset` of the log."""
        new = chunk[max(0, self.consumed - offset) :]
        if not new:
            return
        self.consumed = offset + len(chunk)
        *lines, self.partial = (self.partial + new).split("\n")
        for line in lines:
            self.out(line)

    def flush(self) -> None:
        if self.partial:
            self.out(self.partial)
            self.partial = ""

    async def _stream(self, dashboard: Dashboard, sid: str, poll_s: float) -> None:
        """One websocket session: returns when the server closes it (the job is over and all its log sent)."""
        offset = 0
        stream = dashboard.client.tail_job_logs(sid).__aiter__()
        try:
            while True:
                nxt = asyncio.ensure_future(stream.__anext__())
                while not nxt.done():
                    await asyncio.wait({nxt}, timeout=poll_s)
                    if not nxt.done():
                        # a quiet log: make sure the dashboard still answers (a stalled connection
                        # would otherwise wait forever); a status that fails ends this session
                        status = await asyncio.get_running_loop().run_in_executor(
                            None, lambda: dashboard.client.get_job_status(sid)
                        )
                        if str(status.value) in TERMINAL:
                            await asyncio.wait({nxt}, timeout=10 * poll_s + 5)
                            if not nxt.done():
                                nxt.cancel()
                                raise ConnectionError("the log stream did not close after the job ended")
                try:
                    chunk = nxt.result()
                except StopAsyncIteration:
                    return
                self.feed(chunk, offset)
                offset += len(chunk)
        finally:
            await stream.aclose()

    def follow(self, dashboard: Dashboard, sid: str, poll_s: float) -> None:
        """Until the job's log is complete, reconnecting with backoff while the dashboard is unreachable."""
        failing_since, tries = None, 0
        while True:
            try:
                asyncio.run(self._stream(dashboard, sid, poll_s))
                self.flush()
                return
            except Exception as err:  # noqa: BLE001 - sorted by transient()
                if not transient(err):
                    raise
                failing_since = failing_since or time.monotonic()
                dashboard.backoff("following the log", err, failing_since, tries)
                tries += 1


def attempts_of(dashboard: Dashboard, name: str) -> list[tuple[int, object]]:
    """(attempt number, job details) of the jobs this supervisor submitted under `name`, oldest first."""
    pattern = re.compile(rf"{re.escape(name)}-(\d+)")
    found = []
    for job in dashboard.call("listing jobs", "list_jobs"):
        m = pattern.fullmatch(job.submission_id or "")
        if m:
            found.append((int(m.group(1)), job))
    return sorted(found, key=lambda pair: pair[0])


def submit(dashboard: Dashboard, sid: str, entrypoint: str, runtime_env: dict) -> None:
    """Submit under `sid`; a submission whose answer was lost (the job exists) counts as submitted."""
    failing_since, tries = None, 0
    while True:
        try:
            dashboard.client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env, submission_id=sid)
            return
        except Exception as err:  # noqa: BLE001 - sorted by transient() and the job's existence
            if tries and "already exists" in str(err):
                return  # an earlier try reached the server; its answer did not reach us
            if not transient(err):
                raise
            failing_since = failing_since or time.monotonic()
            dashboard.backoff("submitting", err, failing_since, tries)
            tries += 1


def supervise(
    dashboard: Dashboard,
    entrypoint: str,
    runtime_env: dict,
    max_retries: int,
    name: str,
    poll_s: float = 2.0,
    out=print,
) -> int:
    """Submit `entrypoint` until a job SUCCEEDS (0) or retries run out / a user stops it (1). A job of an
    earlier supervisor with the same `name` that is still running is re-attached, not submitted again."""
    earlier = attempts_of(dashboard, name)
    first, attach = 0, None
    if earlier:
        number, job = earlier[-1]
        status = str(job.status.value)
        if status not in TERMINAL:
            first, attach = number, job.submission_id
            out(f"[supervise] re-attached to job {attach} ({status}), submitted by an earlier supervisor")
        elif status == "SUCCEEDED":
            out(f"[supervise] job {job.submission_id} already succeeded; nothing to do")
            return 0
        else:
            first = number + 1
        entrypoint = retry_entrypoint(entrypoint)  # the run exists: every later attempt resumes it
    for attempt in range(first, first + max_retries + 1):
        tries_left = first + max_retries - attempt
        if attempt > 0 and retry_entrypoint(entrypoint) != entrypoint:
            entrypoint = retry_entrypoint(entrypoint)
            out(f"[supervise] resubmissions resume the run: {START_OVER} dropped from the command")
        sid = f"{name}-{attempt}"
        if sid != attach:
            submit(dashboard, sid, entrypoint, runtime_env)
            out(f"[supervise] attempt {attempt - first + 1}/{max_retries + 1}: submitted job {sid}")
        try:
            LogFollower(out).follow(dashboard, sid, poll_s)
            while (
                status := str(dashboard.call("reading the job status", "get_job_status", sid).value)
            ) not in TERMINAL:
                time.sleep(poll_s)  # the log is complete once the job is over; its status may lag a little
        except KeyboardInterrupt:
            dashboard.call("stopping the job", "stop_job", sid)
            out(f"[supervise] interrupted: stopped job {sid}")
            return 130
        if status == "SUCCEEDED":
            out(f"[supervise] job {sid} succeeded after {attempt - first + 1} attempt(s)")
            return 0
        if status == "STOPPED":
            out(f"[supervise] job {sid} was stopped by a user; not resubmitting")
            return 1
        info = dashboard.call("reading the job's exit", "get_job_info", sid)
        message = info.message or ""
        out(f"[supervise] job {sid} failed: {message.strip().splitlines()[-1] if message.strip() else 'no message'}")
        code = getattr(info, "driver_exit_code", None)
        if code in FINAL_EXIT_CODES:
            out(
                f"[supervise] the driver exited with {code} ({FINAL_EXIT_CODES[code]}): a resubmission would end "
                "the same way; not resubmitting"
            )
            return 1
        if tries_left:
            out("[supervise] resubmitting; the driver resumes after its newest intact checkpoint")
    out(f"[supervise] giving up after {max_retries + 1} failed attempts")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], usage="python -m jobs.supervise [options] -- python -m jobs.train ..."
    )
    parser.add_argument("--address", default=None, help="Ray dashboard address (default: $RAY_ADDRESS)")
    parser.add_argument("--max-retries", type=int, default=3, help="resubmissions after a failure (default 3)")
    parser.add_argument("--working-dir", default=".", help="uploaded with each attempt (default: .)")
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="environment variable for the job (repeatable)"
    )
    parser.add_argument(
        "--name",
        default=None,
        help="submission id prefix; a supervisor started again with the same name re-attaches to "
        "its running job (default: pubswap-<run dir's last part>-<hash of run_dir>)",
    )
    parser.add_argument(
        "--poll-s", type=float, default=2.0, help="seconds between status checks while the log is quiet (default 2)"
    )
    parser.add_argument(
        "--patience-s",
        type=float,
        default=600.0,
        help="how long the dashboard may stay unreachable before the supervisor gives up; its "
        "job keeps running and a restarted supervisor re-attaches (default 600)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the training command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the training command after --")
    if args.max_retries < 0:
        parser.error("--max-retries must be >= 0")
    working_dir = Path(args.working_dir).resolve()
    run_dir = run_dir_of(command, working_dir)
    from pubswap.run.storage import is_uri

    if not run_dir or not (is_uri(run_dir) or Path(run_dir).is_absolute()):
        parser.error(
            f"the training command's run_dir is {run_dir!r}: give run_dir=s3://bucket/prefix (or an "
            "absolute path on storage every node reaches), or resubmitted jobs cannot resume"
        )
    env_vars = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--env {item!r} is not KEY=VALUE")
        env_vars[key] = value
    runtime_env = {"working_dir": str(working_dir), **({"env_vars": env_vars} if env_vars else {})}
    digest = hashlib.sha256(run_dir.rstrip("/").encode()).hexdigest()[:8]
    name = args.name or f"pubswap-{run_dir.rstrip('/').rsplit('/', 1)[-1]}-{digest}"

    from ray.job_submission import JobSubmissionClient

    dashboard = Dashboard(lambda: JobSubmissionClient(args.address), patience_s=args.patience_s)
    try:
        return supervise(dashboard, shlex.join(command), runtime_env, args.max_retries, name, args.poll_s)
    except Unreachable as err:
        print(
            f"[supervise] {err}; giving up: the job, if any, keeps running; run the same command again to "
            f"re-attach to it (--name {name})",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
