"""Durable checkpoints of finished samples, under the run's output root.

Finished samples are buffered and written as small immutable chunk files
(`checkpoints/run=<id>/shard=<NNNNN>/chunk-<time>-<nonce>.jsonl`), never appended to, so the same code
works on a local folder and on S3, and a retry on another worker sees everything already done. A crash
loses at most the samples in flight plus the unflushed buffer (bounded by `max_samples` and `max_age_s`).
Reading tolerates a half-written chunk and keeps the first copy of a sample, so nothing is counted twice.

Each chunk is followed by its index (`chunk-<time>-<nonce>.ids.json`: the chunk's sample ids and outcomes), so
that a resume learns what is done without reading the answers: `load_checkpoint_index` reads the indexes, and
only a chunk without one (cut off by a crash between the two writes, or written before indexes existed) in full.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from eagle_datagen import settings
from eagle_datagen.inference.samples import SampleResult
from eagle_datagen.storage.output_root import OutputRoot

log = logging.getLogger(__name__)


def checkpoint_prefix(run_id: str, shard: int) -> str:
    return f"checkpoints/run={run_id}/shard={shard:05d}/"


def should_checkpoint(result: SampleResult) -> bool:
    """Everything but an exhausted transient failure: a rerun should try that sample again."""
    return not result.retryable


def checkpoint_rows(root: OutputRoot, run_id: str, shard: int) -> Iterator[dict[str, Any]]:
    """One shard's checkpointed rows, the first copy of each sample only, read a chunk at a time (key order)."""
    seen: set[str] = set()
    for key in root.list(checkpoint_prefix(run_id, shard)):
        if not key.endswith(".jsonl"):
            continue
        for line in root.read_bytes(key).splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a chunk cut short by a crash: its complete lines still count
                continue
            if row["sample_id"] not in seen:
                seen.add(row["sample_id"])
                yield row


def load_checkpoints(root: OutputRoot, run_id: str, shard: int) -> dict[str, dict[str, Any]]:
    """sample_id -> checkpointed row, for one shard (all in memory: `checkpoint_rows` streams them)."""
    return {row["sample_id"]: row for row in checkpoint_rows(root, run_id, shard)}


INDEX_SUFFIX = ".ids.json"


def finish_type(row: dict[str, Any]) -> str:
    """A checkpoint row's outcome as the run summary counts it."""
    return "error" if row["error"] else (row["finish_reason"] or {}).get("type", "abort")


INDEX_READERS = 16  # index files read at once: on S3 each is a round trip, and a shard has dozens


def _chunk_outcomes(root: OutputRoot, key: str, indexed: set[str]) -> list[tuple[str, str]]:
    """(sample_id, outcome) of one chunk, in its order: from its index, else (none, or damaged) from the chunk."""
    index_key = key.removesuffix(".jsonl") + INDEX_SUFFIX
    if index_key in indexed:
        try:
            index = json.loads(root.read_bytes(index_key))
            return list(zip(index["sample_ids"], index["outcomes"], strict=True))
        except (ValueError, KeyError):  # a damaged index: the chunk itself says it all
            pass
    outcomes = []
    for line in root.read_bytes(key).splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        outcomes.append((row["sample_id"], finish_type(row)))
    return outcomes


def load_checkpoint_index(root: OutputRoot, run_id: str, shard: int) -> dict[str, str]:
    """sample_id -> its outcome (`finish_type`), for one shard: what `load_checkpoints` gives, without the answers."""
    return load_checkpoint_indexes(root, run_id, [shard])[shard]


def load_checkpoint_indexes(root: OutputRoot, run_id: str, shards: list[int]) -> dict[int, dict[str, str]]:
    """`load_checkpoint_index` of each shard, INDEX_READERS listings and index files at a time (on S3 each is a
    round trip: a resume of 100 shards of 16 chunks is 1,700 of them); each shard's chunks are taken in their
    order, so the first copy of a sample wins."""
    if not shards:
        return {}
    with ThreadPoolExecutor(max_workers=min(INDEX_READERS, 4 * len(shards)), thread_name_prefix="index") as pool:
        listings = list(pool.map(lambda shard: root.list(checkpoint_prefix(run_id, shard)), shards))
        chunks = [
            (shard, key, set(keys))
            for shard, keys in zip(shards, listings, strict=True)
            for key in keys
            if key.endswith(".jsonl")
        ]
        done: dict[int, dict[str, str]] = {shard: {} for shard in shards}
        for (shard, _, _), outcomes in zip(
            chunks, pool.map(lambda chunk: _chunk_outcomes(root, chunk[1], chunk[2]), chunks), strict=True
        ):
            for sample_id, outcome in outcomes:
                done[shard].setdefault(sample_id, outcome)
    return done


def drop_damaged_indexes(root: OutputRoot, run_id: str, shard: int) -> int:
    """Delete each index of the shard that names a sample its chunk does not hold (a chunk damaged after its index
    was written), so that a resume reads that chunk itself and generates the missing samples again; the count."""
    keys = root.list(checkpoint_prefix(run_id, shard))
    dropped = 0
    for key in keys:
        index_key = key.removesuffix(".jsonl") + INDEX_SUFFIX
        if not key.endswith(".jsonl") or index_key not in keys:
            continue
        listed = {sample_id for sample_id, _ in _chunk_outcomes(root, key, {index_key})}
        if listed - {sample_id for sample_id, _ in _chunk_outcomes(root, key, set())}:
            root.delete(index_key)
            log.warning(
                "run %s: %s names samples its chunk lacks: removed, the samples will be generated again",
                run_id,
                index_key,
            )
            dropped += 1
    return dropped


@dataclass
class CheckpointPolicy:
    max_samples: int = settings.CHECKPOINT_EVERY  # flush when this many samples are waiting
    max_age_s: float = settings.CHECKPOINT_INTERVAL_S  # ... or when the oldest has waited this long


class CheckpointWriter:
    """Buffers results per shard and flushes them as chunks, off the event loop, one flush at a time.

    A batch taken from the buffer is written even when the task that flushes it is cancelled (the age ticker
    at exit, a sample's task that filled the buffer): cancelling an `asyncio.to_thread` that has not started yet
    drops it, and with it the batch (seen on 2026-12-07: 24 of 71 results lost, the run unpublishable). Leaving
    the context waits for every write."""

    def __init__(self, root: OutputRoot, run_id: str, policy: CheckpointPolicy | None = None) -> None:
        self.root = root
        self.run_id = run_id
        self.policy = policy or CheckpointPolicy()
        self._pending: dict[int, list[str]] = defaultdict(list)
        self._index: dict[int, list[tuple[str, str]]] = defaultdict(list)
        self._count = 0
        self._oldest: float | None = None
        self._lock = asyncio.Lock()
        self._ticker: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self.written = 0

    async def __aenter__(self) -> CheckpointWriter:
        self._ticker = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            (ticked,) = await asyncio.gather(self._ticker, return_exceptions=True)
            if isinstance(ticked, Exception):  # a flush by age failed: the error is the run's
                raise ticked
        await self.flush()
        writes, self._writes = list(self._writes), set()
        await asyncio.gather(*writes)  # writes whose flusher was cancelled: their errors are raised here

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.policy.max_age_s / 2)
            if self._oldest is not None and time.monotonic() - self._oldest >= self.policy.max_age_s:
                await self.flush()

    async def add(self, result: SampleResult) -> None:
        if not should_checkpoint(result):
            return
        await self.add_row(result.request.shard, result.to_checkpoint())

    async def add_row(self, shard: int, row: dict[str, Any]) -> None:
        """A checkpoint row as it is (a conversation step carries its prompt ids and its place)."""
        self._pending[shard].append(json.dumps(row, separators=(",", ":")))
        self._index[shard].append((row["sample_id"], finish_type(row)))
        self._count += 1
        self._oldest = self._oldest or time.monotonic()
        if self._count >= self.policy.max_samples:
            await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            if not self._count:
                return
            batches, self._pending = self._pending, defaultdict(list)
            indexes, self._index = self._index, defaultdict(list)
            count, self._count, self._oldest = self._count, 0, None
            write = asyncio.create_task(self._write_counted(batches, indexes, count))
            self._writes.add(write)
            try:  # a cancelled caller leaves the write running (the batch is out of the buffer), tracked till exit
                await asyncio.shield(write)
            finally:
                if write.done():
                    self._writes.discard(write)

    async def _write_counted(self, batches: dict[int, list[str]], indexes: dict[int, list[tuple[str, str]]],
                             count: int) -> None:
        await asyncio.to_thread(self._write, batches, indexes)
        self.written += count

    def _write(self, batches: dict[int, list[str]], indexes: dict[int, list[tuple[str, str]]]) -> None:
        stamp = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        for shard, lines in batches.items():
            key = f"{checkpoint_prefix(self.run_id, shard)}chunk-{stamp}"
            self.root.write_bytes(f"{key}.jsonl", ("\n".join(lines) + "\n").encode())
            ids, outcomes = zip(*indexes[shard], strict=True) if indexes[shard] else ((), ())
            index = {"sample_ids": list(ids), "outcomes": list(outcomes)}
            self.root.write_bytes(f"{key}{INDEX_SUFFIX}", json.dumps(index, separators=(",", ":")).encode())
