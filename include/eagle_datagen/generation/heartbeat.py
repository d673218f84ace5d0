"""A generating run's heartbeat: `claims/run=<id>.heartbeat` rewritten at a fixed interval for as long as the
run generates, so that incremental runs judge it alive by that (claims.py), not by how often it checkpoints
(a shard of 32k-token answers can go many minutes without a checkpoint). It stops when generation ends; a
published run's claims no longer count, and a withdrawn one deletes it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from eagle_datagen.generation.claims import write_heartbeat
from eagle_datagen.storage.output_root import OutputRoot

log = logging.getLogger(__name__)


async def _beat(root: OutputRoot, run_id: str, interval_s: float, stop: asyncio.Event) -> None:
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
            return
        try:
            await asyncio.to_thread(write_heartbeat, root, run_id)
        except Exception as exc:  # a missed beat is not the run's failure; the next one may land
            log.warning("run %s: heartbeat not written (%s); trying again in %.0f s", run_id, exc, interval_s)


@contextlib.asynccontextmanager
async def heartbeat(root: OutputRoot, run_id: str, interval_s: float) -> AsyncIterator[None]:
    """Beat once at once, then every `interval_s` until the block ends. The end is a signal, not a cancel: a
    cancelled `to_thread` still writes in its thread, so a beat in flight would land after the block ended
    (after a withdrawal deleted the claims, say); waiting for it keeps "no beat after the end" true."""
    await asyncio.to_thread(write_heartbeat, root, run_id)
    stop = asyncio.Event()
    task = asyncio.create_task(_beat(root, run_id, interval_s, stop), name=f"heartbeat {run_id}")
    try:
        yield
    finally:
        stop.set()
        await task
