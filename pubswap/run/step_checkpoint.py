"""In-round checkpoints: a preemption costs the steps since the last one, not the whole round.

    run_dir/checkpoints/inround/   state.json        {"round", "step", "steps": [the round's step records so far],
                                                      "train_state_sha256", "format"}
                                   train_state.safetensors   "<client>/adapter/<name>" and "<client>/opt/<i>/<key>"

Every `checkpoint.every_steps` local steps of a federated round (not after the last one: the round's own
checkpoint follows), the driver stores what a bitwise continuation of the round needs beyond what the
round-start checkpoint and (seed, round, step, client) already determine: each participating logical
client's adapter and AdamW state (moments and step count). The data cursors, rollout seeds, public batches
and swap draws are functions of (seed, round, step, client), and the participants of (seed, round).

The folder is replaced as a whole (written to a temp folder, renamed into place); it is valid only for
the round after the newest round checkpoint, and is removed once that round is committed. Decentralized
methods (whose gossip state is per client and per gossip) checkpoint per round only.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from pubswap.run.checkpoint import sha256_file

DIR_NAME = "inround"
STATE_NAME = "state.json"
TENSORS_NAME = "train_state.safetensors"
FORMAT = 1


@dataclass
class InRound:
    round: int
    step: int
    steps: list[dict]
    states: dict[int, dict]  # client -> {"adapter": {name: tensor}, "opt": {param index: {key: tensor}}}


def flatten(states: dict[int, dict]) -> dict[str, torch.Tensor]:
    out = {}
    for cid, st in states.items():
        for name, t in st["adapter"].items():
            out[f"{cid}/adapter/{name}"] = t.contiguous()
        for name, t in flat_optimizer_state(st["opt"]).items():
            out[f"{cid}/opt/{name}"] = t.contiguous()
    return out


def unflatten(flat: dict[str, torch.Tensor]) -> dict[int, dict]:
    adapters: dict[int, dict] = {}
    opts: dict[int, dict] = {}
    for key, t in flat.items():
        cid, kind, rest = key.split("/", 2)
        adapters.setdefault(int(cid), {})
        (adapters if kind == "adapter" else opts).setdefault(int(cid), {})[rest] = t
    return {cid: {"adapter": a, "opt": nested_optimizer_state(opts.get(cid, {}))} for cid, a in adapters.items()}


def save(ckpt_dir: str | os.PathLike, round_idx: int, step: int, steps: list[dict], states: dict[int, dict]) -> Path:
    """Replace the in-round checkpoint with round `round_idx` after `step`; returns its folder."""
    from safetensors.torch import save_file

    ckpt_dir = Path(ckpt_dir)
    final = ckpt_dir / DIR_NAME
    tmp = Path(tempfile.mkdtemp(prefix=f".{DIR_NAME}.", dir=ckpt_dir))
    try:
        save_file(flatten(states), tmp / TENSORS_NAME)
        state = {
            "format": FORMAT,
            "round": round_idx,
            "step": step,
            "steps": steps,
            "train_state_sha256": sha256_file(tmp / TENSORS_NAME),
        }
        (tmp / STATE_NAME).write_text(json.dumps(state))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        clear(ckpt_dir)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def load(ckpt_dir: str | os.PathLike, round_idx: int) -> InRound | None:
    """The in-round checkpoint of `round_idx`, if there is an intact one."""
    from safetensors.torch import load_file

    folder = Path(ckpt_dir) / DIR_NAME
    try:
        state = json.loads((folder / STATE_NAME).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("format") != FORMAT or state.get("round") != round_idx:
        return None
    tensors = folder / TENSORS_NAME
    if not tensors.is_file() or sha256_file(tensors) != state.get("train_state_sha256"):
        return None
    return InRound(round_idx, int(state["step"]), state["steps"], unflatten(load_file(tensors)))


def clear(ckpt_dir: str | os.PathLike) -> bool:
    """Remove the in-round checkpoint (renamed away first, so no half-deleted folder is ever read)."""
    folder = Path(ckpt_dir) / DIR_NAME
    if not folder.exists():
        return False
    trash = Path(ckpt_dir) / f".trash.{DIR_NAME}.{os.getpid()}"
    os.replace(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)
    return True


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict[int, dict[str, torch.Tensor]]:
    """An optimizer's per-parameter state (AdamW: step, exp_avg, exp_avg_sq) as CPU tensors."""
    return {
        int(i): {
            k: (v if torch.is_tensor(v) else torch.tensor(v)).detach().to("cpu", copy=True) for k, v in entry.items()
        }
        for i, entry in optimizer.state_dict()["state"].items()
    }


def flat_optimizer_state(state: dict[int, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """optimizer_state's {param index: {key: tensor}} as {"index/key": tensor} (one safetensors dict)."""
    return {f"{i}/{key}": t for i, entry in state.items() for key, t in entry.items()}


def nested_optimizer_state(flat: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    out: dict[int, dict[str, torch.Tensor]] = {}
    for name, t in flat.items():
        i, key = name.split("/", 1)
        out.setdefault(int(i), {})[key] = t
    return out


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[int, dict[str, torch.Tensor]]) -> None:
    sd = optimizer.state_dict()
    sd["state"] = {int(i): dict(entry) for i, entry in state.items()}
    optimizer.load_state_dict(sd)
