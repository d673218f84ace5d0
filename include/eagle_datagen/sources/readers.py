"""Read raw prompt rows from JSONL, Parquet and CSV files.

A line that is not valid UTF-8 or JSON becomes a `Reject` (stage "read") and reading goes on; a file
that cannot be read or parsed as a whole raises `SourceError`. JSON is read strictly: NaN and Infinity
are not JSON, and an object with a key twice is ambiguous (parsers disagree on which value wins), so
both are rejects. A UTF-8 byte order mark at the start of a file is skipped, as editors write one.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.errors import SourceError
from eagle_datagen.records import Reject, excerpt_of
from eagle_datagen.sources.formats import SourceFormat
from eagle_datagen.sources.hf_datasets import hf_rows  # `datasets` itself is imported only for such sources
from eagle_datagen.sources.locations import SourceFile
from eagle_datagen.sources.strict_json import DuplicateKey, loads_strict
from eagle_datagen.storage.parquet import arrow_owned

DEFAULT_FORMAT = SourceFormat()  # detected per record; tabular columns named as the formats name them

OPTIONAL_TEXT_COLUMNS = ("id", "category", "source", "tools")
BOM = b"\xef\xbb\xbf"


def _json_reject(
    exc: ValueError | RecursionError, what: str, origin: str, excerpt: str, record_id: str | None = None
) -> Reject:
    """The reject for JSON text that `loads_strict` refused or that is nested beyond Python's recursion limit."""
    fields: dict[str, Any] = {"stage": "read", "record_id": record_id, "excerpt": excerpt}
    if isinstance(exc, RecursionError):
        return Reject("too_deeply_nested", f"{what} is nested too deeply to parse", origin, **fields)
    if isinstance(exc, DuplicateKey):
        return Reject("duplicate_key", f"{what}: {exc}", origin, **fields)
    return Reject("invalid_json", f"{what} is not valid JSON: {exc}", origin, **fields)


@dataclass(frozen=True, slots=True)
class RawRow:
    origin: str
    value: Any


def read_rows(source: SourceFile, fmt: SourceFormat | None = DEFAULT_FORMAT) -> Iterator[RawRow | Reject]:
    """Rows as the source holds them (tabular JSON-text columns decoded); `fmt` names the columns (None: any
    columns, no JSON text decoded, as benchmark files are read)."""
    if source.format == "hf":  # JSON-text columns decoded as in tabular files
        for origin, row in hf_rows(source):
            yield _decode_tabular_row(origin, row, fmt)
        return
    if source.format == "parquet" and source.is_local:  # row group by row group: memory stays bounded
        yield from _parquet_rows(source.uri, source.uri, fmt)
        return
    if source.format == "jsonl":  # line by line: a 3 GB file never sits in memory whole, nor split into lines
        with source.open_stream() as stream:
            yield from _jsonl_rows(source.uri, stream)
        return
    data = source.read_bytes()
    if source.format == "parquet":
        yield from _parquet_rows(source.uri, pa.BufferReader(arrow_owned(data)), fmt)
    else:
        yield from _csv_rows(source.uri, data, fmt)


def _jsonl_rows(uri: str, stream: IO[bytes] | bytes) -> Iterator[RawRow | Reject]:
    """The rows of a JSONL stream (or bytes), one line at a time."""
    lines = io.BytesIO(stream) if isinstance(stream, bytes) else stream
    for number, raw in enumerate(lines, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if number == 1:
            line = line.removeprefix(BOM)
        origin = f"{uri}:{number}"
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield Reject(
                "invalid_utf8",
                f"line {number} is not valid UTF-8 ({exc.reason} at byte {exc.start})",
                origin,
                stage="read",
                excerpt=excerpt_of(line),
            )
            continue
        try:
            yield RawRow(origin, loads_strict(text))
        except (ValueError, RecursionError) as exc:
            yield _json_reject(exc, f"line {number}", origin, excerpt_of(text))


def _decode_tabular_row(origin: str, row: dict[str, Any], fmt: SourceFormat | None = DEFAULT_FORMAT) -> RawRow | Reject:
    row = dict(row)
    for column in OPTIONAL_TEXT_COLUMNS:  # an empty cell means "absent"
        if row.get(column) == "":
            row[column] = None
    for column in fmt.json_columns() if fmt else ():
        value = row.get(column)
        if isinstance(value, str):
            record_id = row.get("id") if isinstance(row.get("id"), str) else None
            try:
                row[column] = loads_strict(value)
            except (ValueError, RecursionError) as exc:
                return _json_reject(exc, f"column {column!r}", origin, excerpt_of(value), record_id)
    return RawRow(origin, _drop_nulls(row))


def _drop_nulls(value: Any) -> Any:
    """Parquet structs give every field to every row; a field that is null was simply not there."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _parquet_rows(uri: str, data: str | pa.BufferReader, fmt: SourceFormat | None) -> Iterator[RawRow | Reject]:
    try:
        parquet = pq.ParquetFile(data)
        number = 0
        for batch in parquet.iter_batches(batch_size=4096):
            for row in batch.to_pylist():
                number += 1
                yield _decode_tabular_row(f"{uri}:row{number}", row, fmt)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"cannot read Parquet prompt source {uri}: {exc}") from None


def _csv_rows(uri: str, data: bytes, fmt: SourceFormat | None) -> Iterator[RawRow | Reject]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"CSV prompt source {uri} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    # A field may be as large as a record may be (larger ones are rejected one by one as record_too_large);
    # the csv module's default (128 KiB) would stop the whole file at the first long prompt.
    csv.field_size_limit(max(csv.field_size_limit(), min(sys.maxsize, 2**31 - 1)))
    reader = csv.DictReader(io.StringIO(text, newline=""))
    needed = fmt.key_columns() if fmt else ()
    if reader.fieldnames is None or (needed and not set(needed) & set(reader.fieldnames)):
        others = f" (or {', '.join(repr(c) for c in needed[1:])}, by the source's format)" if needed[1:] else ""
        raise SourceError(
            f"CSV prompt source {uri} needs a header row with a {needed[0]!r} column{others}; "
            "other column names need the source's format and columns (format:, columns:)"
        )
    try:
        for number, row in enumerate(reader, start=1):
            yield _decode_tabular_row(f"{uri}:row{number}", {k: v for k, v in row.items() if k is not None}, fmt)
    except csv.Error as exc:
        raise SourceError(f"CSV prompt source {uri} is malformed at line {reader.line_num}: {exc}") from None
