"""A run_dir on object storage: `run_dir=s3://bucket/prefix` (or gs://, or any URI pyarrow opens).

Everything a resume needs (checkpoints, metrics.jsonl, summary.json, config.json, TensorBoard events, the
lease) then lives in the object store, so a run survives the loss of every node, the head included. The
driver works on a node-local mirror of the run (`RunMirror.local`, under $PUBSWAP_SCRATCH or
~/.cache/pubswap/runs) exactly as on a local run_dir, and persists each commit to the store right after
making it locally:

- start: `pull()` makes the mirror an exact copy of the store (the store is the truth; a stale mirror
  left on this node by an earlier attempt is overwritten), then the usual local resume logic runs on it;
- a checkpoint folder is uploaded file by file with state.json last, after deleting the old state.json
  of a redone round: an interrupted upload leaves a folder without a valid state.json, which the resume
  skips (pubswap/run/checkpoint.py verifies every file's sha256), so the previous round is used;
- every other file is one PUT, which object stores apply whole: a reader sees the old or the new object.

Credentials and endpoints come from the environment as pyarrow reads them (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, an instance profile or workload identity; for GCS, Google's
default credentials). Node-local scratch (the adapters handed to vLLM) never goes here.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from pubswap.run.checkpoint import STATE_NAME

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(run_dir: str) -> bool:
    """An object-store URI (s3://, gs://, ...) rather than a path of this node's file system."""
    return bool(_URI.match(str(run_dir)))


def scratch_root() -> Path:
    return Path(os.environ.get("PUBSWAP_SCRATCH") or Path.home() / ".cache" / "pubswap" / "runs")


class StorageError(OSError):
    """The object store cannot be reached or refused an operation; the message names the URI."""


class ObjectStore:
    """The files under one URI prefix, addressed by paths relative to it ("checkpoints/round_0001/state.json")."""

    def __init__(self, uri: str):
        import pyarrow.fs as pafs

        self.uri = uri.rstrip("/")
        self._pafs = pafs
        try:
            self.fs, root = pafs.FileSystem.from_uri(self.uri)
        except (ValueError, OSError) as e:
            raise StorageError(f"run_dir={uri}: cannot open it ({e})") from e
        self.root = root.rstrip("/")

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def read_bytes(self, rel: str) -> bytes | None:
        """The object's content, or None if there is none."""
        try:
            with self.fs.open_input_stream(self._path(rel)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write_bytes(self, rel: str, data: bytes) -> None:
        with self.fs.open_output_stream(self._path(rel)) as f:
            f.write(data)

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self._path(rel)).type != self._pafs.FileType.NotFound

    def delete(self, rel: str) -> None:
        try:
            self.fs.delete_file(self._path(rel))
        except FileNotFoundError:
            pass

    def delete_tree(self, rel: str) -> None:
        for name in self.list_files(rel):
            self.delete(name)

    def list_files(self, rel: str = "") -> dict[str, int]:
        """{relative path: size} of every object under `rel` (recursively)."""
        sel = self._pafs.FileSelector(self._path(rel), recursive=True, allow_not_found=True)
        out = {}
        for info in self.fs.get_file_info(sel):
            if info.type == self._pafs.FileType.File:
                out[info.path[len(self.root) + 1 :]] = info.size
        return out

    def upload(self, local: Path, rel: str) -> None:
        with open(local, "rb") as src, self.fs.open_output_stream(self._path(rel)) as dst:
            shutil.copyfileobj(src, dst, 1 << 22)

    def download(self, rel: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.download")
        with self.fs.open_input_stream(self._path(rel)) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        os.replace(tmp, local)


def _skip(rel: str) -> bool:
    """Temp files of a writer and the lease are not part of the run's content."""
    return any(part.startswith(".") for part in rel.split("/")) or rel == "LEASE"


class RunMirror:
    """A URI run_dir's node-local working copy, and the pushes that persist each commit to the store."""

    def __init__(self, uri: str, scratch: Path | None = None):
        self.store = ObjectStore(uri)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", self.store.uri.rsplit("/", 1)[-1]) or "run"
        digest = hashlib.sha1(self.store.uri.encode()).hexdigest()[:10]
        self.local = (scratch or scratch_root()) / f"{name}-{digest}"

    def pull(self) -> int:
        """Make the mirror an exact copy of the store's run (every file downloaded again: a file of the same
        size may hold other bytes); returns the number of files."""
        remote = {rel: size for rel, size in self.store.list_files().items() if not _skip(rel)}
        self.local.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.local.rglob("*"), reverse=True):
            rel = path.relative_to(self.local).as_posix()
            if path.is_file() and rel not in remote and rel != "LEASE":
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
        for rel in sorted(remote):
            self.store.download(rel, self.local / rel)
        return len(remote)

    def has_run(self) -> bool:
        return any(not _skip(rel) for rel in self.store.list_files())

    def push(self, rels: Iterable[str]) -> None:
        """Upload these files or folders of the mirror (a folder's state.json last)."""
        for rel in rels:
            path = self.local / rel
            if path.is_dir():
                files = sorted(
                    p for p in path.rglob("*") if p.is_file() and not _skip(p.relative_to(self.local).as_posix())
                )
                state = [p for p in files if p.name == STATE_NAME]
                if state:  # a redone round: its old state.json must not vouch for half-replaced files
                    self.store.delete(f"{rel}/{STATE_NAME}")
                for p in [p for p in files if p.name != STATE_NAME] + state:
                    self.store.upload(p, p.relative_to(self.local).as_posix())
            elif path.is_file():
                self.store.upload(path, rel)

    def remove(self, rels: Iterable[str]) -> None:
        for rel in rels:
            if rel.startswith("checkpoints/"):  # state.json first: a half-deleted folder is then never used
                self.store.delete(f"{rel}/{STATE_NAME}")
            self.store.delete_tree(rel)


class LocalRun:
    """A run_dir on this node's (or a shared) file system: the mirror is the run_dir itself."""

    def __init__(self, path: str):
        self.local = Path(path).resolve()
        self.store = None

    def pull(self) -> int:
        return 0

    def push(self, rels: Iterable[str]) -> None:
        pass

    def remove(self, rels: Iterable[str]) -> None:
        pass


def open_run(run_dir: str) -> RunMirror | LocalRun:
    return RunMirror(run_dir) if is_uri(run_dir) else LocalRun(run_dir)
