"""The Parquet settings the storage benchmark compares with ours (`encode_shard`), as `write_table` kwargs.

Each variant starts from `write_options(table)`, what `encode_shard` uses, and changes one thing: the token
columns' encoding (dictionary, PLAIN, BYTE_STREAM_SPLIT, DELTA_BINARY_PACKED) with a zstd level, the page
size, the row group size, statistics, or no compression; plus pyarrow's defaults. The variant that equals
ours is marked "(ours)". Variants at zstd 15 and above write at a few MB/s; they are timed once (`SLOW_LEVEL`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.storage.parquet import (
    COMPRESSION_LEVEL,
    DATA_PAGE_BYTES,
    TOKEN_COLUMNS,
    TOKEN_ENCODING,
    write_options,
)

OUTPUT_LEAF = "output_ids.list.element"
LEAVES = [f"{c}.list.element" for c in TOKEN_COLUMNS]
ENCODING_LEVELS = {
    "RLE_DICTIONARY": (1, 3, 9, 19),
    "PLAIN": (1, 3, 6, 9, 12, 19),
    "BYTE_STREAM_SPLIT": (3, 9, 19),
    "DELTA_BINARY_PACKED": (9,),
}
PAGE_SIZES = (64 * 2**10, 2**20, 8 * 2**20, 64 * 2**20)
SLOW_LEVEL = 15

Options = Callable[[pa.Table], dict[str, Any]]


def column_bytes(data: bytes, leaf: str) -> int:
    """Compressed bytes of one column's chunks, from the Parquet footer."""
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    total = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            if group.column(c).path_in_schema == leaf:
                total += group.column(c).total_compressed_size
    return total


def token_encoding(encoding: str, **changes: Any) -> Options:
    """Ours, with the token columns in `encoding` and the other changes."""

    def options(table: pa.Table) -> dict[str, Any]:
        base = write_options(table)
        others = {c: e for c, e in base["column_encoding"].items() if c not in LEAVES}
        if encoding != "RLE_DICTIONARY":
            return base | {"column_encoding": others | dict.fromkeys(LEAVES, encoding)} | changes
        # pyarrow dictionary-encodes the columns use_dictionary names; column_encoding cannot ask for it
        return base | {"use_dictionary": base["use_dictionary"] + LEAVES, "column_encoding": others} | changes

    return options


def ours_with(**changes: Any) -> Options:
    return lambda table: write_options(table) | changes


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 2**10} KiB"


def option_variants(shard_size: int) -> dict[str, tuple[Options, bool]]:
    """name -> (write_table kwargs for a table, whether it is slow enough to time once)."""

    def no_compression(table: pa.Table) -> dict[str, Any]:
        return {k: v for k, v in write_options(table).items() if k != "compression_level"} | {"compression": "none"}

    variants: dict[str, tuple[Options, bool]] = {
        "pyarrow defaults (zstd 1, dictionary everywhere, 1 MiB pages)": (lambda t: {"compression": "zstd"}, False),
        "ours without compression": (no_compression, False),
    }
    for encoding, levels in ENCODING_LEVELS.items():
        for level in levels:
            mark = " **(ours)**" if (encoding, level) == (TOKEN_ENCODING, COMPRESSION_LEVEL) else ""
            variants[f"{encoding} ids, zstd {level}{mark}"] = (
                token_encoding(encoding, compression_level=level),
                level >= SLOW_LEVEL,
            )
    variants["ours + statistics on ids"] = (ours_with(write_statistics=True), False)
    for size in PAGE_SIZES:
        if size != DATA_PAGE_BYTES:
            variants[f"ours, {_size(size)} pages"] = (ours_with(data_page_size=size), False)
    quarter = max(1, shard_size // 4)
    variants[f"ours, row groups of {quarter:,} samples"] = (ours_with(row_group_size=quarter), False)
    return variants
