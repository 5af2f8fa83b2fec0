"""What a client sends up and the server sends down, and its exact size on the wire.

A payload maps adapter keys to either a dense tensor or a `Sparse` one. A sparse tensor is sent as its
kept values (in the tensor's dtype) plus where they are: int32 flat indices or a bitmask of numel/8
bytes, whichever is smaller. Keys absent from a payload are not sent (FFA-LoRA's frozen A, the factor
FedSRD does not update this round). `payload_bytes` counts exactly what these tensors hold, so the
communication columns are the sizes of the objects that really travel through Ray's object store.
`payload_bytes(..., board=True)` counts as the FedSRD leaderboard does (its "Comm. Cost (MB)"): 4
bytes per value sent, no indices or bitmasks, whatever the dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class Sparse:
    shape: tuple[int, ...]
    values: Tensor  # the kept entries, in flat (row-major) order
    index: Tensor | None  # int32 flat indices, or None when `mask` holds the positions
    mask: np.ndarray | None  # np.packbits of the flat keep-mask (uint8), or None

    @property
    def nbytes(self) -> int:
        where = self.index.numel() * 4 if self.index is not None else int(self.mask.size)
        return self.values.numel() * self.values.element_size() + where

    def dense(self) -> Tensor:
        numel = int(np.prod(self.shape)) if self.shape else 1
        out = torch.zeros(numel, dtype=self.values.dtype)
        if self.index is not None:
            out[self.index.long()] = self.values
        else:
            keep = torch.from_numpy(np.unpackbits(self.mask, count=numel).astype(bool))
            out[keep] = self.values
        return out.reshape(self.shape)


Payload = Mapping[str, "Tensor | Sparse"]


def sparsify(t: Tensor, keep: Tensor) -> Sparse:
    """`t` where the boolean `keep` is set, in the cheaper of the two position encodings."""
    flat, keep = t.reshape(-1), keep.reshape(-1)
    values = flat[keep].clone()
    numel, kept = flat.numel(), int(values.numel())
    if kept * 4 <= (numel + 7) // 8:
        return Sparse(tuple(t.shape), values, torch.nonzero(keep).reshape(-1).to(torch.int32), None)
    return Sparse(tuple(t.shape), values, None, np.packbits(keep.numpy().astype(np.uint8)))


def kept(x: Tensor | Sparse) -> Tensor:
    """The boolean mask of the positions a payload tensor carries (all of them when dense)."""
    if not isinstance(x, Sparse):
        return torch.ones(x.shape, dtype=torch.bool)
    numel = int(np.prod(x.shape)) if x.shape else 1
    if x.index is not None:
        out = torch.zeros(numel, dtype=torch.bool)
        out[x.index.long()] = True
    else:
        out = torch.from_numpy(np.unpackbits(x.mask, count=numel).astype(bool))
    return out.reshape(x.shape)


def dense(x: Tensor | Sparse) -> Tensor:
    return x.dense() if isinstance(x, Sparse) else x


FP32 = 4  # bytes a value in the FedSRD leaderboard's convention


def tensor_bytes(x: Tensor | Sparse, board: bool = False) -> int:
    """Exact bytes (values in their dtype + positions), or with `board` the FedSRD leaderboard's
    convention: fp32 values only, positions not counted."""
    if board:
        return (x.values.numel() if isinstance(x, Sparse) else x.numel()) * FP32
    return x.nbytes if isinstance(x, Sparse) else x.numel() * x.element_size()


def payload_bytes(payload: Payload, board: bool = False) -> int:
    return sum(tensor_bytes(v, board) for v in payload.values())
