"""Rows of a local Arrow IPC file put into another order in bounded memory.

Publishing gets a shard's samples in checkpoint order and writes them in plan order; a shuffled export stages
training rows and writes them in the seed's order. Both hand `in_order` the staged file and each staged row's
place in the output (a permutation, computed from ids and counts only); an export with a training mix hands
`gather` the staged row of each output place, where a row may fill several places (its copies) or none. When
the file is small it is read and put in order at once; otherwise its rows are distributed, batch by batch, into
bucket files that each hold a run of consecutive output places of at most about `budget` bytes (cut by the rows'
sizes in output order), and each bucket is read and put in order in turn. Memory: one staged batch, a bucket
twice (read, and put in order), about 24 bytes per output row (a file of more than MAX_BUCKETS budgets gets larger
buckets). The file is read, not memory-mapped, so what was read does not stay resident.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

BUDGET_BYTES = 16 * 2**20
MAX_BUCKETS = 512  # files open at once while distributing; past BUDGET_BYTES x this, buckets grow instead
_PLACE = "_output_place"


def _batch_bytes(batch: pa.RecordBatch | pa.Table) -> np.ndarray:
    """Each row's Arrow bytes, about: its list and string values, plus the fixed-width part spread evenly."""
    sizes = np.full(batch.num_rows, 16 * batch.num_columns, dtype=np.int64)
    for column in batch.columns:
        kind = column.type
        if pa.types.is_list(kind):
            value = kind.value_type
            width = value.bit_width // 8 if pa.types.is_primitive(value) else 8
            lengths = pc.list_value_length(column)
        elif pa.types.is_string(kind) or pa.types.is_binary(kind):
            width, lengths = 1, pc.binary_length(column)
        else:
            continue
        sizes += pc.fill_null(lengths, 0).to_numpy(zero_copy_only=False).astype(np.int64) * max(width, 1)
    return sizes


def row_bytes(staging: Path) -> np.ndarray:
    """The staged rows' sizes (`_batch_bytes`), in file order."""
    with pa.OSFile(str(staging)) as source:
        reader = pa.ipc.open_file(source)
        parts = [_batch_bytes(reader.get_batch(i)) for i in range(reader.num_record_batches)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def slices(table: pa.Table, max_rows: int, max_bytes: int) -> Iterator[pa.Table]:
    """`table` in consecutive slices of at most `max_rows` rows and about `max_bytes` (at least one row each)."""
    sizes = np.cumsum(_batch_bytes(table)) if table.num_rows else np.zeros(0, np.int64)
    start = 0
    while start < table.num_rows:
        base = int(sizes[start - 1]) if start else 0
        fit = int(np.searchsorted(sizes, base + max_bytes, side="right")) - start
        length = max(1, min(max_rows, fit))
        yield table.slice(start, length)
        start += length


def in_order(
    staging: Path, place: np.ndarray, budget: int = BUDGET_BYTES, cuts: np.ndarray | None = None
) -> Iterator[pa.Table]:
    """The rows of the IPC file `staging` in output order: staged row i goes to place `place[i]` (a permutation
    of 0..n-1). Tables come in output order, one per bucket: of about `budget` bytes, or, with `cuts` (the sorted
    places where a bucket starts, 0 first), exactly those runs of places (a writer's row groups). Bucket files
    are made beside `staging` and removed (as is nothing else: the caller owns `staging`)."""
    n = len(place)
    if n == 0:
        return
    order = np.empty(n, dtype=np.int64)  # output place -> staged row
    order[place] = np.arange(n, dtype=np.int64)
    yield from _gather(staging, order, budget, cuts, by_row=np.asarray(place, np.int64))


def gather(staging: Path, source: np.ndarray, budget: int = BUDGET_BYTES) -> Iterator[pa.Table]:
    """The rows of the IPC file `staging` as output place p takes staged row `source[p]` (a row may fill several
    places, or none): `in_order` where rows repeat. Tables come in output order, one per bucket of about
    `budget` bytes."""
    if len(source) == 0:
        return
    source = np.asarray(source, np.int64)
    yield from _gather(staging, source, budget, None, by_row=None)


def _gather(
    staging: Path, order: np.ndarray, budget: int, cuts: np.ndarray | None, by_row: np.ndarray | None
) -> Iterator[pa.Table]:
    """`order[p]` is the staged row of output place p; `by_row`, when each staged row has one place, that place
    (saves sorting the places by row)."""
    n = len(order)
    sizes = row_bytes(staging)
    if (int(sizes[order].sum()) <= budget) if cuts is None else len(cuts) == 1:
        with pa.OSFile(str(staging)) as source:
            table = pa.ipc.open_file(source).read_all()
        ordered = table.take(pa.array(order))
        del table  # not held while the caller works on the rows
        yield ordered
        return
    if cuts is None:  # a bucket: consecutive places, about budget bytes
        out_sizes = sizes[order]
        budget = max(budget, -(-int(out_sizes.sum()) // MAX_BUCKETS))
        bucket_of_place = np.cumsum(out_sizes) // max(budget, 1)
        del out_sizes
    else:
        bucket_of_place = np.searchsorted(cuts, np.arange(n), side="right") - 1
    if by_row is None:  # output places grouped by their staged row, the rows ascending
        places_by_row = np.argsort(order, kind="stable")
        rows_sorted = order[places_by_row]
    else:
        places_by_row, rows_sorted = by_row, np.arange(n, dtype=np.int64)
    buckets = [staging.with_name(f"{staging.name}.bucket{k}") for k in range(int(bucket_of_place.max()) + 1)]
    try:
        with pa.OSFile(str(staging)) as source:
            reader = pa.ipc.open_file(source)
            schema = reader.schema.append(pa.field(_PLACE, pa.int64()))
            sinks = [pa.OSFile(str(path), "wb") for path in buckets]
            writers = [pa.ipc.new_file(out, schema) for out in sinks]
            offset = 0
            for i in range(reader.num_record_batches):
                batch = pa.Table.from_batches([reader.get_batch(i)])
                lo, hi = np.searchsorted(rows_sorted, [offset, offset + batch.num_rows])
                places, rows = places_by_row[lo:hi], rows_sorted[lo:hi] - offset
                offset += batch.num_rows
                which = bucket_of_place[places]
                for k in np.unique(which).tolist():
                    mask = which == k
                    part = batch.take(pa.array(rows[mask]))
                    writers[k].write_table(part.append_column(_PLACE, pa.array(places[mask], pa.int64())))
            for writer, out in zip(writers, sinks, strict=True):
                writer.close()
                out.close()
        del bucket_of_place, places_by_row, rows_sorted
        for path in buckets:
            with pa.OSFile(str(path)) as source:
                part = pa.ipc.open_file(source).read_all()
            path.unlink()
            ordered = part.take(pa.array(np.argsort(part.column(_PLACE).to_numpy(), kind="stable")))
            del part
            ordered = ordered.drop_columns([_PLACE])
            yield ordered
            del ordered
    finally:
        for path in buckets:
            path.unlink(missing_ok=True)
