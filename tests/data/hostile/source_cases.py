"""Hostile prompt source files: compression bombs, truncated archives, Parquet and CSV with wrong types
(see make_corpus.py)."""

from __future__ import annotations

import gzip
import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from record_cases import line, user

BOMB_BYTES = 300 * 1024 * 1024  # beyond the 256 MiB floor of the decompression limit


def gzip_bytes(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def zstd_bytes(chunks: int, chunk: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as stream:
        for _ in range(chunks):
            stream.write(chunk)
    return sink.getvalue().to_pybytes()


def gzip_bomb() -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9, mtime=0) as stream:
        block = b"\0" * (1 << 20)
        for _ in range(BOMB_BYTES >> 20):
            stream.write(block)
    return buffer.getvalue()


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


GOOD = [user("Name three prime numbers.", id="ok-1"), user("Translate 'cat' to French.", id="ok-2")]
GOOD_JSONL = b"".join(line(r) + b"\n" for r in GOOD)
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])


def one_tool_parquet(field: str, kind: pa.DataType, value: Any) -> bytes:
    """One good user message and one tool whose function has `field` as a `kind` column holding `value`."""
    function = pa.struct([("name", pa.string()), (field, kind)])
    tools = pa.array(
        [[{"type": "function", "function": {"name": "f", field: value}}]],
        pa.list_(pa.struct([("type", pa.string()), ("function", function)])),
    )
    messages = pa.array([[{"role": "user", "content": "fine"}]], pa.list_(MESSAGE))
    return parquet_bytes(pa.table({"category": ["chat"], "messages": messages, "tools": tools}))


def sources() -> list[tuple[str, bytes, dict[str, Any], str]]:
    """(file name, bytes, expectation, why)."""
    ok_gz = gzip_bytes(GOOD_JSONL)
    ok_zst = zstd_bytes(1, GOOD_JSONL)
    return [
        ("ok.jsonl", GOOD_JSONL, {"expect": "records", "outcomes": ["accept", "accept"]}, "two good records"),
        (
            "bomb.jsonl.gz",
            gzip_bomb(),
            {"expect": "error", "message": "a compression bomb?"},
            "300 MiB of zeros in 300 KB of gzip: reading stops at the limit",
        ),
        (
            "bomb.jsonl.zst",
            zstd_bytes(BOMB_BYTES >> 20, b"\0" * (1 << 20)),
            {"expect": "error", "message": "a compression bomb?"},
            "300 MiB of zeros in a few KB of zstd",
        ),
        (
            "truncated.jsonl.gz",
            ok_gz[: len(ok_gz) // 2],
            {"expect": "error", "message": "truncated or corrupt"},
            "a gzip file cut in half",
        ),
        (
            "corrupt.jsonl.gz",
            ok_gz[:12] + bytes(b ^ 0x5A for b in ok_gz[12:40]) + ok_gz[40:],
            {"expect": "error", "message": "truncated or corrupt"},
            "flipped bytes inside the deflate stream",
        ),
        (
            "not_gzip.jsonl.gz",
            GOOD_JSONL,
            {"expect": "error", "message": "truncated or corrupt"},
            "plain text named .gz",
        ),
        (
            "truncated.jsonl.zst",
            ok_zst[: len(ok_zst) // 2],
            {"expect": "error", "message": "truncated or corrupt"},
            "a zstd file cut in half",
        ),
        (
            "bom_crlf.jsonl",
            b"\xef\xbb\xbf" + GOOD_JSONL.replace(b"\n", b"\r\n"),
            {"expect": "records", "outcomes": ["accept", "accept"]},
            "a byte order mark and CRLF line ends",
        ),
        (
            "wrong_types.parquet",
            parquet_bytes(
                pa.table(
                    {"id": pa.array([1, 2, 3]), "category": ["chat", "chat", "chat"], "messages": pa.array([5, 6, 7])}
                )
            ),
            {"expect": "records", "outcomes": ["bad_id", "bad_id", "bad_id"]},
            "integer ids and messages columns",
        ),
        (
            "int_messages.parquet",
            parquet_bytes(pa.table({"category": ["chat", "chat"], "messages": pa.array([5, 6])})),
            {"expect": "records", "outcomes": ["messages_not_list", "messages_not_list"]},
            "an integer messages column",
        ),
        (
            "binary_description.parquet",
            one_tool_parquet("description", pa.binary(), b"\x00\xff"),
            {"expect": "records", "outcomes": ["bad_field_type"]},
            "a binary value inside a tool spec (not JSON)",
        ),
        (
            "timestamp_content.parquet",
            parquet_bytes(
                pa.table(
                    {
                        "category": ["chat"],
                        "messages": pa.array(
                            [[{"role": "user", "content": 0}]],
                            pa.list_(pa.struct([("role", pa.string()), ("content", pa.timestamp("s"))])),
                        ),
                    }
                )
            ),
            {"expect": "records", "outcomes": ["bad_field_type"]},
            "a timestamp as content",
        ),
        (
            "nan_in_schema.parquet",
            one_tool_parquet("maximum", pa.float64(), float("nan")),
            {"expect": "records", "outcomes": ["bad_field_type"]},
            "a NaN float inside a tool spec",
        ),
        (
            "truncated.parquet",
            parquet_bytes(pa.table({"category": ["chat"], "messages": ["[]"]}))[:-20],
            {"expect": "error", "message": "cannot read Parquet"},
            "a Parquet file cut short",
        ),
        (
            "wrong_types.csv",
            b'id,category,messages\nc1,chat,not json\nc2,chat,5\nc3,chat,"[{""role"": ""user"", ""content"": ""'
            + b"z" * 300_000
            + b'""}]"\nc4,chat,"{""a"": 1, ""a"": 2}"\n',
            {
                "expect": "records",
                "outcomes": ["invalid_json", "messages_not_list", "prompt_too_long", "duplicate_key"],
            },
            "text that is not JSON, a number, a 300 KB field (over the csv module's 128 KiB default) and a key twice",
        ),
        (
            "invalid_utf8.csv",
            b"category,messages\nchat,\xff\xfe\n",
            {"expect": "error", "message": "is not UTF-8"},
            "a CSV file that is not UTF-8 (a whole-file error: CSV has no safe resync point)",
        ),
        (
            "no_header.csv",
            b"chat,hello\n",
            {"expect": "error", "message": "needs a header row"},
            "a CSV without the messages column",
        ),
        (
            "passwd.txt",
            b"root:x:0:0:root:/root:/bin/bash\n",
            {"expect": "error", "message": "unsupported prompt"},
            "a file that is not a prompt format",
        ),
    ]
