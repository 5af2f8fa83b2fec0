"""Datasets as rows of (prompt, answer, topic); heterogeneous client splits."""

from pubswap.data.rows import Row, RowReport, validate_rows
from pubswap.data.split import FederatedSplit, dirichlet_split, format_histogram, topic_histogram

__all__ = [
    "Row",
    "RowReport",
    "validate_rows",
    "FederatedSplit",
    "dirichlet_split",
    "topic_histogram",
    "format_histogram",
]
