"""Write tokenized prompts and rejects under an output root.

`tokenized/category=<c>/part-NNNNN.parquet` holds `record_id`, `prompt_id`, `category`,
`prompt_ids` (list<int32>) and `mode` (the mode they were rendered in: modes.py); rejects are JSON lines,
one per rejected record, with their reason.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from eagle_datagen.records import Reject
from eagle_datagen.storage.output_root import OutputRoot
from eagle_datagen.tokenization.tokenize import TokenizedPrompt
from eagle_datagen.tokenization.tokenized_spool import TokenizedSpool

TOKENIZED_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("prompt_id", pa.string()),
        ("category", pa.string()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("mode", pa.string()),
    ]
)
PART_ROWS = 50_000


def tokenized_table(prompts: Sequence[TokenizedPrompt]) -> pa.Table:
    return pa.table(
        {
            "record_id": [p.record.record_id for p in prompts],
            "prompt_id": [p.record.prompt_id for p in prompts],
            "category": [p.record.category for p in prompts],
            "prompt_ids": [p.prompt_ids for p in prompts],
            "mode": [p.record.mode for p in prompts],
        },
        schema=TOKENIZED_SCHEMA,
    )


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def write_tokenized(root: OutputRoot, prompts: Sequence[TokenizedPrompt], part_rows: int = PART_ROWS) -> list[str]:
    """One folder per category, parts of at most `part_rows` rows; returns the keys written."""
    by_category: dict[str, list[TokenizedPrompt]] = {}
    for prompt in prompts:
        by_category.setdefault(prompt.record.category, []).append(prompt)
    keys = []
    for category in sorted(by_category):
        rows = by_category[category]
        for part, start in enumerate(range(0, len(rows), part_rows)):
            key = f"tokenized/category={category}/part-{part:05d}.parquet"
            root.write_bytes(key, parquet_bytes(tokenized_table(rows[start : start + part_rows])))
            keys.append(key)
    return keys


PART_TOKENS = 16_000_000  # a part closes at PART_ROWS rows or this many prompt ids (64 MB of int32), first met


def write_tokenized_parts(
    root: OutputRoot, spool: TokenizedSpool, part_rows: int = PART_ROWS, part_tokens: int = PART_TOKENS
) -> list[str]:
    """`write_tokenized` from a `TokenizedSpool`, a spool batch at a time: memory holds one part, never a
    category."""
    keys = []
    for category in spool.categories:
        for number, part in enumerate(_parts(spool, category, part_rows, part_tokens)):
            key = f"tokenized/category={category}/part-{number:05d}.parquet"
            root.write_bytes(key, parquet_bytes(pa.concat_tables(part)))
            keys.append(key)
    return keys


def _parts(spool: TokenizedSpool, category: str, part_rows: int, part_tokens: int) -> Iterator[list[pa.Table]]:
    part: list[pa.Table] = []
    rows = tokens = 0
    for batch in spool.batches(category):
        table = pa.table(
            {
                "record_id": batch.column("record_id"),
                "prompt_id": batch.column("prompt_id"),
                "category": pa.array([category] * batch.num_rows, pa.string()),
                "prompt_ids": batch.column("prompt_ids"),
                "mode": batch.column("mode"),
            },
            schema=TOKENIZED_SCHEMA,
        )
        lengths = np.diff(batch.column("prompt_ids").offsets.to_numpy())
        start = 0
        while start < table.num_rows:
            fits = int((np.cumsum(lengths[start:]) + tokens <= part_tokens).sum())
            take = max(1, min(part_rows - rows, fits))  # as many rows as fit in this part, at least one
            part.append(table.slice(start, take))
            rows += take
            tokens += int(lengths[start : start + take].sum())
            start += take
            if rows >= part_rows or tokens >= part_tokens:
                yield part
                part, rows, tokens = [], 0, 0
    if part:
        yield part


def write_rejects(root: OutputRoot, key: str, rejects: Iterable[Reject]) -> str | None:
    lines = [json.dumps(r.to_json(), ensure_ascii=False) for r in rejects]
    if not lines:
        return None
    root.write_bytes(key, ("\n".join(lines) + "\n").encode("utf-8"))
    return key
