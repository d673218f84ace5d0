"""The tokenized spool: each batch of tokenized prompts written at once to a per-category Arrow file on local disk
(ids as int32), and forgotten; read back in batches (the plan order, the tokenize stage's parts) or by row (a
plan's shards). What stays in memory is a few numbers per prompt (its length) and one batch per category.

The files live in a temporary folder (in TMPDIR) removed by `close`: at about 4 bytes per prompt token (1.3 KB
per prompt of 1,300 tokens: 1.3 GB of disk for a million prompts).
"""

from __future__ import annotations

import json
import tempfile
from array import array
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from eagle_datagen.heldout import record_key
from eagle_datagen.tokenization.tokenize import TokenizedPrompt

SPOOL_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("prompt_id", pa.string()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("conversation", pa.string()),  # {"messages", "tools"} for categories that keep it (turns: each)
        ("mode", pa.string()),  # the mode the prompt was rendered in (modes.py)
        ("heldout_key", pa.string()),  # the prompt id of its first prompt (heldout.py)
    ]
)
FLUSH_ROWS = 1024


@dataclass
class _Category:
    path: Path
    writer: Any = None
    batch_starts: list[int] = field(default_factory=lambda: [0])
    lengths: array = field(default_factory=lambda: array("i"))
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_rows: int = 0

    @property
    def rows(self) -> int:
        return len(self.lengths)


class TokenizedSpool:
    def __init__(self, conversations: Collection[str] = ()) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="eagle-datagen-tokenized-")
        self._conversations = set(conversations)
        self._categories: dict[str, _Category] = {}
        self._readers: dict[str, ipc.RecordBatchFileReader] = {}
        self._cache: dict[tuple[str, int], pa.RecordBatch] = {}

    def __enter__(self) -> TokenizedSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def categories(self) -> list[str]:
        return sorted(c for c, spool in self._categories.items() if spool.rows)

    def rows(self, category: str) -> int:
        spool = self._categories.get(category)
        return spool.rows if spool else 0

    def lengths(self, category: str) -> np.ndarray:
        return np.frombuffer(self._categories[category].lengths, dtype=np.int32)

    @property
    def total(self) -> int:
        return sum(s.rows for s in self._categories.values())

    def add(self, prompts: list[TokenizedPrompt]) -> None:
        by_category: dict[str, list[TokenizedPrompt]] = {}
        for prompt in prompts:
            by_category.setdefault(prompt.record.category, []).append(prompt)
        for category, rows in by_category.items():
            spool = self._categories.get(category)
            if spool is None:
                spool = self._categories[category] = _Category(
                    Path(self._folder.name) / f"{len(self._categories)}.arrow"
                )
            keep = category in self._conversations
            batch = pa.record_batch(
                [
                    pa.array([p.record.record_id for p in rows], pa.string()),
                    pa.array([p.record.prompt_id for p in rows], pa.string()),
                    pa.array([p.prompt_ids for p in rows], pa.list_(pa.int32())),
                    pa.array(
                        [
                            json.dumps({"messages": p.record.messages, "tools": p.record.tools}, ensure_ascii=False)
                            if keep
                            else None
                            for p in rows
                        ],
                        pa.string(),
                    ),
                    pa.array([p.record.mode for p in rows], pa.string()),
                    pa.array([record_key(p.record) for p in rows], pa.string()),
                ],
                schema=SPOOL_SCHEMA,
            )
            spool.lengths.extend(len(p.prompt_ids) for p in rows)
            spool.pending.append(batch)
            spool.pending_rows += len(rows)
            if spool.pending_rows >= FLUSH_ROWS:
                self._flush(spool)

    def _flush(self, spool: _Category) -> None:
        if not spool.pending_rows:
            return
        if spool.writer is None:
            spool.writer = ipc.new_file(str(spool.path), SPOOL_SCHEMA)
        spool.writer.write_batch(pa.Table.from_batches(spool.pending).combine_chunks().to_batches()[0])
        spool.batch_starts.append(spool.batch_starts[-1] + spool.pending_rows)
        spool.pending, spool.pending_rows = [], 0

    def finish(self) -> None:
        """Write what is left: call once every batch is added, before reading."""
        for spool in self._categories.values():
            self._flush(spool)
            if spool.writer is not None:
                spool.writer.close()
                spool.writer = None

    def _reader(self, category: str) -> ipc.RecordBatchFileReader:
        if category not in self._readers:
            self._readers[category] = ipc.open_file(pa.OSFile(str(self._categories[category].path)))
        return self._readers[category]

    def _batch(self, category: str, index: int) -> pa.RecordBatch:
        key = (category, index)
        if key not in self._cache:
            if len(self._cache) >= 4:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = self._reader(category).get_batch(index)
        return self._cache[key]

    def batches(self, category: str) -> Iterator[pa.RecordBatch]:
        """The category's rows in order, a batch (FLUSH_ROWS rows or so) at a time."""
        reader = self._reader(category)
        for index in range(reader.num_record_batches):
            yield reader.get_batch(index)

    def id_batches(self, category: str) -> Iterator[pa.ListArray]:
        for batch in self.batches(category):
            yield batch.column("prompt_ids")

    def take(self, category: str, rows: np.ndarray) -> pa.Table:
        """The category's rows numbered `rows`, in that order (read batch by batch)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = np.asarray(self._categories[category].batch_starts, dtype=np.int64)
        which = np.searchsorted(starts, rows, side="right") - 1
        by_batch = np.argsort(which, kind="stable")
        parts = []
        for index in np.unique(which).tolist():
            local = rows[which == index] - starts[index]
            parts.append(self._batch(category, index).take(pa.array(local)))
        table = pa.Table.from_batches(parts, schema=SPOOL_SCHEMA)
        inverse = np.empty_like(by_batch)
        inverse[by_batch] = np.arange(len(by_batch))
        return table.take(pa.array(inverse))

    def close(self) -> None:
        for spool in self._categories.values():
            if spool.writer is not None:
                spool.writer.close()
        self._readers.clear()
        self._cache.clear()
        self._folder.cleanup()
