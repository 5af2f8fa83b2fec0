"""Where a round's time goes: exclusive phase timers in each actor, call walls in the driver.

A client actor runs one call at a time. `PhaseTimer` accumulates, per phase, the time spent in it
EXCLUDING nested phases (a `sync` inside an `avg` counts as sync only), and the total time inside the
actor's calls (`busy`). What a call spends outside every named phase (tokenising, scoring rewards,
packing results) is `other`.

The driver adds up the wall time of its blocking calls (`calls`). For one actor, the round then splits
exactly into its phases + other + `wait` (calls - busy: the driver waited on other actors, the server,
or the transport), and the driver's own time, `driver` = round - calls (building records, printing,
submitting). `breakdown` does that arithmetic; `jobs/train.py` prints it per round.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

PHASES = ("gen", "sync", "train", "eval", "avg")  # rollouts, adapter -> engine, GRPO steps, evaluation, averaging


class PhaseTimer:
    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._stack: list[list] = []  # [phase, start of its current exclusive slice]

    @contextmanager
    def phase(self, name: str):
        now = time.perf_counter()
        if self._stack:  # pause the enclosing phase
            outer = self._stack[-1]
            self.totals[outer[0]] += now - outer[1]
        self._stack.append([name, now])
        try:
            yield
        finally:
            end = time.perf_counter()
            name_, start = self._stack.pop()
            self.totals[name_] += end - start
            if self._stack:
                self._stack[-1][1] = end  # resume the enclosing phase

    def move(self, seconds: float, source: str, target: str) -> None:
        """Re-attribute `seconds` measured inside phase `source` to `target` (a sub-phase timed elsewhere)."""
        self.totals[source] -= seconds
        self.totals[target] += seconds

    @contextmanager
    def call(self):
        """Around a whole actor call: time in no named phase is `other`; the wall goes into `busy`.
        A call made from inside another (one actor method calling another) is part of the outer one."""
        if self._stack:
            yield
            return
        start = time.perf_counter()
        with self.phase("other"):
            yield
        self.totals["busy"] += time.perf_counter() - start

    def take(self) -> dict[str, float]:
        """The totals since the last take (and reset)."""
        out = {k: float(v) for k, v in self.totals.items()}
        self.totals.clear()
        return out


def breakdown(actor_totals: list[dict[str, float]], calls_s: float, round_s: float) -> dict:
    """The round's time record: per actor {phase: s, other, wait}, their mean, and the driver's share."""
    actors = []
    for totals in actor_totals:
        parts = {p: totals.get(p, 0.0) for p in PHASES}
        parts["other"] = totals.get("other", 0.0)
        parts["wait"] = calls_s - totals.get("busy", 0.0)
        actors.append(parts)
    keys = [*PHASES, "other", "wait"]
    mean = {k: sum(a[k] for a in actors) / len(actors) for k in keys} if actors else {}
    driver = round_s - calls_s
    return {
        "round_s": round_s,
        "calls_s": calls_s,
        "driver_s": driver,
        "driver_frac": driver / round_s if round_s > 0 else 0.0,
        "actors": actors,
        **{f"{k}_s": v for k, v in mean.items()},
    }


def format_breakdown(t: dict) -> str:
    parts = " ".join(f"{k} {t[f'{k}_s']:.1f}s" for k in (*PHASES, "other", "wait") if f"{k}_s" in t)
    return (
        f"time per actor (mean of {len(t['actors'])}): {parts}; driver {t['driver_s']:.2f}s "
        f"({100 * t['driver_frac']:.1f}% of {t['round_s']:.1f}s)"
    )
