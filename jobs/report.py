"""Results table: finished runs' pass@1 (final and best checkpoint) next to the paper's numbers.

    python -m jobs.report runs/paper/*            # any run directories (paper cells or not)
    python -m jobs.report runs/a runs/b --plot cmp.png
    python -m jobs.report runs/dsgd_* runs/central --reference runs/central
    python -m jobs.report --board runs/board/*     # the decentralized leaderboard's table
    python -m jobs.report --fedsrd runs/fedsrd/*   # the FedSRD leaderboard's table

It also draws the runs side by side into a PNG (default report.png): pass@1 per round with error
bars and the mean training reward per round, one line per run, labelled by run, method and tau.

A run is matched to a paper cell by its config (model, dataset, alpha, method, tau, swap period);
runs that match no cell are listed with the paper columns empty. Numbers are percentages. "best" is
the best evaluated round (including the base model at round 0), as in the paper's Tables 7-8. "SE" is
the final pass@1's standard error over the test prompts (x responses per prompt, config eval_n): gaps
between methods smaller than about two of them are noise.

"norm." is the decentralized leaderboard's normalized performance: final pass@1 / the reference run's
final pass@1 x 100 (100 = parity). The reference is `--reference`, or else the one run among those
listed whose federation.method is `centralized` or `centralized-full` (pubswap/methods/centralized.py); "-" when
there is none.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from jobs.decentralized_board import board_run, board_table
from jobs.fedsrd_board import fedsrd_run, fedsrd_table
from jobs.paper_grid import BASE, Cell, paper_entries
from pubswap.presets import MODELS


def cell_of(cfg: dict) -> Cell | None:
    model = next((p.name for p in MODELS.values() if p.hub_id == cfg["model"]["path"]), None)
    f, d = cfg["federation"], cfg["data"]
    if model is None or d["source"] not in ("math", "deepmath", "medical"):
        return None
    swap = f["swap_period"] if f["method"].startswith("pubswap") else 2
    return Cell(model, d["source"], f["method"], f["tau"], swap, d["dirichlet_alpha"])


def read_summary(run_dir: Path) -> dict:
    """The run's summary.json; a run without one is one clear error (it has not finished a round)."""
    path = run_dir / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no summary.json (the run has not finished a round yet)")
    return json.loads(path.read_text())


def read_run(run_dir: Path) -> dict:
    cfg = json.loads((run_dir / "config.json").read_text())
    summary = read_summary(run_dir)
    return {
        **comm_mb(run_dir),
        "run": run_dir.name,
        "cell": cell_of(cfg),
        "rounds": summary.get("rounds"),
        "of": cfg["federation"]["rounds"],
        "base": summary["base_pass@1"],
        "final": summary["final_pass@1"],
        "best": summary.get("best_pass@1", summary["final_pass@1"]),
        "se": summary.get("final_pass@1_se"),
        "prompts": summary.get("eval_prompts"),
        "n": summary.get("eval_n"),
    }


def comm_mb(run_dir: Path) -> dict:
    """Mean MiB per client per round: the adapter traffic of the aggregation (upload + download, as the
    strategy sends it: exact bytes; and "board_mb" as the FedSRD leaderboard counts, fp32 values only,
    no indices or bitmasks) and the public steps' responses (up to the server and back, split over the
    round's participants). None for runs written before the per-client counts existed."""
    path = run_dir / "metrics.jsonl"
    records = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
    rounds = [r["bytes"] for r in records if "upload" in r.get("bytes", {})]
    if not rounds:
        return {"adapter_mb": None, "board_mb": None, "public_mb": None}
    mib = 2**20

    def per_client(up: str, down: str) -> float | None:
        if any(up not in b for b in rounds):
            return None
        each = [sum(u + d for u, d in zip(b[up], b[down])) / len(b[up]) for b in rounds]
        return sum(each) / len(each) / mib

    public = [b.get("public_pool", 0) / len(b["upload"]) for b in rounds]
    return {
        "adapter_mb": per_client("upload", "download"),
        "board_mb": per_client("upload_board", "download_board"),
        "public_mb": sum(public) / len(public) / mib,
    }


def mb(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}" if x >= 1 else f"{x:.3f}")


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def se_text(r: dict) -> str:
    """The final pass@1's standard error (percentage points) and what it is over: "±1.3 (1250x4)"."""
    if r["se"] is None:
        return "-"
    return f"±{100 * r['se']:.1f} ({r['prompts']}x{r['n']})"


def reference_run(run_dirs: list[Path], reference: Path | None) -> Path | None:
    """The run normalized performance is relative to: `reference`, else the only centralized run listed."""
    if reference is not None:
        return reference
    central = [
        d
        for d in run_dirs
        if json.loads((d / "config.json").read_text())["federation"]["method"].startswith("centralized")
    ]
    return central[0] if len(central) == 1 else None


def normalized(final: float, reference_final: float | None) -> str:
    if reference_final is None:
        return "-"
    if reference_final == 0:
        return "inf" if final > 0 else "-"
    return f"{100 * final / reference_final:.1f}"


def table(run_dirs: list[Path], reference: Path | None = None) -> str:
    ref = reference_run(run_dirs, reference)
    ref_final = read_run(ref)["final"] if ref is not None else None
    lines = [
        f"{'run':<58} {'rounds':>7} {'base':>5} {'final':>6} {'SE (prompts x n)':>17} {'best':>6} "
        f"{'norm.':>6} {'MB/round/client':>15} {'board MB':>8} {'public MB':>9} | paper (table: base final/best)"
    ]
    for d in run_dirs:
        r = read_run(d)
        paper = paper_entries(r["cell"])
        base = BASE.get((r["cell"].model, r["cell"].dataset)) if r["cell"] else None
        refs = "; ".join(f"T{t}: {fmt(base)} {fmt(final)}/{fmt(best)}" for t, final, best in paper) or "-"
        lines.append(
            f"{r['run']:<58} {r['rounds']:>3}/{r['of']:<3} {100 * r['base']:>5.1f} {100 * r['final']:>6.1f} "
            f"{se_text(r):>17} {100 * r['best']:>6.1f} {normalized(r['final'], ref_final):>6} "
            f"{mb(r['adapter_mb']):>15} {mb(r['board_mb']):>8} {mb(r['public_mb']):>9} | {refs}"
        )
    if ref is not None:
        lines.append(f"norm. = final pass@1 / {ref.name}'s final pass@1 ({100 * ref_final:.1f}) x 100")
    return "\n".join(lines)


def run_curve(run_dir: Path):
    """The run's pass@1 and reward per round, for the plot."""
    from pubswap.run.metrics_log import read_records
    from pubswap.run.plots import curve, label_of

    cfg = json.loads((run_dir / "config.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    base = {"pass@1": summary["base_pass@1"], "pass@1_se": summary.get("base_pass@1_se")}
    return curve(label_of(cfg, run_dir.name), base, read_records(run_dir / "metrics.jsonl"))


def print_board(run_dirs: list[Path]) -> int:
    runs = []
    for d in run_dirs:
        entry = board_run(d)
        if entry is None:
            print(f"report: {d} is not a board cell (method, topology or task); left out", file=sys.stderr)
        else:
            runs.append(entry)
    try:
        print(board_table(runs))
    except ValueError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--plot", type=Path, default=Path("report.png"), help="PNG to draw the runs into")
    ap.add_argument(
        "--reference",
        type=Path,
        default=None,
        help="the run (e.g. federation.method centralized) that normalized performance divides by",
    )
    ap.add_argument(
        "--board",
        action="store_true",
        help="the decentralized leaderboard's table instead: normalised to dsgd with 16 clients per topology "
        "and task, averaged over sst2/rte/boolq (jobs/decentralized_board.py)",
    )
    ap.add_argument(
        "--fedsrd",
        action="store_true",
        help="the FedSRD leaderboard's table instead: each run's eight benchmarks (eval_suite), their average "
        "and MB per client per round both ways, the board's row beside (jobs/fedsrd_board.py)",
    )
    args = ap.parse_args(argv)
    try:
        if args.board:
            return print_board(args.run_dirs)
        if args.fedsrd:
            print(fedsrd_table([fedsrd_run(d) for d in args.run_dirs]))
            return 0
        print(table(args.run_dirs, args.reference))
        from pubswap.run.plots import plot

        print(f"plot: {plot([run_curve(d) for d in args.run_dirs], args.plot)}")
    except FileNotFoundError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
