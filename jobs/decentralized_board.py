"""The decentralized leaderboard's table (../shared/seeds/leaderboard-decentralized.md), as it measures:

    python -m jobs.report --board runs/board/*

Each run is a cell (federation.method, num_clients, topology) on one task (data.source: sst2, rte or
boolq). A run's normalised performance is 100 x its final score / the final score of the `dsgd` run with
16 clients on the same topology and task (so DSGD-16 is 100 on each topology); a cell's number is the
mean of that over the tasks it has runs for (the board averages SST-2, RTE and BoolQ). The board's own
number (OPT-125m) is printed beside it. The score is what the run evaluates: summary.json's final
pass@1, which for these tasks is accuracy (one answer per test prompt at eval_n 1).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

TASKS = ("sst2", "rte", "boolq")
REFERENCE = ("dsgd", 16)  # the cell that is 100 on each topology
METHODS = ("dsgd", "dsgd-lora", "chocosgd", "chocosgd-lora", "seedflood")
TOPOLOGIES = ("ring", "meshgrid")

# The board's numbers (OPT-125m, normalised, averaged over the three tasks), by method, (topology, clients).
BOARD: dict[str, dict[tuple[str, int], float]] = {
    "dsgd": {("ring", 16): 100.0, ("ring", 32): 100.57, ("ring", 64): 96.24, ("ring", 128): 94.5,
             ("meshgrid", 16): 100.0, ("meshgrid", 32): 100.82, ("meshgrid", 64): 101.49, ("meshgrid", 128): 96.56},
    "dsgd-lora": {("ring", 16): 97.91, ("ring", 32): 98.4, ("ring", 64): 81.27, ("ring", 128): 76.41,
                  ("meshgrid", 16): 100.16, ("meshgrid", 32): 98.92, ("meshgrid", 64): 100.56,
                  ("meshgrid", 128): 95.83},
    "chocosgd": {("ring", 16): 98.59, ("ring", 32): 97.52, ("ring", 64): 94.13, ("ring", 128): 92.97,
                 ("meshgrid", 16): 99.04, ("meshgrid", 32): 98.53, ("meshgrid", 64): 94.65, ("meshgrid", 128): 92.97},
    "chocosgd-lora": {("ring", 16): 91.19, ("ring", 32): 80.32, ("ring", 64): 76.88, ("ring", 128): 75.55,
                      ("meshgrid", 16): 89.49, ("meshgrid", 32): 90.3, ("meshgrid", 64): 86.44,
                      ("meshgrid", 128): 87.84},
    "seedflood": {("ring", 16): 94.38, ("ring", 32): 98.2, ("ring", 64): 95.81, ("ring", 128): 100.24,
                  ("meshgrid", 16): 96.2, ("meshgrid", 32): 97.64, ("meshgrid", 64): 97.3, ("meshgrid", 128): 97.51},
}  # fmt: skip


@dataclass(frozen=True)
class BoardRun:
    method: str
    clients: int
    topology: str
    task: str
    final: float
    run: str


def board_run(run_dir: Path) -> BoardRun | None:
    """The run as a board entry; None when it is not one (another method, topology or task)."""
    cfg = json.loads((run_dir / "config.json").read_text())
    f, task = cfg["federation"], cfg["data"]["source"]
    if f["method"] not in METHODS or f["topology"] not in TOPOLOGIES or task not in TASKS:
        return None
    summary = json.loads((run_dir / "summary.json").read_text())
    return BoardRun(f["method"], f["num_clients"], f["topology"], task, summary["final_pass@1"], run_dir.name)


def normalised(runs: Iterable[BoardRun]) -> dict[tuple[str, int, str], dict[str, float | None]]:
    """{(method, clients, topology): {task: 100 x final / DSGD-16's final on that topology and task}};
    None where that reference is missing or scored 0. Two runs of one cell and task: an error."""
    by_key: dict[tuple[str, int, str, str], BoardRun] = {}
    for r in runs:
        key = (r.method, r.clients, r.topology, r.task)
        if key in by_key:
            raise ValueError(f"two runs of {key}: {by_key[key].run} and {r.run}")
        by_key[key] = r
    out: dict[tuple[str, int, str], dict[str, float | None]] = {}
    for (method, n, topo, task), r in by_key.items():
        ref = by_key.get((*REFERENCE, topo, task))
        value = 100 * r.final / ref.final if ref is not None and ref.final > 0 else None
        out.setdefault((method, n, topo), {})[task] = value
    return out


def mean(values: Mapping[str, float | None]) -> float | None:
    known = [v for v in values.values() if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def board_table(runs: Iterable[BoardRun]) -> str:
    cells = normalised(runs)
    head = f"{'method':<14} {'clients':>7} {'topology':<9} " + " ".join(f"{t:>6}" for t in TASKS)
    lines = [head + f" {'ours':>6} {'board':>6}", "-" * (len(head) + 14)]
    order = sorted(cells, key=lambda k: (TOPOLOGIES.index(k[2]), METHODS.index(k[0]), k[1]))
    for method, n, topo in order:
        tasks = cells[(method, n, topo)]
        per_task = " ".join(f"{_num(tasks[t]) if t in tasks else '':>6}" for t in TASKS)
        board = BOARD.get(method, {}).get((topo, n))
        lines.append(f"{method:<14} {n:>7} {topo:<9} {per_task} {_num(mean(tasks)):>6} {_num(board):>6}")
    lines.append(
        "ours = 100 x final score / dsgd-16's on the same topology and task, averaged over the tasks run "
        "(- : the reference is missing); board = OPT-125m on SST-2, RTE and BoolQ"
    )
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"
