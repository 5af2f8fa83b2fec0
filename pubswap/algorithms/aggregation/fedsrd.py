"""FedSRD and FedSRD-e (Yan et al., 2025; details as in the public reference Youth-49/FedSRD_2025).

Client (both): importance-aware sparsification of its update, per adapted module (B d x r, A r x m):
    dA = A_i - A, dB = B_i - B (A, B the round-start global factors)
    importance(dA) = |dA| * ||column j of B_i||  (row j of dA),  importance(dB) = |dB| * ||row j of A||
    prune ratio q = base + min(upper, coeff * ln(max(kurtosis, 1)))  (Pearson kurtosis of the importances;
        base 0.85, coeff 0.1, upper 0.11: q in [0.85, 0.96])
    entries with importance below the q-quantile are dropped, the rest rescaled so the L1 mass of the
    delta is unchanged; sent as values + positions.
Server: rebuilds each client's factors, averages the full products W = sum_i w_i B_i A_i (never
formed: lowrank.py), and projects the change W' - B A on ONE factor, alternating by round:
    FedSRD:   W' = the rank-r truncation of W (SVD);   FedSRD-e: W' = W (no SVD)
    update A: dA = pinv(B) (W' - B A);   update B: dB = (W' - B A) pinv(A)
and sends that factor's delta down sparsified (random mask at rate `download_p`, 0.8 in the reference
run scripts, rescaled by 1 / (1 - p), seeded by (seed, round, tensor)); the other factor is not sent.
The pseudo-inverses drop singular values below `pinv_rtol` (0.1) times the largest. The reference uses
torch's default cut-off (about 5e-4 in fp32 at d = 4096), which keeps the near-null directions of a B that
holds one round of updates: measured on the reduced board (docs/data.md), B's smallest singular value was
4e-4 to 1.5e-2 of its largest after round 1, and round 2's A update grew A's largest entry from 0.04 to 58
(client reward 0.95 -> 0.2). The cut-off gives up the product change along those directions
(docs/data.md has the measured effect); pinv_rtol=0 keeps every nonzero direction, as the reference nearly does.
Parity: odd rounds (1, 3, ...) update B, even rounds A. The reference updates A first (its round 0),
where B = 0 at the standard init, so pinv(B) = 0 and the first round's update is lost; starting with B
avoids that, and any round whose B is still all zero updates B.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from pubswap.algorithms.aggregation.base import AggregationStrategy, Context, lora_pairs, normalized_weights
from pubswap.algorithms.aggregation.lowrank import balanced_factors, stack_products
from pubswap.algorithms.aggregation.payload import Payload, dense, sparsify
from pubswap.lora import Adapter
from pubswap.seeding import derive_seed


def pearson_kurtosis(x: Tensor) -> float:
    """E[(x - mean)^4] / Var(x)^2 (population moments; 3 for a normal), 1.0 for a constant."""
    x = x.double().reshape(-1)
    c = x - x.mean()
    var = (c * c).mean()
    return float((c**4).mean() / var**2) if var > 0 else 1.0


def prune_ratio(kurtosis: float, base: float = 0.85, coeff: float = 0.1, upper: float = 0.11) -> float:
    return base + min(upper, coeff * math.log(max(kurtosis, 1.0)))


def prune_by_importance(delta: Tensor, importance: Tensor, ratio: float) -> tuple[Tensor, Tensor]:
    """(kept mask, rescaled delta): drop entries whose importance is below its `ratio`-quantile, then
    rescale the kept ones so that sum |delta| is unchanged."""
    if ratio > 0:
        threshold = float(np.quantile(importance.double().reshape(-1).numpy(), ratio))
        keep = importance >= threshold
    else:
        keep = torch.ones_like(delta, dtype=torch.bool)
    kept = torch.where(keep, delta, torch.zeros_like(delta))
    mass, kept_mass = delta.abs().sum(), kept.abs().sum()
    if kept_mass > 1e-9:
        kept = kept * (mass / kept_mass)
    return keep, kept


class FedSRD(AggregationStrategy):
    name = "fedsrd"
    linear = False
    truncate = True  # FedSRD-e: False

    def __init__(
        self,
        prune_base: float = 0.85,
        prune_coeff: float = 0.1,
        prune_upper: float = 0.11,
        download_p: float = 0.8,
        pinv_rtol: float = 0.1,
    ):
        if not 0.0 <= download_p < 1.0:
            raise ValueError(f"download_p must be in [0, 1), got {download_p}")
        if not 0.0 <= prune_base + prune_upper < 1.0:
            raise ValueError("prune_base + prune_upper must be in [0, 1)")
        if not 0.0 <= pinv_rtol < 1.0:
            raise ValueError(f"pinv_rtol must be in [0, 1), got {pinv_rtol}")
        self.pinv_rtol = pinv_rtol
        self.base, self.coeff, self.upper, self.download_p = prune_base, prune_coeff, prune_upper, download_p

    # --- client ------------------------------------------------------------------------------

    def upload(self, start: Adapter, trained: Adapter, ctx: Context) -> Payload:
        out = {}
        for ka, kb in lora_pairs(start):
            dA, dB = trained[ka] - start[ka], trained[kb] - start[kb]
            imp_a = dA.abs() * torch.linalg.vector_norm(trained[kb], dim=0)[:, None]
            imp_b = dB.abs() * torch.linalg.vector_norm(start[ka], dim=1)[None, :]
            for key, delta, imp in ((ka, dA, imp_a), (kb, dB, imp_b)):
                ratio = prune_ratio(pearson_kurtosis(imp), self.base, self.coeff, self.upper)
                keep, kept = prune_by_importance(delta, imp, ratio)
                out[key] = sparsify(kept, keep)
        return out

    # --- server ------------------------------------------------------------------------------

    def pinv(self, x: Tensor) -> Tensor:
        """The pseudo-inverse without the directions whose singular value is below pinv_rtol of the largest."""
        return torch.linalg.pinv(x, rtol=self.pinv_rtol)

    def updates_b(self, round_idx: int, B: Tensor) -> bool:
        return round_idx % 2 == 1 or not bool(B.any())

    def server_aggregate(self, start: Adapter, uploads: Sequence[Payload], weights, ctx: Context) -> Payload:
        w = normalized_weights(weights, len(uploads))
        out = {}
        for ka, kb in lora_pairs(start):
            A, B = start[ka].double(), start[kb].double()
            L, R = stack_products(
                [B + dense(u[kb]).double() for u in uploads], [A + dense(u[ka]).double() for u in uploads], w
            )
            if self.truncate:
                L, R = balanced_factors(L, R, A.shape[0])
            if self.updates_b(ctx.round, start[kb]):  # dB = (L R - B A) pinv(A)
                pinv = self.pinv(A)
                key, delta = kb, L @ (R @ pinv) - B @ (A @ pinv)
            else:  # dA = pinv(B) (L R - B A)
                pinv = self.pinv(B)
                key, delta = ka, (pinv @ L) @ R - (pinv @ B) @ A
            gen = torch.Generator().manual_seed(derive_seed(ctx.seed, "fedsrd-down", ctx.round, key))
            keep = torch.rand(delta.shape, generator=gen) >= self.download_p
            out[key] = sparsify((delta / (1.0 - self.download_p)).to(start[key].dtype), keep)
        return out

    def apply_download(self, start: Adapter, download: Payload, ctx: Context) -> Adapter:
        return {k: (v + dense(download[k]).to(v.dtype) if k in download else v) for k, v in start.items()}


class FedSRDe(FedSRD):
    """FedSRD-e: the same, without the SVD truncation of the averaged product."""

    name = "fedsrd-e"
    truncate = False
