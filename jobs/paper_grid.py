"""The paper's experiment grid (Tables 1-6): one config per cell, and the paper's numbers for each.

    python -m jobs.paper_grid list [--table N] [--step-s S]   # cells, rounds, GPUs, estimated GPU hours
    python -m jobs.paper_grid write [--out configs/paper]     # (re)write one YAML per cell

A cell is (model, dataset, heterogeneity alpha, method, tau, swap period). Cells shared by several
tables (Table 5's tau=90 swap-2 run is Table 1's) are one config. Total GRPO steps per run: 360 for
Tables 1, 2, 4, 5 and 6 (stated for Tables 4-6, assumed for 1-2), 320 for Table 5's tau=80, 540 for
Table 3 (600 at tau=120); rounds = ceil(steps / tau). FedProx's mu is not given ("tuned"): 0.01 here.
GPU hours are an ESTIMATE: one GPU per client (4), steps x an assumed H100 time per step per model
(`ModelPreset.step_s_h100`; no GPU was available to measure it), evaluation not counted.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from pubswap.presets import DATASETS, MODELS

TAUS = (10, 40, 90, 120)
NUM_CLIENTS = 4


@dataclass(frozen=True)
class Cell:
    model: str
    dataset: str
    method: str  # fedavg-grpo | fedprox-grpo | pubswap-balanced
    tau: int
    swap_period: int = 2
    alpha: float = 0.3

    @property
    def name(self) -> str:
        het = "" if self.alpha == 0.3 else f"_a{self.alpha:g}"
        swap = f"_swap{self.swap_period}" if self.method.startswith("pubswap") else ""
        return f"{self.model}_{self.dataset}{het}_{self.method}{swap}_tau{self.tau}"

    @property
    def steps(self) -> int:
        if self.dataset == "medical":
            return 600 if self.tau == 120 else 540
        return 320 if self.tau == 80 else 360

    @property
    def rounds(self) -> int:
        return math.ceil(self.steps / self.tau)

    def gpu_hours(self, step_s: float | None = None) -> float:
        s = step_s if step_s is not None else MODELS[self.model].step_s_h100
        return NUM_CLIENTS * self.rounds * self.tau * s / 3600

    def config(self) -> dict:
        cfg = MODELS[self.model].overrides()
        cfg["seed"] = 0
        cfg["run_dir"] = f"runs/paper/{self.name}"
        cfg["federation"] = {
            "method": self.method,
            "num_clients": NUM_CLIENTS,
            "rounds": self.rounds,
            "tau": self.tau,
            "swap_period": self.swap_period,
            "aggregation": "fedit",
            "fedprox_mu": 0.01,
        }
        cfg["data"] = {**DATASETS[self.dataset], "dirichlet_alpha": self.alpha}
        cfg["eval_every"] = 1
        return cfg


# the paper's pass@1 (%), per table: (cell, final, best checkpoint or None)
PAPER: dict[int, list[tuple[Cell, float, float | None]]] = {}


def _add(table: int, model: str, dataset: str, method: str, taus, finals, bests=None, swap=2, alpha=0.3):
    for i, tau in enumerate(taus):
        PAPER.setdefault(table, []).append(
            (Cell(model, dataset, method, tau, swap, alpha), finals[i], bests[i] if bests else None)
        )


F, P, S = "fedavg-grpo", "fedprox-grpo", "pubswap-balanced"
# Table 1 (final) with Table 7 (best checkpoint)
_add(1, "qwen3-1.7b", "math", F, TAUS, [77.9, 75.6, 75.5, 75.9], [78.3, 76.1, 76.3, 75.9])
_add(1, "qwen3-1.7b", "math", P, TAUS, [77.5, 76.0, 76.5, 75.6], [77.5, 76.7, 76.5, 75.6])
_add(1, "qwen3-1.7b", "math", S, TAUS, [77.0, 76.7, 76.9, 76.6], [77.0, 76.9, 76.9, 76.6])
_add(1, "qwen3-1.7b", "deepmath", F, TAUS, [48.9, 52.7, 50.4, 50.7], [49.5, 52.7, 50.4, 50.7])
_add(1, "qwen3-1.7b", "deepmath", P, TAUS, [50.6, 52.3, 48.0, 47.7], [52.0, 52.3, 48.0, 47.7])
_add(1, "qwen3-1.7b", "deepmath", S, TAUS, [51.1, 53.0, 53.3, 55.8], [53.8, 54.6, 53.3, 55.8])
_add(1, "qwen2.5-math-1.5b", "math", F, TAUS, [73.5, 72.3, 71.9, 71.1], [73.7, 73.1, 71.9, 71.1])
_add(1, "qwen2.5-math-1.5b", "math", P, TAUS, [72.8, 71.4, 71.5, 70.6], [72.8, 71.4, 71.5, 70.6])
_add(1, "qwen2.5-math-1.5b", "math", S, TAUS, [72.4, 71.6, 72.5, 71.9], [73.1, 73.5, 73.2, 71.9])
_add(1, "qwen2.5-math-1.5b", "deepmath", F, TAUS, [51.0, 52.3, 50.5, 49.3], [53.1, 52.3, 50.5, 49.3])
_add(1, "qwen2.5-math-1.5b", "deepmath", P, TAUS, [52.2, 52.1, 48.0, 49.4], [52.6, 52.1, 48.0, 49.4])
_add(1, "qwen2.5-math-1.5b", "deepmath", S, TAUS, [52.4, 53.1, 50.8, 53.1], [54.5, 53.1, 51.0, 53.1])
# Table 2: Qwen3-4B-Instruct-2507 on DeepMath
_add(2, "qwen3-4b-instruct", "deepmath", F, TAUS, [66.9, 66.5, 67.0, 67.4])
_add(2, "qwen3-4b-instruct", "deepmath", S, TAUS, [70.0, 65.4, 70.2, 70.5])
# Table 3 (final) with Table 8 (best): Llama-3.2-3B-Instruct on MedQA + MedMCQA
_add(3, "llama3.2-3b-instruct", "medical", F, TAUS, [58.7, 58.2, 57.9, 56.0], [59.7, 58.9, 57.9, 57.7])
_add(3, "llama3.2-3b-instruct", "medical", S, TAUS, [57.5, 59.4, 58.5, 58.1], [58.3, 59.5, 58.5, 58.1])
# Table 4: higher heterogeneity (alpha 0.1)
_add(4, "qwen3-1.7b", "deepmath", F, (40, 90, 120), [52.0, 51.6, 51.3], alpha=0.1)
_add(4, "qwen3-1.7b", "deepmath", S, (40, 90, 120), [53.0, 56.7, 54.9], alpha=0.1)
# Table 5: swap periods, Qwen3-1.7B on DeepMath
_add(5, "qwen3-1.7b", "deepmath", F, (80, 90, 120), [48.0, 50.4, 50.7])
_add(5, "qwen3-1.7b", "deepmath", P, (80, 90, 120), [46.5, 48.0, 47.7])
for _swap, _vals in ((2, [52.2, 53.3, 55.8]), (4, [54.3, 54.3, 52.5]), (8, [53.1, 53.4, 52.6])):
    _add(5, "qwen3-1.7b", "deepmath", S, (80, 90, 120), _vals, swap=_swap)
# Table 6: swap periods, Qwen2.5-Math-1.5B on DeepMath
_add(6, "qwen2.5-math-1.5b", "deepmath", F, (90, 120), [50.5, 49.3])
_add(6, "qwen2.5-math-1.5b", "deepmath", P, (90, 120), [48.0, 49.4])
for _swap, _vals in ((2, [51.0, 53.1]), (4, [52.3, 53.6]), (8, [51.9, 51.7])):
    _add(6, "qwen2.5-math-1.5b", "deepmath", S, (90, 120), _vals, swap=_swap)

BASE = {
    ("qwen3-1.7b", "math"): 55.2,
    ("qwen3-1.7b", "deepmath"): 14.9,
    ("qwen2.5-math-1.5b", "math"): 58.4,
    ("qwen2.5-math-1.5b", "deepmath"): 34.9,
    ("qwen3-4b-instruct", "deepmath"): 51.1,
    ("llama3.2-3b-instruct", "medical"): 49.2,
}


def cells(table: int | None = None) -> list[Cell]:
    """The distinct cells of one table (or of all), in table order."""
    out: dict[str, Cell] = {}
    for t, entries in sorted(PAPER.items()):
        if table is None or t == table:
            for cell, _, _ in entries:
                out.setdefault(cell.name, cell)
    return list(out.values())


def paper_entries(cell: Cell | None) -> list[tuple[int, float, float | None]]:
    """(table, final, best) for every table that reports `cell`, in table order."""
    return [(t, final, best) for t, entries in sorted(PAPER.items()) for c, final, best in entries if c == cell]


def tables_of(cell: Cell) -> list[int]:
    return sorted({t for t, _, _ in paper_entries(cell)})


SHARED = "paper.yaml"  # what every cell shares besides its model and dataset


def cell_file(cell: Cell) -> dict:
    """What a cell's file holds over the files it extends: its run_dir, method, rounds, tau, swap period
    and (Table 4) heterogeneity."""
    out = {
        "extends": [SHARED, f"models/{cell.model}.yaml", f"data/{cell.dataset}.yaml"],
        "run_dir": f"runs/paper/{cell.name}",
        "federation": {"method": cell.method, "rounds": cell.rounds, "tau": cell.tau, "swap_period": cell.swap_period},
    }
    if cell.alpha != 0.3:
        out["data"] = {"dirichlet_alpha": cell.alpha}
    return out


def write_configs(out: Path) -> list[Path]:
    """configs/paper/: paper.yaml, models/<model>.yaml (Tables 9-12), data/<dataset>.yaml (appendix B.1)
    and one small file per cell that extends them; each loads to exactly `Cell.config()`."""
    note = "generated by `python -m jobs.paper_grid write`, do not edit by hand.\n"

    def dump(path: Path, text: str, data: dict, flow: bool | None = False) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {text}; {note}" + yaml.safe_dump(data, sort_keys=False, default_flow_style=flow))
        return path

    shared = {
        "seed": 0,
        "eval_every": 1,
        "federation": {"num_clients": NUM_CLIENTS, "aggregation": "fedit", "fedprox_mu": 0.01},
        "data": {"dirichlet_alpha": 0.3},
    }
    paths = [dump(out / SHARED, "What every cell of the paper shares", shared)]
    for name, preset in MODELS.items():
        paths.append(
            dump(out / "models" / f"{name}.yaml", f"{preset.hub_id}, Table {preset.table}", preset.overrides())
        )
    for name, data in DATASETS.items():
        paths.append(dump(out / "data" / f"{name}.yaml", f"The {name} split (appendix B.1)", {"data": data}))
    for cell in cells():
        tables = ", ".join(map(str, tables_of(cell)))
        header = f"Paper cell {cell.name} (tables {tables})"
        paths.append(dump(out / f"{cell.name}.yaml", header, cell_file(cell), flow=None))  # flow: short lists
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="cells with rounds, GPUs and estimated GPU hours")
    ls.add_argument("--table", type=int, choices=sorted(PAPER))
    ls.add_argument("--step-s", type=float, default=None, help="seconds per GRPO step per client (default: preset)")
    wr = sub.add_parser("write", help="write one YAML per cell")
    wr.add_argument("--out", default="configs/paper")
    args = ap.parse_args(argv)
    if args.cmd == "write":
        paths = write_configs(Path(args.out))
        print(f"wrote {len(paths)} configs to {args.out}")
        return 0
    chosen = cells(args.table)
    print(f"{'config':<58} {'tables':<8} {'rounds':>6} {'steps':>6} {'GPUs':>5} {'GPU-h (est.)':>12}")
    for cell in chosen:
        print(
            f"{cell.name:<58} {','.join(map(str, tables_of(cell))):<8} {cell.rounds:>6} {cell.rounds * cell.tau:>6} "
            f"{NUM_CLIENTS:>5} {cell.gpu_hours(args.step_s):>12.1f}"
        )
    total = sum(c.gpu_hours(args.step_s) for c in chosen)
    print(f"{len(chosen)} configs, about {total:.0f} GPU hours (H100; step times assumed, see the module docstring)")
    print("run one: python -m jobs.train --config configs/paper/<config>.yaml run_dir=/shared/runs/<config>")
    return 0


if __name__ == "__main__":
    sys.exit(main())
