"""The FedSRD board (../shared/seeds/leaderboard-fedsrd.md) reduced to this machine: every method, its
eight columns, its average and its communication column.

    python benchmarks/fedsrd_reduced.py [--out runs/fedsrd_reduced] [--methods fedsrd fedavg ...]

Writes the small offline domain sets of pubswap/data/synthetic_board.py under OUT/data (one training
set per client: code, medical, finance, math; the eight evaluations in their public schemas), then runs
configs/fedsrd/reduced.yaml once per board method (FedSRD, FedSRD-e, FedProx, FedICU, FedAvg, Fed-DARE,
FlexLoRA, FFA-LoRA), each an ordinary `python -m jobs.train` run in OUT/method=<name> (logs beside it),
one after another; a method whose run finished is not run again and an unfinished one resumes, as in
jobs.study. Prints the board's table (jobs/fedsrd_board.py) with the board's Qwen2-7B row under each
method's, and the seconds each run took. The board's setting and ours differ in everything but the
protocol: see docs/data.md (the board reduced to this machine).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobs.fedsrd_board import METHODS, fedsrd_run, fedsrd_table  # noqa: E402
from jobs.study import Study, finished, parse_sets, run_cells, set_pair  # noqa: E402
from pubswap.data.synthetic_board import write_board  # noqa: E402

BOARD_METHODS = {name: key for key, name in METHODS.items()}  # board name -> (method, aggregation)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/fedsrd_reduced"))
    ap.add_argument("--methods", nargs="+", default=list(BOARD_METHODS), choices=list(BOARD_METHODS))
    ap.add_argument("--train-rows", type=int, default=96, help="rows per domain (per client)")
    ap.add_argument("--eval-rows", type=int, default=16, help="scored rows per benchmark")
    ap.add_argument("--seed", type=int, default=0, help="the data's seed (the runs' is the config's)")
    ap.add_argument(
        "--set", nargs="*", default=[], type=set_pair, metavar="KEY=VALUE", help="more config overrides (YAML values)"
    )
    args = ap.parse_args(argv)

    train, evals = write_board(args.out / "data", args.train_rows, args.eval_rows, args.seed)
    axis = {m: dict(zip(("federation.method", "federation.aggregation"), BOARD_METHODS[m])) for m in args.methods}
    study = Study(
        base=REPO / "configs" / "fedsrd" / "reduced.yaml",
        out=args.out,
        overrides={
            "data.client_paths": [str(Path(p).resolve()) for p in train],
            "data.paths": [str(Path(train[0]).resolve().parent)],  # the four together: the in-run test rows
            "eval_suite": {k: str(Path(v).resolve()) for k, v in evals.items()},
            "eval_suite_limit": args.eval_rows,
            "data.per_client": args.train_rows,
            **parse_sets(args.set),
        },
        axes={"method": axis},
        seed_axis="method",
        compare_to=None,
    )
    t = time.perf_counter()
    failed = run_cells(study, log=lambda line: print(line, flush=True))
    done = [args.out / c.name for c in study.cells() if finished(args.out / c.name)]
    print(f"\n{len(done)} of {len(axis)} methods finished in {time.perf_counter() - t:.0f}s this time")
    print(fedsrd_table([fedsrd_run(d) for d in done], board_model="qwen2-7b"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
