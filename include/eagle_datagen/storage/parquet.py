"""Parquet encoding of the data contract v1 sample shards (`data/...` and `quarantine/...`).

`SAMPLE_SCHEMA` fixes the columns, their order and types; `QUARANTINE_SCHEMA` adds why a sample was
quarantined. Both carry the schema metadata {"eagle_datagen.contract": "1", "eagle_datagen.contract_minor": "1"}:
the contract is v1.1. The major version is what every v1 reader checks; a minor version adds columns at the end
and nothing else, so a reader of v1.0 reads a v1.1 shard as it always did, and a v1.1 reader decodes a v1.0
shard (no minor key) with the added columns filled in (`mode`: thinking, the only mode there was; the others
null). Columns not marked nullable are Parquet REQUIRED: `samples_table` refuses a row that lacks one.

The encoding (`encode_shard`) uses only what every Parquet reader supports: PLAIN and RLE_DICTIONARY pages
(data page v1) and zstd, readable by pyarrow, DuckDB and Spark (parquet-java); one row group per ~128 MiB
of uncompressed data. It was chosen with `bench/bench_storage.py` on token ids of natural text (results and
every option compared in docs/internals/benchmarks.md, "Storage"):
- token ids (`prompt_ids`, `output_ids`): PLAIN int32 values, zstd level 9, 8 MiB data pages. In a real
  BPE vocabulary an id is a merge rank, so frequent tokens have small ids and the raw little-endian bytes
  are skewed; and text repeats phrases, which zstd's match finder sees in raw ids (4-byte aligned, every
  occurrence of a token the same bytes) but not in dictionary indices bit-packed across byte boundaries. On
  natural text that gave 1.29 bytes per output token, 0.90x the order-0 limit and 4.4x smaller than
  JSONL; dictionary encoding was 1.21x larger, BYTE_STREAM_SPLIT 1.14x (and on INT32 it needs readers
  from 2024 on: Parquet format 2.11), DELTA_BINARY_PACKED 1.76x. A data page is one zstd frame, so pages
  of 8 MiB (a 1,000-sample shard's column is one page) are 3% smaller than 1 MiB ones. No statistics for
  the token columns (no reader filters on token ids);
- strings repeated across rows (category, model, run_id, finish_reason, sampling, ...) are dictionary
  encoded; the per-sample hashes (`sample_id`) are PLAIN. Scalars keep their statistics, so readers can
  skip row groups by run_id, category or sample_index;
- soft targets (`top_logprob_ids`, `top_logprobs`, `output_logprobs`; null unless the run asked for them): the
  ids PLAIN int32 as the token ids, the logprobs float32 in BYTE_STREAM_SPLIT pages (Parquet 2.8, 2019; read by
  pyarrow, parquet-java 1.12 / Spark 3.2, DuckDB since late 2023), which zstd compresses 29% better than PLAIN
  floats at k=20 (`bench/bench_logprob_storage.py`, docs/internals/benchmarks.md). float16 would halve them again, but
  Parquet's FLOAT16 (2023) is not read by every reader.
The bytes are a pure function of the table (no timestamps), so a rewrite of the same shard is identical.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

CONTRACT_KEY = "eagle_datagen.contract"
CONTRACT_VERSION = "1"
# v1.1 added `mode`, the soft targets and `heldout`. Readers check only the major version (an added column
# changes nothing they read).
CONTRACT_MINOR_KEY = "eagle_datagen.contract_minor"
CONTRACT_MINOR = "1"
SCHEMA_METADATA = {CONTRACT_KEY: CONTRACT_VERSION, CONTRACT_MINOR_KEY: CONTRACT_MINOR}

TOKEN_IDS = pa.list_(pa.int32())


def _schema(fields: list[pa.Field]) -> pa.Schema:
    return pa.schema(fields, metadata=SCHEMA_METADATA)


_SAMPLE_FIELDS = [
    pa.field("sample_id", pa.string(), nullable=False),
    pa.field("record_id", pa.string()),  # the input record's optional `id`
    pa.field("prompt_id", pa.string(), nullable=False),
    pa.field("category", pa.string(), nullable=False),
    pa.field("sample_index", pa.int32(), nullable=False),
    pa.field("prompt_ids", TOKEN_IDS, nullable=False),
    pa.field("output_ids", TOKEN_IDS, nullable=False),
    pa.field("finish_reason", pa.string(), nullable=False),
    pa.field("completion_tokens", pa.int32(), nullable=False),
    pa.field("prompt_tokens", pa.int32(), nullable=False),
    pa.field("reasoning_tokens", pa.int32()),  # output tokens before think_end; null without think_end
    pa.field("sampling", pa.string(), nullable=False),  # JSON text
    pa.field("model", pa.string(), nullable=False),
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("weight_version", pa.string()),
]
# Columns added to contract v1 after its first release (additive: the last ones of both schemas, so every
# earlier column keeps its position). A shard written before them decodes with them null.
_ADDED_FIELDS = [
    pa.field("cached_tokens", pa.int32()),  # prompt tokens the server had in its prefix cache; null: not reported
    # turns: each (docs/internals/multi-turn.md); null for single-turn samples
    pa.field("conversation_id", pa.string()),  # stable: from the prompt id and the sample index
    pa.field("turn_index", pa.int32()),  # 0-based generation step within the conversation
    pa.field("parent_sample_id", pa.string()),  # the step this one continues; null for the first
    pa.field("step_kind", pa.string()),  # user_turn | tool_result
    pa.field("trajectory_end", pa.string()),  # on the conversation's last step: why it stopped
    pa.field("prompt_drift", pa.string()),  # this prompt vs the parent's prompt_ids + output_ids
    # soft targets (`top_logprobs` k > 0, inference/logprobs.py); null otherwise. Per output token, position by
    # position: the sampled token's logprob; the top k ids and their logprobs, most likely first (flattened: the
    # entries of output position j are j*k .. j*k+k-1). Logprobs after temperature scaling, as SGLang gives them.
    pa.field("output_logprobs", pa.list_(pa.float32())),
    pa.field("top_logprob_ids", TOKEN_IDS),
    pa.field("top_logprobs", pa.list_(pa.float32())),
    # v1.1: thinking | instant (modes.py), the mode the prompt was rendered and the answer generated in; a shard of
    # v1.0 decodes with thinking
    pa.field("mode", pa.string()),
    # held out of every export for evaluation (heldout.py); null: written before the output root had a policy
    pa.field("heldout", pa.bool_()),
]
SAMPLE_SCHEMA = _schema(_SAMPLE_FIELDS + _ADDED_FIELDS)
QUARANTINE_SCHEMA = _schema(
    _SAMPLE_FIELDS
    + [
        pa.field("reject_reason", pa.string(), nullable=False),
        pa.field("reject_detail", pa.string(), nullable=False),
        pa.field("finish_detail", pa.string()),  # JSON text: SGLang's finish_reason object
        pa.field("error", pa.string()),  # why the request failed, for samples that never got an answer
    ]
    + _ADDED_FIELDS
)

ADDED_COLUMNS = frozenset(f.name for f in _ADDED_FIELDS)
# what an added column holds in a shard written before it existed (others: null)
ADDED_DEFAULTS = {"mode": "thinking"}

# columns whose values may be given as a mapping and are stored as JSON text (sorted keys)
JSON_COLUMNS = frozenset({"sampling", "finish_detail"})
TOKEN_COLUMNS = ("prompt_ids", "output_ids")
LOGPROB_ID_COLUMNS = ("top_logprob_ids",)  # stored as the token ids are
LOGPROB_COLUMNS = ("output_logprobs", "top_logprobs")  # float32
LIST_COLUMNS = (*TOKEN_COLUMNS, *LOGPROB_ID_COLUMNS, *LOGPROB_COLUMNS)

# Encoding (see the module docstring and docs/internals/benchmarks.md).
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 9
ROW_GROUP_BYTES = 128 * 2**20  # uncompressed Arrow bytes per row group (a 1,000-sample shard is one group)
DATA_PAGE_BYTES = 8 * 2**20  # a page is one zstd frame: larger pages let zstd find more repeats
TOKEN_ENCODING = "PLAIN"  # of the token columns' values, never dictionary encoded (raw ids compress better)
LOGPROB_ENCODING = "BYTE_STREAM_SPLIT"  # of the float32 logprobs: their bytes split into streams zstd finds repeats in
PLAIN_COLUMNS = frozenset({"sample_id"})  # unique per row: a dictionary would only add indices


def _leaf(name: str) -> str:
    """The Parquet column path of a column's values (`output_ids.list.element` for a list)."""
    return f"{name}.list.element" if name in LIST_COLUMNS else name


def _encoding(name: str) -> str:
    return LOGPROB_ENCODING if name in LOGPROB_COLUMNS else TOKEN_ENCODING


def samples_table(rows: Sequence[Mapping[str, Any]], quarantine: bool = False) -> pa.Table:
    """The rows as a table with `SAMPLE_SCHEMA` (or `QUARANTINE_SCHEMA`), columns in the schema's order.

    A nullable column that a row leaves out is null. A row that lacks a required column (or holds None in
    one), has a column the schema does not know, or a value of the wrong type is a ValueError naming the
    row and column. `sampling` and `finish_detail` may be given as mappings (stored as sorted-key JSON).
    """
    schema = QUARANTINE_SCHEMA if quarantine else SAMPLE_SCHEMA
    known = set(schema.names)
    required = [f.name for f in schema if not f.nullable]
    for index, row in enumerate(rows):
        unknown = sorted(set(row) - known)
        missing = [name for name in required if row.get(name) is None]
        problems = [f"unknown column(s) {unknown}"] if unknown else []
        problems += [f"missing or null required column(s) {missing}"] if missing else []
        if problems:
            raise ValueError(
                f"row {index} (sample_id {row.get('sample_id')!r}) does not fit "
                f"{'QUARANTINE_SCHEMA' if quarantine else 'SAMPLE_SCHEMA'}: {'; '.join(problems)}"
            )
    arrays = []
    for field in schema:
        values = [row.get(field.name) for row in rows]
        if field.name in JSON_COLUMNS:
            values = [json.dumps(v, sort_keys=True) if isinstance(v, Mapping) else v for v in values]
        try:
            arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"column {field.name!r} does not fit {field.type}: {exc}") from exc
    return pa.Table.from_arrays(arrays, schema=schema)


def _contract_schema(schema: pa.Schema) -> pa.Schema:
    for expected in (SAMPLE_SCHEMA, QUARANTINE_SCHEMA):
        if schema.equals(expected, check_metadata=False):
            return expected
    raise ValueError(
        "the table does not have the contract v1 sample or quarantine schema (build it with samples_table); "
        f"columns: {schema.names}"
    )


def rows_per_group(nbytes: int, num_rows: int) -> int:
    """Rows per row group for a table of `num_rows` rows and `nbytes` Arrow bytes: about ROW_GROUP_BYTES each."""
    if num_rows == 0:
        return 1
    per_row = max(1, nbytes // num_rows)
    return max(1, min(num_rows, ROW_GROUP_BYTES // per_row))


def shard_write_options(names: list[str], row_group_size: int) -> dict[str, Any]:
    """The `pyarrow.parquet` writer keyword arguments of a shard with these columns (`write_options`)."""
    return {
        "compression": COMPRESSION,
        "compression_level": COMPRESSION_LEVEL,
        "use_dictionary": [n for n in names if n not in PLAIN_COLUMNS and n not in LIST_COLUMNS],
        "column_encoding": {_leaf(n): _encoding(n) for n in names if n in LIST_COLUMNS},
        "write_statistics": [n for n in names if n not in LIST_COLUMNS],
        "row_group_size": row_group_size,
        "data_page_size": DATA_PAGE_BYTES,
    }


def write_options(table: pa.Table) -> dict[str, Any]:
    """The `pyarrow.parquet.write_table` keyword arguments `encode_shard` uses for this table."""
    return shard_write_options(table.schema.names, rows_per_group(table.nbytes, table.num_rows))


def contract_schema(schema: pa.Schema) -> pa.Schema:
    """The contract v1 schema (sample or quarantine, with its metadata) that `schema` has."""
    return _contract_schema(schema)


def encode_shard(table: pa.Table) -> bytes:
    """The table (with the sample or quarantine schema) as the bytes of one Parquet file (in memory: a shard
    of any size is written row group by row group with storage/staged_shard.py, to the same bytes)."""
    schema = _contract_schema(table.schema)
    table = table.replace_schema_metadata(schema.metadata)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **write_options(table))
    return sink.getvalue().to_pybytes()


def arrow_owned(data: bytes) -> pa.Buffer:
    """`data` copied into memory that Arrow owns. Parquet from Python-owned memory (`bytes` behind a
    `pa.BufferReader`, or an `io.BytesIO`) can abort the process at exit: `pq.read_table` reads through the
    dataset API, whose file fragment (holding the reader, which holds the Python object) may be freed by an
    Arrow thread-pool thread after `read_table` returned; freeing a Python object needs the GIL, a thread
    asking for it while the interpreter finalizes is ended by `pthread_exit`, and unwinding through the
    destructor calls std::terminate ("terminate called without an active exception", SIGABRT; gdb shows
    `arrow::py::PyBuffer::~PyBuffer` -> `PyGILState_Ensure` -> `PyThread_exit_thread`; apache/arrow#33975).
    Memory Arrow owns is freed without the GIL, on any thread, at any time."""
    sink = pa.BufferOutputStream()
    sink.write(data)
    return sink.getvalue()


def read_parquet_bytes(data: bytes, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file held in memory, as a table (read from an Arrow-owned copy: `arrow_owned`)."""
    return pq.read_table(pa.BufferReader(arrow_owned(data)), columns=columns)


def _check_contract(schema: pa.Schema) -> None:
    metadata = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    version = metadata.get(CONTRACT_KEY)
    if version != CONTRACT_VERSION:
        raise ValueError(
            f"not a data contract v{CONTRACT_VERSION} shard: schema metadata {CONTRACT_KEY!r} is {version!r}"
        )


def _as_contract(table: pa.Table) -> pa.Table:
    table = _with_added_columns(table)
    # Parquet names list values "element"; the cast gives back Arrow's "item" of the schema (no copy)
    return table.cast(_contract_schema(table.schema))


def decode_shard(data: bytes) -> pa.Table:
    """A shard's table, with exactly the schema it was written with (sample or quarantine).

    A Parquet file without the contract v1 metadata or with other columns is a ValueError.
    """
    table = read_parquet_bytes(data)
    _check_contract(table.schema)
    return _as_contract(table)


def shard_row_groups(path: str | Path) -> Iterator[pa.Table]:
    """A shard file's tables, one per row group, each as `decode_shard` gives the whole (memory: one row group
    decoded, not the shard). The file is read, not memory-mapped, so pages read do not stay resident."""
    parquet = pq.ParquetFile(str(path), memory_map=False)
    _check_contract(parquet.schema_arrow)
    for group in range(parquet.metadata.num_row_groups):
        yield _as_contract(parquet.read_row_group(group))


def added_column(name: str, rows: int) -> pa.Array:
    """An added column of a shard written before it existed: its ADDED_DEFAULTS value, else nulls."""
    field = SAMPLE_SCHEMA.field(name)
    if name in ADDED_DEFAULTS:
        return pa.array([ADDED_DEFAULTS[name]] * rows, field.type)
    return pa.nulls(rows, field.type)


def _with_added_columns(table: pa.Table) -> pa.Table:
    """A shard written before some of ADDED_COLUMNS existed, with them filled in (`added_column`)."""
    names = set(table.column_names)
    for schema in (SAMPLE_SCHEMA, QUARANTINE_SCHEMA):
        missing = [f for f in schema if f.name not in names]
        if not missing or not {f.name for f in missing} <= ADDED_COLUMNS or names - set(schema.names):
            continue
        columns = [
            table.column(f.name).cast(f.type) if f.name in names else added_column(f.name, table.num_rows)
            for f in schema
        ]
        return pa.Table.from_arrays(columns, schema=schema)
    return table
