"""Per-round checkpoints of a run: committed atomically, verified on read, the newest good one wins.

    run_dir/checkpoints/
      round_0000/   the initial global adapter and the base model's pass@1
      round_0003/   adapter_model.safetensors  adapter_config.json  state.json
      LATEST        "round_0003": the newest committed checkpoint

A checkpoint is written into a temp folder, fsynced, and renamed into place: the rename is the commit. LATEST
is then replaced the same way; it is for people and tools, since the reader trusts the folders. `state.json`
holds the round index, the sha256 of the weights file, the run's config and data fingerprint, and the round's
metrics record. A folder whose state does not parse or whose weights do not match their hash is skipped with a
warning and the previous good one is used.

What a round needs besides the global adapter is derived from (seed, round, step, client) -- the
private and public batches, rollout seeds, swap draws -- and the optimizer is reset every round, so
there are no RNG states or data cursors to save: the round index *is* the cursor.

Full-parameter runs (federation.method dsgd, chocosgd, seedflood) hold `model.safetensors` and the base
model's `config.json` instead of the adapter files (pubswap/learner/full_model.py); state.json names the file.

Decentralized methods have no global model: the checkpoint's adapter is the clients' average (what is
evaluated), and `clients.safetensors` holds every client's own tensors ("x/<client>/<name>") and CHOCO's
public copies ("public/<client>/<name>"), with its sha256 in state.json.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pubswap.lora import WEIGHTS_NAME, Adapter, save_adapter

FORMAT = 1
STATE_NAME = "state.json"
CLIENTS_NAME = "clients.safetensors"
LATEST_NAME = "LATEST"
PREFIX = "round_"


class CheckpointWarning(UserWarning):
    """A checkpoint on disk is incomplete or corrupt and was skipped."""


class ResumeError(RuntimeError):
    """The run directory holds a run that this config cannot continue; the message says what differs."""


class StorageFull(OSError):
    """The run's storage refused a write for lack of space or quota; nothing half-written was left."""


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def storage_full(e: BaseException) -> bool:
    """Whether `e` (or what caused it) is a write refused for lack of space, quota or file size."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, StorageFull) or (isinstance(e, OSError) and e.errno in FULL_ERRNOS):
            return True
        # safetensors (Rust) reports an I/O error as SafetensorError("... (os error 28)"), not as OSError
        m = re.search(r"\(os error (\d+)\)", str(e))
        if m and int(m.group(1)) in FULL_ERRNOS:
            return True
        e = e.__cause__ or e.__context__
    return False


@dataclass
class Checkpoint:
    round: int
    path: Path
    state: dict[str, Any] = field(default_factory=dict)

    def adapter(self) -> Adapter:
        """The global adapter (or, for a full-parameter run, every weight of the model)."""
        from safetensors.torch import load_file

        return load_file(str(self.path / weights_file(self.state)))

    def client_states(self) -> dict | None:
        """{"x": {client: tensors}, "public": {client: tensors}, "opt": {client: flat optimizer state}} of a
        decentralized run; None otherwise."""
        if not self.state.get("clients_sha256"):
            return None
        from safetensors.torch import load_file

        out: dict = {kind: {} for kind in CLIENT_KINDS}
        for name, t in load_file(self.path / CLIENTS_NAME).items():
            kind, cid, key = name.split("/", 2)
            out[kind].setdefault(int(cid), {})[key] = t
        return out


CLIENT_KINDS = ("x", "public", "opt")  # a client's tensors, its CHOCO public copy, its optimizer state


def flat_client_states(states: Mapping) -> dict:
    return {
        f"{kind}/{cid}/{k}": t.contiguous()
        for kind in CLIENT_KINDS
        for cid, tensors in sorted(states.get(kind, {}).items())
        for k, t in sorted(tensors.items())
    }


def weights_file(state: Mapping[str, Any]) -> str:
    """The checkpoint's weights file: the adapter's, or a full-parameter run's model.safetensors."""
    return state.get("weights_file", WEIGHTS_NAME)


def round_dir(ckpt_dir: Path, round_idx: int) -> Path:
    return Path(ckpt_dir) / f"{PREFIX}{round_idx:04d}"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a reader sees the old or the new content, never a mix."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def save_checkpoint(
    ckpt_dir: str | os.PathLike,
    round_idx: int,
    adapter: Mapping,
    lora_config,
    state: Mapping[str, Any],
    clients: Mapping | None = None,
) -> Path:
    """Commit the global adapter after `round_idx` with its `state` (and a decentralized run's per-client
    `clients` states); returns the checkpoint folder."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = round_dir(ckpt_dir, round_idx)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=ckpt_dir))
    try:
        name = getattr(lora_config, "weights_name", WEIGHTS_NAME)  # full-parameter: FullModelConfig
        if name == WEIGHTS_NAME:
            save_adapter(tmp / "adapter", adapter, lora_config)
        else:
            lora_config.save(tmp / "adapter", adapter)
        for f in (tmp / "adapter").iterdir():
            os.replace(f, tmp / f.name)
        (tmp / "adapter").rmdir()
        full = {**state, "format": FORMAT, "round": round_idx, "weights_sha256": sha256_file(tmp / name)}
        if name != WEIGHTS_NAME:
            full["weights_file"] = name
        if clients is not None:
            from safetensors.torch import save_file

            save_file(flat_client_states(clients), tmp / CLIENTS_NAME)
            full["clients_sha256"] = sha256_file(tmp / CLIENTS_NAME)
        (tmp / STATE_NAME).write_text(json.dumps(full, indent=1))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        if final.exists():  # a redone round (after a resume) replaces its old folder
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if storage_full(e):
            raise StorageFull(f"no space left to write checkpoint {final} ({e})") from e
        raise
    _fsync_dir(ckpt_dir)
    write_text_atomic(ckpt_dir / LATEST_NAME, final.name + "\n")
    return final


def update_state(path: Path, changes: Mapping[str, Any]) -> None:
    """Replace fields of a committed checkpoint's state.json atomically (its weights stay as they are):
    the round's record once its evaluation is done."""
    state = json.loads((Path(path) / STATE_NAME).read_text())
    write_text_atomic(Path(path) / STATE_NAME, json.dumps({**state, **changes}, indent=1))


def verify(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(state, "") if the checkpoint folder is complete and intact, else (None, why not)."""
    try:
        state = json.loads((path / STATE_NAME).read_text())
    except FileNotFoundError:
        return None, f"no {STATE_NAME}"
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, f"{STATE_NAME} does not parse ({e})"
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        return None, f"{STATE_NAME} has an unknown format"
    if state.get("round") != int(path.name[len(PREFIX) :]):
        return None, f"{STATE_NAME} says round {state.get('round')}"
    name = weights_file(state)
    weights = path / name
    if not weights.is_file():
        return None, f"no {name}"
    if sha256_file(weights) != state.get("weights_sha256"):
        return None, f"{name} does not match its sha256 (truncated or modified)"
    if state.get("clients_sha256"):
        clients = path / CLIENTS_NAME
        if not clients.is_file() or sha256_file(clients) != state["clients_sha256"]:
            return None, f"{CLIENTS_NAME} is missing or does not match its sha256"
    return state, ""


def list_rounds(ckpt_dir: Path) -> list[int]:
    out = []
    for p in Path(ckpt_dir).glob(f"{PREFIX}*"):
        suffix = p.name[len(PREFIX) :]
        if p.is_dir() and suffix.isdigit():
            out.append(int(suffix))
    return sorted(out)


def latest_checkpoint(ckpt_dir: str | os.PathLike) -> Checkpoint | None:
    """The newest intact checkpoint, warning about every newer one that is not; None if there is none."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return None
    for r in reversed(list_rounds(ckpt_dir)):
        path = round_dir(ckpt_dir, r)
        state, why = verify(path)
        if state is None:
            warnings.warn(
                f"checkpoint {path} is unusable ({why}); falling back to the previous one",
                CheckpointWarning,
                stacklevel=2,
            )
            continue
        return Checkpoint(r, path, state)
    return None


def unusable(ckpt_dir: str | os.PathLike) -> list[str]:
    """'round_NNNN: why' for every round folder that does not verify, newest first."""
    ckpt_dir = Path(ckpt_dir)
    out = []
    for r in reversed(list_rounds(ckpt_dir)) if ckpt_dir.is_dir() else []:
        state, why = verify(round_dir(ckpt_dir, r))
        if state is None:
            out.append(f"{round_dir(ckpt_dir, r).name}: {why}")
    return out


def prune(ckpt_dir: str | os.PathLike, keep_last: int, keep: set[int] = frozenset()) -> list[str]:
    """Delete round folders older than the newest `keep_last` except round 0 and `keep` (the best round);
    returns the deleted folders' names. A folder is renamed to a temp name before it is deleted, so a
    crash in between leaves a temp folder (collected by the next driver), never a half-deleted round."""
    if keep_last <= 0:
        return []
    ckpt_dir = Path(ckpt_dir)
    rounds = list_rounds(ckpt_dir)
    kept = {0, *keep, *rounds[-keep_last:]}
    gone = []
    for r in rounds:
        if r in kept:
            continue
        path = round_dir(ckpt_dir, r)
        trash = ckpt_dir / f".trash.{path.name}.{os.getpid()}"
        os.replace(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
        gone.append(path.name)
    return gone


def collect_temp(run_dir: str | os.PathLike) -> list[Path]:
    """Remove the temp files and folders that killed writers left in run_dir and its checkpoints (call
    only while holding run_dir's lease: then no live writer owns any of them); returns what went."""
    gone = []
    for folder in (Path(run_dir), Path(run_dir) / "checkpoints"):
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if not p.name.startswith(".") or p.name == ".gitignore":
                continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            gone.append(p)
    return gone
