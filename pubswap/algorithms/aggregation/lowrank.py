"""Weighted sums of LoRA products without forming the d x m matrix.

sum_i w_i B_i A_i = L R with L = [w_1 B_1 ... w_n B_n] (d x nr) and R = [A_1; ...; A_n] (nr x m).
Its SVD comes from two thin QRs and the SVD of an nr x nr matrix: L = Q1 R1, R^T = Q2 R2, so
L R = Q1 (R1 R2^T) Q2^T and R1 R2^T = U S V^T gives L R = (Q1 U) S (Q2 V)^T. For Qwen3-1.7B's MLP
(6144 x 2048, 4 clients of r = 32) that is a 128 x 128 SVD instead of a 2048-wide one, exact in
exact arithmetic, on whichever device the factors are.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def stack_products(Bs: Sequence[Tensor], As: Sequence[Tensor], w: Sequence[float]) -> tuple[Tensor, Tensor]:
    """(L, R) with L @ R = sum_i w_i B_i @ A_i, in float64."""
    L = torch.cat([wi * B.double() for wi, B in zip(w, Bs)], dim=1)
    R = torch.cat([A.double() for A in As], dim=0)
    return L, R


def truncated_svd(L: Tensor, R: Tensor, rank: int) -> tuple[Tensor, Tensor, Tensor]:
    """U (d x k), S (k,), Vh (k x m) of the best rank-k approximation of L @ R, k = min(rank, inner dim)."""
    q1, r1 = torch.linalg.qr(L)
    q2, r2 = torch.linalg.qr(R.T)
    u, s, vh = torch.linalg.svd(r1 @ r2.T)
    k = min(rank, s.numel())
    return q1 @ u[:, :k], s[:k], (q2 @ vh.T[:, :k]).T


def balanced_factors(L: Tensor, R: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """(B, A), B d x rank and A rank x m, with B A the best rank-`rank` approximation of L R and the
    singular values split evenly: B = U sqrt(S), A = sqrt(S) Vh (zero-padded when L R has lower rank)."""
    u, s, vh = truncated_svd(L, R, rank)
    root = s.sqrt()
    B = torch.zeros(L.shape[0], rank, dtype=L.dtype)
    A = torch.zeros(rank, R.shape[1], dtype=L.dtype)
    B[:, : s.numel()] = u * root
    A[: s.numel()] = root[:, None] * vh
    return B, A
