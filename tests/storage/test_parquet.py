"""The Parquet encoding of contract v1 shards: schema, round trips, nulls, compression, plain readers."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.outputs import OutputModel
from eagle_datagen.storage import parquet
from eagle_datagen.storage.parquet import (
    QUARANTINE_SCHEMA,
    SAMPLE_SCHEMA,
    decode_shard,
    encode_shard,
    samples_table,
)

SAMPLE_COLUMNS = [
    ("sample_id", pa.string(), False),
    ("record_id", pa.string(), True),
    ("prompt_id", pa.string(), False),
    ("category", pa.string(), False),
    ("sample_index", pa.int32(), False),
    ("prompt_ids", pa.list_(pa.int32()), False),
    ("output_ids", pa.list_(pa.int32()), False),
    ("finish_reason", pa.string(), False),
    ("completion_tokens", pa.int32(), False),
    ("prompt_tokens", pa.int32(), False),
    ("reasoning_tokens", pa.int32(), True),
    ("sampling", pa.string(), False),
    ("model", pa.string(), False),
    ("run_id", pa.string(), False),
    ("weight_version", pa.string(), True),
]
QUARANTINE_EXTRA = [
    ("reject_reason", pa.string(), False),
    ("reject_detail", pa.string(), False),
    ("finish_detail", pa.string(), True),
    ("error", pa.string(), True),
]
# added to v1 later: last in both schemas
ADDED = [
    ("cached_tokens", pa.int32(), True),
    # turns: each
    ("conversation_id", pa.string(), True),
    ("turn_index", pa.int32(), True),
    ("parent_sample_id", pa.string(), True),
    ("step_kind", pa.string(), True),
    ("trajectory_end", pa.string(), True),
    ("prompt_drift", pa.string(), True),
    # soft targets (top_logprobs k > 0)
    ("output_logprobs", pa.list_(pa.float32()), True),
    ("top_logprob_ids", pa.list_(pa.int32()), True),
    ("top_logprobs", pa.list_(pa.float32()), True),
    # contract v1.1: thinking | instant
    ("mode", pa.string(), True),
    ("heldout", pa.bool_(), True),
]
CONVERSATION_COLUMNS = [name for name, _, _ in ADDED[1:7]]
LOGPROB_COLUMNS = [name for name, _, _ in ADDED[7:10]]
SAMPLING = json.dumps({"max_new_tokens": 2048, "temperature": 1.0}, sort_keys=True)


def row(i: int, **changes) -> dict:
    prompt = [163587, 100 + i, 2**31 - 1, 0, 163606]
    output = [5, i, 163607, 7, 163586]
    base = {
        "sample_id": f"{i:032x}",
        "record_id": f"rec-{i}",
        "prompt_id": f"{i * 7:064x}",
        "category": "math" if i % 2 else "code",
        "sample_index": i % 3,
        "prompt_ids": prompt,
        "output_ids": output,
        "finish_reason": "stop",
        "completion_tokens": len(output),
        "prompt_tokens": len(prompt),
        "reasoning_tokens": 2,
        "sampling": SAMPLING,
        "model": "moonshotai/Kimi-K2.5",
        "run_id": "run-1",
        "weight_version": "default",
        "cached_tokens": 3,
    } | dict.fromkeys(CONVERSATION_COLUMNS + LOGPROB_COLUMNS) | {"mode": "thinking", "heldout": None}
    return base | changes


def rows_with_nulls() -> list[dict]:
    return [
        row(0),
        row(1, record_id=None, reasoning_tokens=None, weight_version=None, cached_tokens=None),
        row(2, output_ids=[], completion_tokens=0, reasoning_tokens=None),
        row(3, finish_reason="length"),
    ]


def fields(schema: pa.Schema) -> list[tuple[str, pa.DataType, bool]]:
    return [(f.name, f.type, f.nullable) for f in schema]


def test_schemas_fix_columns_order_types_and_contract_metadata():
    assert fields(SAMPLE_SCHEMA) == SAMPLE_COLUMNS + ADDED
    assert fields(QUARANTINE_SCHEMA) == SAMPLE_COLUMNS + QUARANTINE_EXTRA + ADDED
    for schema in (SAMPLE_SCHEMA, QUARANTINE_SCHEMA):
        assert schema.metadata == {b"eagle_datagen.contract": b"1", b"eagle_datagen.contract_minor": b"1"}


def test_round_trip_preserves_every_value_type_and_null():
    rows = rows_with_nulls()
    table = samples_table(rows)
    decoded = decode_shard(encode_shard(table))
    assert decoded.schema.equals(SAMPLE_SCHEMA, check_metadata=True)
    assert decoded.equals(table)
    assert decoded.to_pylist() == rows
    assert decoded.column("prompt_ids").type == pa.list_(pa.int32())
    assert decoded.column("output_ids").to_pylist()[2] == []
    assert decoded.column("record_id").null_count == 1
    assert decoded.column("reasoning_tokens").to_pylist() == [2, None, None, 2]
    assert decoded.column("prompt_ids").to_pylist()[0][2] == 2**31 - 1


def test_missing_optional_columns_are_null():
    optional = ("record_id", "reasoning_tokens", "weight_version", "cached_tokens")
    minimal = {k: v for k, v in row(0).items() if k not in optional}
    decoded = decode_shard(encode_shard(samples_table([minimal])))
    assert decoded.to_pylist() == [minimal | dict.fromkeys(optional)]


@pytest.mark.parametrize("quarantine", [False, True])
def test_a_shard_written_before_cached_tokens_existed_still_decodes(quarantine):
    """Contract v1 grew additively: an older shard (no cached_tokens) decodes, the column null."""
    extra = {"reject_reason": "no_eos", "reject_detail": "x"} if quarantine else {}
    table = samples_table([row(0) | extra, row(1) | extra], quarantine=quarantine).drop_columns(["cached_tokens"])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)  # as the code of that time wrote it: same metadata, one column fewer
    decoded = decode_shard(sink.getvalue().to_pybytes())
    assert decoded.schema.equals(QUARANTINE_SCHEMA if quarantine else SAMPLE_SCHEMA, check_metadata=True)
    assert decoded.column("cached_tokens").to_pylist() == [None, None]
    assert decoded.column("sample_id").to_pylist() == [row(0)["sample_id"], row(1)["sample_id"]]


@pytest.mark.parametrize("quarantine", [False, True])
def test_a_shard_of_contract_1_0_decodes_as_thinking(quarantine):
    """v1.1 added `mode`: a shard written before it (no column, no minor version) decodes with mode thinking,
    the only mode there was."""
    extra = {"reject_reason": "no_eos", "reject_detail": "x"} if quarantine else {}
    table = samples_table([row(0) | extra, row(1) | extra], quarantine=quarantine).drop_columns(["mode"])
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata({"eagle_datagen.contract": "1"}), sink)
    decoded = decode_shard(sink.getvalue().to_pybytes())
    assert decoded.schema.equals(QUARANTINE_SCHEMA if quarantine else SAMPLE_SCHEMA, check_metadata=True)
    assert decoded.column("mode").to_pylist() == ["thinking", "thinking"]


def test_a_reader_of_contract_1_0_reads_a_1_1_shard_unchanged():
    """What a v1.0 reader checks (the major version) and reads (its columns by name) is what it was."""
    rows = [row(0, mode="instant", prompt_ids=[163587, 5, 163606, 163607], reasoning_tokens=None), row(1)]
    data = encode_shard(samples_table(rows))
    parquet_file = pq.ParquetFile(pa.BufferReader(data))
    assert parquet_file.schema_arrow.metadata[b"eagle_datagen.contract"] == b"1"
    v1_0 = [name for name, _, _ in SAMPLE_COLUMNS + ADDED[:-1]]
    old = parquet_file.read(columns=v1_0)
    assert old.to_pylist() == [{k: r[k] for k in v1_0} for r in rows]


def test_quarantine_round_trip():
    rows = [
        row(0)
        | {"reject_reason": "missing_think_end", "reject_detail": "no 163607", "finish_detail": '{"type": "stop"}'},
        row(1, output_ids=[], completion_tokens=0, finish_reason="error")
        | {"reject_reason": "request_error", "reject_detail": "HTTP 400", "error": "HTTP 400: too long"},
    ]
    table = samples_table(rows, quarantine=True)
    assert table.schema.equals(QUARANTINE_SCHEMA, check_metadata=True)
    decoded = decode_shard(encode_shard(table))
    assert decoded.schema.equals(QUARANTINE_SCHEMA, check_metadata=True)
    assert decoded.to_pylist() == [rows[0] | {"error": None}, rows[1] | {"finish_detail": None}]


def test_quarantine_columns_are_refused_in_data_rows_and_required_there():
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['reject_reason'\]"):
        samples_table([row(0) | {"reject_reason": "x"}])
    with pytest.raises(ValueError, match=r"QUARANTINE_SCHEMA.*\['reject_reason', 'reject_detail'\]"):
        samples_table([row(0)], quarantine=True)


@pytest.mark.parametrize("column", ["sample_id", "prompt_ids", "output_ids", "completion_tokens", "sampling"])
def test_missing_or_null_required_column_is_an_error_naming_it(column):
    missing = {k: v for k, v in row(0).items() if k != column}
    with pytest.raises(ValueError, match=rf"row 1 .*missing or null required column\(s\) \['{column}'\]"):
        samples_table([row(1), missing])
    with pytest.raises(ValueError, match=column):
        samples_table([row(0, **{column: None})])


def test_wrong_types_and_out_of_range_ids_are_errors_naming_the_column():
    with pytest.raises(ValueError, match="'output_ids'"):
        samples_table([row(0, output_ids=[1, 2**31])])
    with pytest.raises(ValueError, match="'prompt_ids'"):
        samples_table([row(0, prompt_ids="1 2 3")])
    with pytest.raises(ValueError, match="'category'"):
        samples_table([row(0, category=3)])


def test_json_columns_accept_mappings():
    table = samples_table([row(0, sampling={"top_p": 0.95, "temperature": 1.0})])
    assert table.column("sampling").to_pylist() == ['{"temperature": 1.0, "top_p": 0.95}']


def test_numpy_ids_are_accepted():
    table = samples_table([row(0, output_ids=np.array([1, 2, 163586], dtype=np.int64))])
    assert table.column("output_ids").to_pylist() == [[1, 2, 163586]]


def test_plain_pyarrow_reader_reads_shards_and_sees_the_contract():
    data = encode_shard(samples_table(rows_with_nulls()))
    plain = pq.read_table(pa.BufferReader(data))
    assert plain.column_names == SAMPLE_SCHEMA.names
    assert plain.column("output_ids").to_pylist() == [r["output_ids"] for r in rows_with_nulls()]
    assert plain.schema.field("output_ids").type == pa.list_(pa.int32())
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    assert meta.metadata[b"eagle_datagen.contract"] == b"1"


def test_plain_reader_from_a_file(tmp_path):
    path = tmp_path / "part-00000.parquet"
    path.write_bytes(encode_shard(samples_table(rows_with_nulls())))
    assert pq.read_table(path).to_pylist() == rows_with_nulls()


def test_encoding_is_deterministic():
    table = samples_table(rows_with_nulls())
    assert encode_shard(table) == encode_shard(samples_table(rows_with_nulls()))


def test_empty_shard_round_trips():
    decoded = decode_shard(encode_shard(samples_table([])))
    assert decoded.num_rows == 0 and decoded.schema.equals(SAMPLE_SCHEMA, check_metadata=True)


def test_large_tables_are_split_into_row_groups(monkeypatch):
    monkeypatch.setattr(parquet, "ROW_GROUP_BYTES", 250)
    rows = [row(i) for i in range(10)]
    data = encode_shard(samples_table(rows))
    assert pq.ParquetFile(pa.BufferReader(data)).metadata.num_row_groups > 1
    assert decode_shard(data).to_pylist() == rows


def test_encode_refuses_tables_without_the_contract_schema():
    table = samples_table([row(0)])
    with pytest.raises(ValueError, match="contract v1"):
        encode_shard(table.drop_columns(["run_id"]))
    with pytest.raises(ValueError, match="contract v1"):
        encode_shard(table.cast(table.schema.set(4, pa.field("sample_index", pa.int64(), nullable=False))))
    # the schema metadata is added when the columns match
    bare = table.replace_schema_metadata(None)
    assert decode_shard(encode_shard(bare)).schema.equals(SAMPLE_SCHEMA, check_metadata=True)


def test_decode_refuses_parquet_without_the_contract_metadata():
    sink = pa.BufferOutputStream()
    pq.write_table(samples_table([row(0)]).replace_schema_metadata(None), sink)
    with pytest.raises(ValueError, match="not a data contract v1 shard"):
        decode_shard(sink.getvalue().to_pybytes())


def zipf_rows(n: int) -> list[dict]:
    model = OutputModel(SimConfig())
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        prompt = [163587, *model.ordinary_tokens(rng, int(rng.integers(100, 400))).tolist(), 163606]
        output = model.generate(prompt, sampling_seed=i, max_new_tokens=2048).output_ids
        rows.append(row(i, prompt_ids=prompt, output_ids=output, completion_tokens=len(output)))
    return rows


def column_chunks(data: bytes) -> dict[str, pq.ColumnChunkMetaData]:
    """The first row group's column chunks by Parquet path, from the file's footer."""
    group = pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0)
    return {group.column(c).path_in_schema: group.column(c) for c in range(group.num_columns)}


def test_column_encodings_are_the_chosen_ones():
    chunks = column_chunks(encode_shard(samples_table(zipf_rows(50))))
    for leaf in ("prompt_ids.list.element", "output_ids.list.element"):
        # token ids: PLAIN values (RLE only for the list's repetition and definition levels), no dictionary
        assert set(chunks[leaf].encodings) == {"PLAIN", "RLE"}, leaf
        assert not chunks[leaf].has_dictionary_page
        assert not chunks[leaf].is_stats_set  # no statistics on token ids
    # strings repeated across rows: dictionary pages; per-sample hashes: PLAIN only
    for name in ("category", "model", "run_id", "finish_reason", "sampling"):
        assert "RLE_DICTIONARY" in chunks[name].encodings and chunks[name].has_dictionary_page, name
    assert set(chunks["sample_id"].encodings) <= {"PLAIN", "RLE"} and not chunks["sample_id"].has_dictionary_page
    assert {chunk.compression for chunk in chunks.values()} == {"ZSTD"}
    assert chunks["run_id"].is_stats_set  # scalars keep statistics for row-group skipping


def test_soft_target_columns_round_trip_with_their_encodings():
    """top_logprob_ids as PLAIN int32 (as token ids), the logprobs as float32 in BYTE_STREAM_SPLIT pages; -inf kept."""
    k = 3
    rows = [
        row(i, output_logprobs=[-0.5] * 5, top_logprob_ids=list(range(i, i + 5 * k)),
            top_logprobs=[-0.5, -1.25, float("-inf")] * 5)
        for i in range(4)
    ] + [row(9)]  # a row without them: null  # fmt: skip
    data = encode_shard(samples_table(rows))
    decoded = decode_shard(data).to_pylist()
    assert decoded[0]["top_logprobs"][:3] == [-0.5, -1.25, float("-inf")] and decoded[4]["top_logprobs"] is None
    assert decoded[1]["top_logprob_ids"] == list(range(1, 16))
    chunks = column_chunks(data)
    for leaf in ("top_logprobs.list.element", "output_logprobs.list.element"):
        assert "BYTE_STREAM_SPLIT" in chunks[leaf].encodings and not chunks[leaf].has_dictionary_page, leaf
        assert not chunks[leaf].is_stats_set
    assert set(chunks["top_logprob_ids.list.element"].encodings) == {"PLAIN", "RLE"}


def test_shards_are_compressed():
    rows = zipf_rows(300)
    data = encode_shard(samples_table(rows))
    outputs = column_chunks(data)["output_ids.list.element"]
    output_tokens = sum(len(r["output_ids"]) for r in rows)
    all_tokens = output_tokens + sum(len(r["prompt_ids"]) for r in rows)
    # raw int32 is 4 bytes per token; the order-0 limit of the stand-in's Zipf ids is about 1.25
    assert outputs.total_compressed_size / output_tokens < 2.5
    assert len(data) / all_tokens < 2.5
    assert decode_shard(data).to_pylist() == rows


def test_a_shard_written_before_the_conversation_columns_still_decodes():
    """The multi-turn columns are additive: an earlier v1 shard reads back with them null."""
    table = samples_table(rows_with_nulls())
    older = table.drop_columns(CONVERSATION_COLUMNS + LOGPROB_COLUMNS).replace_schema_metadata(SAMPLE_SCHEMA.metadata)
    sink = pa.BufferOutputStream()
    pq.write_table(older, sink)
    decoded = decode_shard(sink.getvalue().to_pybytes())
    assert decoded.schema.equals(SAMPLE_SCHEMA, check_metadata=True)
    assert decoded.to_pylist() == rows_with_nulls()
