"""A data or quarantine shard built in bounded memory, to the same bytes as `encode_shard` of the whole table.

Rows arrive in batches, in any order, each with its place in the shard (publishing reads checkpoints in the
order they were written). Each batch becomes a `samples_table` and is appended to a local Arrow IPC file; then
`write_parquet` reads the rows back in their places' order, a row group at a time (storage/reorder.py, a bucket
per row group), and writes the Parquet file row group by row group, with `encode_shard`'s options: the same
schema, compression and encodings, and the same rows per row group, which `encode_shard` derives from the whole
table's Arrow size. That size is summed here batch by batch (`_ArrowSize`), as one table of all the rows would
count it. Memory: one batch, and a row group (ROW_GROUP_BYTES of Arrow data) about three times over (read, put
in order, its Parquet levels), whatever the shard's size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.storage import reorder
from eagle_datagen.storage.parquet import (
    QUARANTINE_SCHEMA,
    SAMPLE_SCHEMA,
    rows_per_group,
    samples_table,
    shard_write_options,
)


def _bitmap(length: int) -> int:
    return (length + 7) // 8


class _ArrowSize:
    """`Table.nbytes` of all the rows added, as one table built from all of them would have it: the value bytes
    add up batch by batch; a validity bitmap (ceil(rows / 8) bytes) exists where any row is null."""

    def __init__(self) -> None:
        self.value_bytes = 0
        self.levels: dict[tuple[str, int], list[int]] = {}  # (column, depth) -> [length, nulls]
        self.bits: dict[str, int] = {}  # boolean columns: their values are a bitmap too, over all the rows

    def add(self, table: pa.Table) -> None:
        for name, column in zip(table.column_names, table.columns, strict=True):
            for chunk in column.chunks:
                self.value_bytes += chunk.nbytes
                depth, array = 0, chunk
                while True:
                    if array.null_count:
                        self.value_bytes -= _bitmap(len(array))
                    level = self.levels.setdefault((name, depth), [0, 0])
                    level[0] += len(array)
                    level[1] += array.null_count
                    if pa.types.is_boolean(array.type):
                        self.value_bytes -= _bitmap(len(array))
                        self.bits[name] = self.bits.get(name, 0) + len(array)
                    if not pa.types.is_list(array.type):
                        break
                    depth, array = depth + 1, array.values

    @property
    def nbytes(self) -> int:
        bitmaps = sum(_bitmap(length) for length, nulls in self.levels.values() if nulls)
        return self.value_bytes + bitmaps + sum(_bitmap(length) for length in self.bits.values())


class StagedShard:
    """One shard file being built in `folder` (a local work folder the caller removes)."""

    def __init__(self, folder: Path, quarantine: bool = False) -> None:
        self.quarantine = quarantine
        self.schema = QUARANTINE_SCHEMA if quarantine else SAMPLE_SCHEMA
        self.staging = folder / ("quarantine.arrow" if quarantine else "data.arrow")
        self.rows = 0
        self._size = _ArrowSize()
        self._places: list[np.ndarray] = []
        self._sink: pa.OSFile | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None

    def add(self, places: Sequence[int], rows: Sequence[Mapping[str, Any]]) -> None:
        """Rows (as `samples_table` takes them) and each one's place in the shard."""
        if not rows:
            return
        table = samples_table(rows, self.quarantine)
        if self._writer is None:
            self._sink = pa.OSFile(str(self.staging), "wb")
            self._writer = pa.ipc.new_file(self._sink, self.schema)
        self._writer.write_table(table)
        self._size.add(table)
        self._places.append(np.asarray(places, dtype=np.int64))
        self.rows += table.num_rows

    def _close_staging(self) -> None:
        if self._writer is not None and self._sink is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None

    def write_parquet(self, target: Path) -> None:
        """The shard's Parquet file at `target` (local), rows in their places' order."""
        self._close_staging()
        places = np.concatenate(self._places) if self._places else np.zeros(0, np.int64)
        # places may have gaps (the other kind's rows): their ranks are the rows' order
        rank = np.empty(len(places), dtype=np.int64)
        rank[np.argsort(places, kind="stable")] = np.arange(len(places), dtype=np.int64)
        group_rows = rows_per_group(self._size.nbytes, self.rows)
        options = shard_write_options(self.schema.names, group_rows)
        row_group_size = options.pop("row_group_size")
        with pq.ParquetWriter(str(target), self.schema, **options) as writer:
            # a reorder bucket per row group: each comes in order as one table, one chunk per column as
            # encode_shard's table has it (pages are cut where it cuts them), written as it is: no copy
            cuts = np.arange(0, self.rows, row_group_size, dtype=np.int64)
            for group in reorder.in_order(self.staging, rank, cuts=cuts):
                writer.write_table(group.combine_chunks(), row_group_size=row_group_size)
