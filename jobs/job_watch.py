"""A driver under `ray job submit` stops when its job does.

Ray runs a job's entrypoint as a child of the job's supervisor actor (through `/bin/sh -c`). `ray job stop`
signals the whole process tree (SIGTERM, handled by jobs/train.py like Ctrl-C), but if the entrypoint's
shell alone is killed, or the supervisor dies, Ray marks the job FAILED while the Python driver, now an
orphan re-parented to init, keeps running its actors. A resubmitted job then finds a second driver
on its run_dir. The watch below notices that the driver's parent is gone and sends the driver SIGTERM,
so it shuts its actors and engines down like any stopped run.

Only inside a Ray job (RAY_JOB_CONFIG_JSON_ENV_VAR is set): a driver started by hand under `nohup`
is meant to outlive its shell.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for the entrypoint


def in_ray_job() -> bool:
    return bool(os.environ.get(JOB_ENV))


def stop_with_parent(poll_s: float = 1.0) -> threading.Thread | None:
    """Inside a Ray job: SIGTERM this process once its parent process is gone; returns the watcher."""
    if not in_ray_job():
        return None
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        print(
            f"the job's entrypoint process (pid {parent}) is gone: Ray has ended this job, so this driver stops too",
            file=sys.stderr,
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="job-parent-watch", daemon=True)
    thread.start()
    return thread
