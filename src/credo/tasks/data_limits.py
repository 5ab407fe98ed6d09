"""How much of a dataset file credo reads into memory, checked before it is read.

A dataset file may come from anywhere. Its rows become Python objects (hundreds of bytes each at least); a parquet
file compresses millions of repeated rows into kilobytes (5M rows in 33 KB once reached a MemoryError at 1 GiB);
a path may name a FIFO (a read that never starts) or a device (`/dev/zero`: one that never ends). So each file is
checked first: a text file (JSON Lines, JSON) is a regular file of at most `MAX_TEXT_BYTES`, a parquet file's
footer declares at most `MAX_ROWS` rows and `MAX_PARQUET_BYTES` uncompressed, and no file yields more than
`MAX_ROWS` rows.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_ROWS = 2_000_000
"""The most rows a dataset file may hold."""

MAX_PARQUET_BYTES = 4 * 2**30
"""The most bytes a parquet file's columns may take uncompressed (its footer says so before anything inflates)."""

MAX_TEXT_BYTES = 2 * 2**30
"""The largest JSON Lines or JSON file credo reads (its text and then its rows are held in memory)."""


class TooLarge(ValueError):
    """A dataset file that holds or declares more than credo reads into memory."""


def check_rows(path: Path, rows: int) -> None:
    """A `TooLarge` naming `path` if it holds more than `MAX_ROWS` rows."""
    if rows > MAX_ROWS:
        raise TooLarge(f"{path}: {rows:,} rows, above the {MAX_ROWS:,} a dataset file may hold in memory "
                       "(split it, or sample the rows you train on)")


def check_text_file(path: Path) -> None:
    """A ValueError naming `path` unless it is (or links to) a regular file; a `TooLarge` if it has more than
    `MAX_TEXT_BYTES`."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path}: not a regular file (a FIFO or a device would block or never end the read)")
    if info.st_size > MAX_TEXT_BYTES:
        raise TooLarge(f"{path}: {info.st_size:,} bytes, above the {MAX_TEXT_BYTES:,} bytes a JSON "
                       "or JSON Lines dataset file may take in memory (split it, or sample the rows you train on)")


def check_parquet_size(path: Path) -> None:
    """A `TooLarge` naming `path` if its footer declares more than `MAX_ROWS` rows or `MAX_PARQUET_BYTES` bytes
    uncompressed, read before any column is decompressed."""
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    inflated = sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
    if metadata.num_rows > MAX_ROWS or inflated > MAX_PARQUET_BYTES:
        raise TooLarge(f"{path}: {metadata.num_rows:,} rows, {inflated / 2**20:,.0f} MiB uncompressed, above the "
                       f"{MAX_ROWS:,} rows and {MAX_PARQUET_BYTES / 2**30:g} GiB a dataset file may hold in memory "
                       "(split it, or sample the rows you train on)")
