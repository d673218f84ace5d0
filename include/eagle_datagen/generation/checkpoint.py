"""Durable checkpoints of finished samples, under the run's output root.

Finished samples are buffered and written as small immutable chunk files
(`checkpoints/run=<id>/shard=<NNNNN>/chunk-<time>-<nonce>.jsonl`), never appended to, so the same code
works on a local folder and on S3, and a retry on another worker sees everything already done. A crash
loses at most the samples in flight plus the unflushed buffer (bounded by `max_samples` and `max_age_s`).
Reading tolerates a half-written chunk and keeps the first copy of a sample, so nothing is counted twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from eagle_datagen.inference.samples import SampleResult
from eagle_datagen.storage.output_root import OutputRoot

log = logging.getLogger(__name__)


def checkpoint_prefix(run_id: str, shard: int) -> str:
    return f"checkpoints/run={run_id}/shard={shard:05d}/"


def should_checkpoint(result: SampleResult) -> bool:
    """Everything but an exhausted transient failure: a rerun should try that sample again."""
    return not result.retryable


def load_checkpoints(root: OutputRoot, run_id: str, shard: int) -> dict[str, dict[str, Any]]:
    """sample_id -> checkpointed row, for one shard."""
    done: dict[str, dict[str, Any]] = {}
    for key in root.list(checkpoint_prefix(run_id, shard)):
        if not key.endswith(".jsonl"):
            continue
        for line in root.read_bytes(key).splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a chunk cut short by a crash: its complete lines still count
                continue
            done.setdefault(row["sample_id"], row)
    return done


@dataclass
class CheckpointPolicy:
    max_samples: int = 64  # flush when this many samples are waiting
    max_age_s: float = 2.0  # ... or when the oldest has waited this long


class CheckpointWriter:
    """Buffers results per shard and flushes them as chunks, off the event loop, one flush at a time."""

    def __init__(self, root: OutputRoot, run_id: str, policy: CheckpointPolicy | None = None) -> None:
        self.root = root
        self.run_id = run_id
        self.policy = policy or CheckpointPolicy()
        self._pending: dict[int, list[str]] = defaultdict(list)
        self._count = 0
        self._oldest: float | None = None
        self._lock = asyncio.Lock()
        self._ticker: asyncio.Task[None] | None = None
        self.written = 0

    async def __aenter__(self) -> CheckpointWriter:
        self._ticker = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        await self.flush()

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
        self._count += 1
        self._oldest = self._oldest or time.monotonic()
        if self._count >= self.policy.max_samples:
            await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            if not self._count:
                return
            batches, self._pending = self._pending, defaultdict(list)
            count, self._count, self._oldest = self._count, 0, None
            await asyncio.to_thread(self._write, batches)
            self.written += count

    def _write(self, batches: dict[int, list[str]]) -> None:
        stamp = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        for shard, lines in batches.items():
            key = f"{checkpoint_prefix(self.run_id, shard)}chunk-{stamp}.jsonl"
            self.root.write_bytes(key, ("\n".join(lines) + "\n").encode())
