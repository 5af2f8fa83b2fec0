"""A client's rows read from its own file by the actor that hosts it (data.client_paths), so that the
driver never reads them. Only the number of rows and their sha256 go back to the driver (for the resume
check and for weighting by data size).

The file is read with data.source's loader, prompts over model.max_prompt_len tokens are dropped, and
the client keeps data.per_client rows drawn without replacement, seeded by (run seed, client): the same
file gives the same rows on every restart and resume.
"""

from __future__ import annotations

from collections.abc import Callable

from pubswap.data.prompt_length import drop_long_prompts
from pubswap.data.rows import DataError, Row, RowReport
from pubswap.data.sources import load_source
from pubswap.seeding import rng


def load_client_rows(
    data, path: str, client: int, seed: int, count_tokens: Callable[[Row], int], max_len: int
) -> tuple[list[Row], RowReport]:
    """Client `client`'s data.per_client rows from `path` (a DataConfig `data`); DataError naming the path
    and the client when the file is missing, malformed or has too few usable rows."""
    try:
        rows, report = load_source(data.model_copy(update={"paths": [path]}), data.per_client, seed)
    except DataError as e:
        raise DataError(f"data.client_paths[{client}]: {e}") from None
    except (OSError, ValueError) as e:  # a missing file, an unreadable folder: the loaders' own errors
        raise DataError(f"data.client_paths[{client}]: {path}: {e}") from None
    rows = drop_long_prompts(rows, report, count_tokens, max_len)
    if len(rows) < data.per_client:
        raise DataError(
            f"data.client_paths[{client}]: {path} has {len(rows)} usable rows "
            f"({report.total_rejected} rejected), data.per_client is {data.per_client}"
        )
    keep = rng(seed, "client-rows", client).choice(len(rows), size=data.per_client, replace=False)
    return [rows[i] for i in sorted(keep)], report
