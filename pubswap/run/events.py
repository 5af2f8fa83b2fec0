"""run_dir/events.jsonl: what happened in a run, one JSON object per line, for tools and tests.

The console says the same things for people; this file says them for programs, so nothing has to parse
console text. Every line has `time` (unix seconds), `event` and `pid` (the driver's), then the event's
fields:

    lease         notes: [what taking it said]                 a driver holds run_dir's lease
    start         resume_round (null: a fresh start)           it begins (or resumes) the run
    actors        pids: [per actor]                            the client actors are up
    evaluated     round, pass@1, pass@1_se, ...                an evaluation (round 0: the base model)
    step          round, step, public, reward: [per client]    a local step of every participant
    inround       round, step                                  an in-round checkpoint is committed
    committed     round                                        a round's average is committed
    recovery      phase, round, what, error, retry, retries    an actor died or hung; the clients restart
                  (phase: start | resume | round | evaluation)
    recovered     phase, round, seconds                        they are back
    round         round, recoveries, round_s                   a round is done (evaluated if due)
    done          final_pass@1, wall_s                         the run finished

The file is appended to, never rewritten: a resumed run adds a `start` line, so it keeps every
attempt's history (a redone round appears once per attempt). `--start-over` deletes it with the run.
Each line is written and flushed whole before the driver goes on, so a reader never sees a torn line
except the last one of a killed driver, which `read_events` skips.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

NAME = "events.jsonl"


class EventLog:
    """Appends events to `run_dir/events.jsonl`; `EventLog(None)` records nothing. `may_write()`, asked
    before each line, stops the log (a driver that knows it lost its run_dir's lease writes nothing more)."""

    def __init__(self, run_dir: Path | None, may_write: Callable[[], bool] = lambda: True):
        self.path = None if run_dir is None else Path(run_dir) / NAME
        self.may_write = may_write

    def emit(self, event: str, **fields) -> None:
        if self.path is None or not self.may_write():
            return
        line = json.dumps({"time": round(time.time(), 3), "event": event, "pid": os.getpid(), **fields})
        with open(self.path, "a") as f:
            f.write(line + "\n")


def read_events(run_dir: Path | str, event: str | None = None) -> list[dict]:
    """Every whole event of the run (only those named `event`, if given), oldest first."""
    path = Path(run_dir) / NAME
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the last line of a driver killed while writing it
        if event is None or record.get("event") == event:
            out.append(record)
    return out
