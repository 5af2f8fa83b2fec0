"""Bytes per client per round of every aggregation strategy, at real model shapes (no model weights).

    python benchmarks/comm_bytes.py [--clients 4] [--layers-timed 1]

For each model, LoRA on every linear layer of a decoder block (q, k, v, o, gate, up, down), one block
is built with a mid-training state (A ~ U(+-1/sqrt(m)), B ~ N(0, 0.01^2)) and `--clients` client
updates ~ N(0, 1e-3^2); each strategy runs its real round (pubswap/aggregation) on it and the block's
payload sizes are multiplied by the number of blocks. Dense strategies' sizes do not depend on the
values. The sparse ones do: Fed-DARE's and FedSRD's download keep fractions are fixed (1 - p), but
FedSRD's upload keeps 1 - q, q from the kurtosis of the update's importances (0.85-0.96), and these
Gaussian updates give one value of it; a real run's metrics.jsonl has the measured counts.
Columns: MiB up, MiB down, and up + down, exact (values in their dtype + int32 indices or bitmasks);
"board up+down" in the leaderboard's convention (fp32 values only, no positions); the leaderboard's
own "Comm. Cost (MB)" (616 for Qwen2-7B r=32 = 2 x 308 dense fp32; 742 for Llama-3.2-3B r=64 -- its
run scripts use r=64 there).
Also the server's time for one round of the non-linear strategies (CPU, all blocks, extrapolated).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pubswap.algorithms.aggregation import STRATEGIES  # noqa: E402

# (hidden, intermediate, layers, q_dim, kv_dim); configs/models/*.json where we have them
SHAPES = {
    "smollm2-135m (default run)": (576, 1536, 30, 576, 192),
    "qwen3-1.7b": "qwen3-1.7b.json",
    "qwen2-7b": (3584, 18944, 28, 3584, 512),
    "llama3.2-3b": "llama-3.2-3b-instruct.json",
}
LEADERBOARD = {
    "qwen2-7b": {
        "fedit": 616,
        "ffa-lora": 308,
        "flexlora": 616,
        "fed-dare": 158,
        "fedsrd": 61,
        "fedsrd-e": 61,
        "fedicu": 472,
    },
    "llama3.2-3b": {
        "fedit": 742,
        "ffa-lora": 371,
        "flexlora": 742,
        "fed-dare": 190,
        "fedsrd": 74,
        "fedsrd-e": 74,
        "fedicu": 568,
    },
}


def shape_of(spec) -> tuple[int, int, int, int, int]:
    if isinstance(spec, tuple):
        return spec
    c = json.loads((REPO / "configs" / "models" / spec).read_text())
    head = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return (
        c["hidden_size"],
        c["intermediate_size"],
        c["num_hidden_layers"],
        c["num_attention_heads"] * head,
        c["num_key_value_heads"] * head,
    )


def block(hidden, inter, q, kv) -> list[tuple[str, int, int]]:
    """(name, d_out, m_in) of a decoder block's linear layers."""
    return [
        ("q", q, hidden),
        ("k", kv, hidden),
        ("v", kv, hidden),
        ("o", hidden, q),
        ("gate", inter, hidden),
        ("up", inter, hidden),
        ("down", hidden, inter),
    ]


def one_block(modules, r: int, clients: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    start = {}
    for name, d, m in modules:
        start[f"{name}.lora_A.weight"] = (torch.rand(r, m, generator=g) * 2 - 1) / m**0.5
        start[f"{name}.lora_B.weight"] = torch.randn(d, r, generator=g) * 0.01
    trained = [{k: v + 1e-3 * torch.randn(v.shape, generator=g) for k, v in start.items()} for _ in range(clients)]
    return start, trained


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--models", nargs="*", default=list(SHAPES))
    args = ap.parse_args()
    mib = 2**20
    for model in args.models:
        hidden, inter, layers, q, kv = shape_of(SHAPES[model])
        ranks = {"smollm2-135m (default run)": [8], "qwen3-1.7b": [32], "qwen2-7b": [32], "llama3.2-3b": [32, 64]}[
            model
        ]
        for r in ranks:
            start, trained = one_block(block(hidden, inter, q, kv), r, args.clients)
            values = sum(v.numel() for v in start.values()) * layers
            print(
                f"\n{model}, LoRA r={r} on all 7 linear layers x {layers} blocks: {values / 1e6:.1f}M values "
                f"({values * 4 / mib:.1f} MiB fp32); {args.clients} clients, bytes per client per round"
            )
            print(
                f"  {'strategy':<10} {'up MiB':>8} {'down MiB':>9} {'up+down':>8} {'vs fedit':>9} "
                f"{'board up+down':>14} {'server s/round':>15} {'leaderboard MB':>15}"
            )
            base = None
            for name, cls in STRATEGIES.items():
                s = cls()
                # round 2: FedSRD updates A (round 1 would update B); B != 0 here as mid-training
                t = time.perf_counter()
                res = s.run_round(start, trained, seed=0, round_idx=2)
                took = (time.perf_counter() - t) * layers
                up, down = res.upload_bytes[0] * layers / mib, res.download_bytes[0] * layers / mib
                board = (res.upload_board[0] + res.download_board[0]) * layers / mib
                if base is None:
                    base = up + down
                if name in ("fedsrd", "fedsrd-e"):  # the other parity: B's download instead of A's
                    res_b = s.run_round(start, trained, seed=0, round_idx=1)
                    down_b = res_b.download_bytes[0] * layers / mib
                    board_b = (res_b.upload_board[0] + res_b.download_board[0]) * layers / mib
                    down, board = (down + down_b) / 2, (board + board_b) / 2  # mean over an A round and a B round
                lb = LEADERBOARD.get(model, {}).get(name) if (model != "llama3.2-3b" or r == 64) else None
                print(
                    f"  {name:<10} {up:>8.2f} {down:>9.2f} {up + down:>8.2f} {(up + down) / base:>8.1%} "
                    f"{board:>14.2f} {'-' if s.linear else f'{took:.1f}':>15} {lb if lb is not None else '-':>15}"
                )


if __name__ == "__main__":
    main()
