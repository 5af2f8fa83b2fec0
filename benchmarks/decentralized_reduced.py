"""The decentralized board (../shared/seeds/leaderboard-decentralized.md) reduced to this machine: every
method at 16 and 128 clients on a ring and a meshgrid, normalised as the board is (DSGD-16 = 100 per
topology).

    python benchmarks/decentralized_reduced.py [--out runs/board_reduced] [--sizes 16 128]

Writes the offline sentiment set of pubswap/data/synthetic_sentiment.py (SST-2's schema) and builds a
2-layer model whose tokenizer is trained on its words (tests/tiny_model.py; random init: it learns the
task from nothing), then runs configs/board/reduced.yaml once per (method, topology, clients), each an
ordinary `python -m jobs.train` run in OUT/<cell> (logs beside it), one after another; a finished cell
is not run again and an unfinished one resumes (jobs.study's runner). Prints each cell's final accuracy
and the board's table (jobs/decentralized_board.py) with the board's OPT-125m number beside ours.
Step sizes are ours (the board's are MeZO's for a pretrained OPT-125m, far too small for a model
trained from nothing): --lr for first-order full-parameter steps, --lora-lr, --zo-lr for SeedFlood.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from tiny_model import build_tiny_model  # noqa: E402

from jobs.decentralized_board import METHODS, TOPOLOGIES, board_run, board_table  # noqa: E402
from jobs.study import Study, finished, parse_sets, run_cells, set_pair  # noqa: E402
from pubswap.data.classification import SST2_LABELS, classification_rows  # noqa: E402
from pubswap.data.prompt_length import plain_prompt  # noqa: E402
from pubswap.data.synthetic_sentiment import sentiment_records, write_sentiment  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/board_reduced"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES), choices=list(TOPOLOGIES))
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam step of dsgd and chocosgd")
    ap.add_argument("--lora-lr", type=float, default=1e-2, help="Adam step of dsgd-lora and chocosgd-lora")
    ap.add_argument("--zo-lr", type=float, default=1e-3, help="SeedFlood's zeroth-order step")
    ap.add_argument("--seed", type=int, default=0, help="the data's and the model's seed")
    ap.add_argument(
        "--set", nargs="*", default=[], type=set_pair, metavar="KEY=VALUE", help="more config overrides (YAML values)"
    )
    args = ap.parse_args(argv)

    import yaml

    rows = max(args.sizes) * 8 + 200 + 200  # every client's 8, the test set, spare for the split
    data = write_sentiment(args.out / "data" / "sentiment.jsonl", rows, args.seed)
    model = args.out / "model"
    if not (model / "config.json").is_file():
        prompts, _ = classification_rows("sst2", sentiment_records(rows, args.seed))
        corpus = [plain_prompt(r.prompt) + f" {r.answer}" for r in prompts] + [f" {w}" for w in SST2_LABELS]
        build_tiny_model(model, seed=args.seed, vocab_size=1024, chat_template=False, corpus=corpus)
    steps = {
        "dsgd": {"grpo.lr": args.lr},
        "chocosgd": {"grpo.lr": args.lr},
        "dsgd-lora": {"grpo.lr": args.lora_lr},
        "chocosgd-lora": {"grpo.lr": args.lora_lr},
        "seedflood": {"federation.zo_lr": args.zo_lr},
    }
    methods = {m: {"federation.method": m, **steps[m]} for m in args.methods}
    extra = parse_sets(args.set)
    for m in methods:  # each method's own settings from the board's cells (compressor, LoRA shape)
        cell = yaml.safe_load((REPO / "configs" / "board" / "methods" / f"{m}.yaml").read_text())
        for section, values in cell.items():
            for k, v in values.items():
                methods[m].setdefault(f"{section}.{k}", v)
    study = Study(
        base=REPO / "configs" / "board" / "reduced.yaml",
        out=args.out,
        overrides={"model.path": str(model.resolve()), "data.paths": [str(Path(data).resolve())], **extra},
        axes={
            "method": methods,
            "topology": {t: {"federation.topology": t} for t in args.topologies},
            "clients": {str(n): {"federation.num_clients": n} for n in args.sizes},
        },
        seed_axis="clients",
        compare_to=None,
    )
    t = time.perf_counter()
    failed = run_cells(study, log=lambda line: print(line, flush=True))
    runs = [b for c in study.cells() if finished(args.out / c.name) and (b := board_run(args.out / c.name))]
    print(f"\n{len(runs)} of {len(study.cells())} cells finished in {time.perf_counter() - t:.0f}s this time")
    for r in sorted(runs, key=lambda r: (r.topology, METHODS.index(r.method), r.clients)):
        wall = json.loads((args.out / r.run / "summary.json").read_text()).get("wall_s", 0)
        print(f"  {r.method:<14} {r.topology:<9} {r.clients:>4} clients: accuracy {100 * r.final:5.1f}%  ({wall:.0f}s)")
    print(board_table(runs))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
