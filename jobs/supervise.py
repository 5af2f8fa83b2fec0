"""Submit a training job and resubmit it when it fails; each attempt resumes from the last checkpoint.

    python -m jobs.supervise --address http://localhost:8265 --max-retries 3 -- \\
        python -m jobs.train --config configs/X.yaml run_dir=s3://bucket/runs/X

Ray Jobs are never retried by Ray itself: a driver that dies (its node preempted, OOM-killed) leaves a
FAILED job. This supervisor runs beside the cluster (a laptop, a CI runner, the head node), streams the
job's log, and on FAILED submits the same entrypoint again, up to --max-retries times. The driver then
continues after its newest intact checkpoint, so run_dir must be storage every attempt can reach: an
object-store URI (s3://, gs://), or an absolute path on a file system every node mounts (each attempt
gets a fresh working directory). Resubmissions never carry --start-over: they resume. A job stopped by a user (STOPPED) is
not resubmitted; Ctrl-C stops the running job and exits.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import yaml

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# driver exit codes (jobs/train.py) that another attempt cannot fix
# 5 (run_dir busy: another live driver holds its lease) is retried: it is often the previous attempt's
# driver, still being killed, and each attempt first waits the lease's ttl for it to exit
FINAL_EXIT_CODES = {2: "bad config, data or model, or a run_dir that cannot be resumed",
                    3: "another driver took over run_dir",
                    4: "the run's storage is full: free space, then resubmit"}
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
            return (yaml.safe_load(path.read_text()) or {}).get("run_dir")
    return None


def retry_entrypoint(entrypoint: str) -> str:
    """A resubmission must resume what the first attempt wrote: never pass --start-over again."""
    return shlex.join(w for w in shlex.split(entrypoint) if w != START_OVER)


def supervise(client, entrypoint: str, runtime_env: dict, max_retries: int, name: str, poll_s: float = 2.0,
              out=print) -> int:
    """Submit `entrypoint` until a job SUCCEEDS (0) or retries run out / a user stops it (1)."""
    for attempt in range(max_retries + 1):
        if attempt == 1 and retry_entrypoint(entrypoint) != entrypoint:
            entrypoint = retry_entrypoint(entrypoint)
            out(f"[supervise] resubmissions resume the run: {START_OVER} dropped from the command")
        sid = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env, submission_id=f"{name}-{attempt}")
        out(f"[supervise] attempt {attempt + 1}/{max_retries + 1}: submitted job {sid}")
        shown = 0
        try:
            while True:
                status = str(client.get_job_status(sid).value)
                logs = client.get_job_logs(sid)
                if len(logs) > shown:
                    out(logs[shown:].rstrip("\n"))
                    shown = len(logs)
                if status in TERMINAL:
                    break
                time.sleep(poll_s)
        except KeyboardInterrupt:
            client.stop_job(sid)
            out(f"[supervise] interrupted: stopped job {sid}")
            return 130
        if status == "SUCCEEDED":
            out(f"[supervise] job {sid} succeeded after {attempt + 1} attempt(s)")
            return 0
        if status == "STOPPED":
            out(f"[supervise] job {sid} was stopped by a user; not resubmitting")
            return 1
        info = client.get_job_info(sid)
        message = info.message or ""
        out(f"[supervise] job {sid} failed: {message.strip().splitlines()[-1] if message.strip() else 'no message'}")
        code = getattr(info, "driver_exit_code", None)
        if code in FINAL_EXIT_CODES:
            out(f"[supervise] the driver exited with {code} ({FINAL_EXIT_CODES[code]}): a resubmission would end "
                "the same way; not resubmitting")
            return 1
        if attempt < max_retries:
            out("[supervise] resubmitting; the driver resumes after its newest intact checkpoint")
    out(f"[supervise] giving up after {max_retries + 1} failed attempts")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="python -m jobs.supervise [options] -- python -m jobs.train ...")
    parser.add_argument("--address", default=None, help="Ray dashboard address (default: $RAY_ADDRESS)")
    parser.add_argument("--max-retries", type=int, default=3, help="resubmissions after a failure (default 3)")
    parser.add_argument("--working-dir", default=".", help="uploaded with each attempt (default: .)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment variable for the job (repeatable)")
    parser.add_argument("--name", default=None, help="submission id prefix (default: pubswap-<run dir>-<time>)")
    parser.add_argument("--poll-s", type=float, default=2.0, help="seconds between status polls")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the training command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the training command after --")
    if args.max_retries < 0:
        parser.error("--max-retries must be >= 0")
    working_dir = Path(args.working_dir).resolve()
    run_dir = run_dir_of(command, working_dir)
    from pubswap.storage import is_uri

    if not run_dir or not (is_uri(run_dir) or Path(run_dir).is_absolute()):
        parser.error(f"the training command's run_dir is {run_dir!r}: give run_dir=s3://bucket/prefix (or an "
                     "absolute path on storage every node reaches), or resubmitted jobs cannot resume")
    env_vars = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--env {item!r} is not KEY=VALUE")
        env_vars[key] = value
    runtime_env = {"working_dir": str(working_dir), **({"env_vars": env_vars} if env_vars else {})}
    name = args.name or f"pubswap-{run_dir.rstrip('/').rsplit('/', 1)[-1]}-{time.strftime('%Y%m%d-%H%M%S')}"

    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(args.address)
    return supervise(client, shlex.join(command), runtime_env, args.max_retries, name, args.poll_s)


if __name__ == "__main__":
    sys.exit(main())
