"""Raw records of a dataset, from a hub name or a local file, before mapping to rows.

    records = load_records("EleutherAI/hendrycks_math", split="train")     # the hub (on a cluster)
    records = load_records("/data/math/train.parquet")                     # a local parquet/jsonl/json file
    records = load_records("/data/math/")                                  # every such file in a folder

Local files are read with `datasets`' parquet/json builders, so they have the hub dataset's schema.
A path that does not exist and does not look like a hub id is an error naming it.
"""

from __future__ import annotations

from pathlib import Path

from pubswap.data.rows import DataError
from pubswap.hub import is_hub_id

SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


class DataFileError(DataError):
    """A local data file that cannot be read as records: one line naming the file (and line)."""


def check_file(path: str) -> None:
    """Raise DataFileError for the first malformed line of a JSON-lines file, an unparseable JSON file,
    or a parquet file whose footer cannot be read."""
    import json

    p = Path(path)
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            _ = pq.ParquetFile(p).schema_arrow  # reading the footer is the check
        except Exception as e:
            raise DataFileError(
                f"{p}: not a readable parquet file ({type(e).__name__}: {str(e).splitlines()[0]})"
            ) from None
        return
    text = p.read_text(errors="replace")
    if p.suffix == ".json" and text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataFileError(f"{p}: line {e.lineno}: bad JSON ({e.msg})") from None
        bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
        if bad is not None:
            raise DataFileError(f"{p}: record {bad}: not a JSON object")
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataFileError(f"{p}: line {number}: bad JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise DataFileError(f"{p}: line {number}: not a JSON object")


def _local_files(path: Path) -> tuple[str, list[str]]:
    files = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"{path}: no {'/'.join(SUFFIXES)} files in this folder")
    kinds = {SUFFIXES.get(p.suffix) for p in files}
    if None in kinds or len(kinds) != 1:
        raise ValueError(
            f"{path}: expected .parquet, .jsonl or .json files of one kind, got {sorted({p.suffix for p in files})}"
        )
    return kinds.pop(), [str(p) for p in files]


def load_records(source: str, split: str = "train", config: str | None = None) -> list[dict]:
    """Every record of a local file/folder, or of a hub dataset's `split` (optionally a named `config`)."""
    import datasets

    path = Path(source).expanduser()
    if path.exists():
        builder, files = _local_files(path)
        for f in files:
            check_file(f)
        try:
            ds = datasets.load_dataset(builder, data_files=files, split="train")
        except Exception as e:  # e.g. one field with different types on different lines
            cause = e.__cause__ or e
            raise DataFileError(
                f"{path}: cannot be read as a table ({type(cause).__name__}: "
                f"{str(cause).splitlines()[0] if str(cause) else ''})"
            ) from e
    elif is_hub_id(source):
        ds = datasets.load_dataset(source, config, split=split)
    else:
        raise FileNotFoundError(f"dataset {source!r} is neither a local file or folder nor a hub id (owner/name)")
    return ds.to_list()
