"""The FedSRD leaderboard's table (../shared/seeds/leaderboard-fedsrd.md), as it measures:

    python -m jobs.report --fedsrd runs/fedsrd/*

Each run is a cell (method, model): the method from federation.method and federation.aggregation as
configs/fedsrd/ sets them, the model from model.path. Its columns are the eval_suite benchmarks scored
after the last round (summary.json's suite, in percent), their plain mean (the board's Average), and the
communication per client per round both ways: the board's convention (fp32 values only, upload plus
download, no indices or bitmasks) and our exact bytes. The board's own row is printed under each run.

The board's page lists its eight numbers per row without column names; they are taken here in the order
of the reference repository's README (HumanEval, MBPP, MedQA, MedMCQA, FinEval, FinanceIQ, GSM8K, MATH).
The plain mean of a row's eight is its Average in all 8 Qwen2-7B rows (to 0.01) but in only 2 of the
8 Llama-3.2-3B rows (FedSRD, FedAvg; the others are off by 0.1 to 1.1): the board's own numbers
disagree there, and the table prints them as published.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pubswap.data.board_evals import BENCHMARKS

COLUMNS = tuple(BENCHMARKS)  # humaneval, mbpp, medqa, medmcqa, fineval, financeiq, gsm8k, math
MODELS = {"Qwen/Qwen2-7B": "qwen2-7b", "meta-llama/Llama-3.2-3B": "llama3.2-3b"}
METHODS = {  # (federation.method, federation.aggregation) -> the board's method (configs/fedsrd/)
    ("fedavg-grpo", "fedsrd"): "fedsrd",
    ("fedavg-grpo", "fedsrd-e"): "fedsrd-e",
    ("fedprox-grpo", "fedit"): "fedprox",
    ("fedavg-grpo", "fedicu"): "fedicu",
    ("fedavg-grpo", "fedit"): "fedavg",
    ("fedavg-grpo", "fed-dare"): "fed-dare",
    ("fedavg-grpo", "flexlora"): "flexlora",
    ("fedavg-grpo", "ffa-lora"): "ffa-lora",
}

# The board: (method, model) -> (Average, the eight columns, Comm. Cost MB)
BOARD: dict[tuple[str, str], tuple[float, tuple[float, ...], float]] = {
    ("fedsrd", "qwen2-7b"): (61.19, (68.29, 36.19, 77.77, 78.94, 64.55, 48.48, 69.93, 45.36), 61),
    ("fedsrd-e", "qwen2-7b"): (61.13, (68.09, 36.56, 77.8, 78.1, 64.21, 48.9, 70.2, 45.2), 61),
    ("fedprox", "qwen2-7b"): (58.27, (63.42, 36.58, 62.13, 77.34, 65.77, 49.96, 66.26, 44.72), 616),
    ("fedicu", "qwen2-7b"): (57.98, (60.37, 38.91, 60.33, 78.72, 65.86, 48.83, 66.19, 44.62), 472),
    ("fedavg", "qwen2-7b"): (57.04, (59.15, 37.35, 61.67, 75.23, 65.16, 49.04, 64.29, 44.46), 616),
    ("fed-dare", "qwen2-7b"): (57.01, (60.37, 31.91, 61.12, 75.3, 66.03, 50.84, 65.96, 44.58), 158),
    ("flexlora", "qwen2-7b"): (55.89, (63.41, 35.02, 58.83, 68.3, 67.68, 50.53, 58.61, 44.7), 616),
    ("ffa-lora", "qwen2-7b"): (53.36, (68.29, 17.9, 51.55, 57.02, 67.76, 48.92, 69.37, 46.08), 308),
    ("fedsrd", "llama3.2-3b"): (35.12, (31.1, 49.42, 41.95, 41.62, 43.44, 39.13, 28.96, 5.36), 74),
    ("fedsrd-e", "llama3.2-3b"): (34.26, (29.27, 45.87, 41.63, 41.17, 42.22, 39.47, 30.48, 5.88), 74),
    ("fedicu", "llama3.2-3b"): (33.91, (31.1, 49.42, 40.15, 41.07, 40.83, 37.56, 25.09, 5.26), 568),
    ("fedavg", "llama3.2-3b"): (33.9, (26.85, 47.86, 40.45, 41.53, 41.96, 38.08, 28.96, 5.56), 742),
    ("fed-dare", "llama3.2-3b"): (33.57, (26.6, 48.25, 39.28, 40.04, 40.4, 38.04, 26.05, 5.26), 190),
    ("fedprox", "llama3.2-3b"): (33.43, (28.05, 48.25, 35.98, 40.06, 42.75, 37.82, 28.05, 5.7), 742),
    ("flexlora", "llama3.2-3b"): (32.36, (28.75, 47.47, 36.29, 41.24, 42.22, 37.09, 27.37, 5.68), 742),
    ("ffa-lora", "llama3.2-3b"): (28.39, (3.05, 46.3, 39.95, 40.11, 40.23, 36.02, 24.79, 5.1), 371),
}


@dataclass(frozen=True)
class FedsrdRun:
    run: str
    method: str  # the board's name, or "method/aggregation" for another combination
    model: str  # the board's name, or the model path
    scores: dict[str, float]  # benchmark -> percent
    average: float | None  # percent
    board_mb: float | None  # MiB per client per round, the board's convention
    exact_mb: float | None  # MiB per client per round, exact bytes


def fedsrd_run(run_dir: Path) -> FedsrdRun:
    from jobs.report import comm_mb, read_summary

    cfg = json.loads((run_dir / "config.json").read_text())
    summary = read_summary(run_dir)
    f = cfg["federation"]
    suite = summary.get("suite") or {}
    mb = comm_mb(run_dir)
    return FedsrdRun(
        run=run_dir.name,
        method=METHODS.get((f["method"], f["aggregation"]), f"{f['method']}/{f['aggregation']}"),
        model=MODELS.get(cfg["model"]["path"], cfg["model"]["path"]),
        scores={k: 100 * v["score"] for k, v in suite.items()},
        average=100 * summary["suite_avg"] if "suite_avg" in summary else None,
        board_mb=mb["board_mb"],
        exact_mb=mb["adapter_mb"],
    )


def fedsrd_table(runs: list[FedsrdRun], board_model: str | None = None) -> str:
    """The board's columns for `runs`, each with the board's row for its method and model printed under
    it; a run of a model the board did not measure gets `board_model`'s row (a reduced setting)."""
    names = {"humaneval": "HumanE", "financeiq": "FinIQ", "medmcqa": "MedMCQ"}
    heads = [names.get(c, c) for c in COLUMNS]
    head = f"{'run / board':<34} {'Avg':>6} " + " ".join(f"{h:>6}" for h in heads) + f" {'MB':>7} {'exact MB':>8}"
    lines = [head, "-" * len(head)]
    for r in sorted(runs, key=lambda r: (r.model, -(r.average or 0.0))):
        cols = " ".join(f"{_num(r.scores.get(c)):>6}" for c in COLUMNS)
        lines.append(f"{r.run[:34]:<34} {_num(r.average):>6} {cols} {_num(r.board_mb):>7} {_num(r.exact_mb):>8}")
        model = r.model if r.model in MODELS.values() else board_model
        board = BOARD.get((r.method, model))
        if board is not None:
            avg, values, mb = board
            cols = " ".join(f"{v:>6.2f}" for v in values)
            lines.append(f"{'  board ' + r.method + ' ' + model:<34} {avg:>6.2f} {cols} {mb:>7.0f} {'':>8}")
    lines.append(
        "percent; Avg = the plain mean of the benchmarks scored (- : not scored); MB = MiB per client per "
        "round, upload + download, fp32 values only as the board counts; exact MB = the bytes sent"
    )
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"
