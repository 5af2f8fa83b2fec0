"""Raw records of a dataset, from a hub name or a local file, before mapping to rows.

    records = load_records("EleutherAI/hendrycks_math", split="train")     # the hub (on a cluster)
    records = load_records("/data/math/train.parquet")                     # a local parquet/jsonl/json file
    records = load_records("/data/math/")                                  # every such file in a folder

Local files are read with `datasets`' parquet/json builders, so they have the hub dataset's schema.
A path that does not exist and does not look like a hub id is an error naming it.
"""

from __future__ import annotations

from pathlib import Path

from pubswap.hub import is_hub_id

SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


def _local_files(path: Path) -> tuple[str, list[str]]:
    files = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"{path}: no {'/'.join(SUFFIXES)} files in this folder")
    kinds = {SUFFIXES.get(p.suffix) for p in files}
    if None in kinds or len(kinds) != 1:
        raise ValueError(f"{path}: expected .parquet, .jsonl or .json files of one kind, got "
                         f"{sorted({p.suffix for p in files})}")
    return kinds.pop(), [str(p) for p in files]


def load_records(source: str, split: str = "train", config: str | None = None) -> list[dict]:
    """Every record of a local file/folder, or of a hub dataset's `split` (optionally a named `config`)."""
    import datasets

    path = Path(source).expanduser()
    if path.exists():
        builder, files = _local_files(path)
        ds = datasets.load_dataset(builder, data_files=files, split="train")
    elif is_hub_id(source):
        ds = datasets.load_dataset(source, config, split=split)
    else:
        raise FileNotFoundError(f"dataset {source!r} is neither a local file or folder nor a hub id (owner/name)")
    return ds.to_list()
