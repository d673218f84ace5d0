"""Keep the servers busy: a fixed number of samples in flight, drawn from one shared queue.

All shards of a run feed the same workers, so the end of one shard (the drain, when its last requests
run alone) overlaps with the next shard's work instead of leaving server slots idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from eagle_datagen.errors import DataGenError
from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.progress import Progress


async def run_samples(
    client: GenerateClient,
    requests: Iterable[SampleRequest],
    concurrency: int,
    on_result: Callable[[SampleResult], Awaitable[None]],
    progress: Progress | None = None,
) -> None:
    """Generate every request with at most `concurrency` in flight; `on_result` sees each result once."""

    def job(request: SampleRequest) -> Callable[[], Awaitable[None]]:
        async def generate() -> None:
            result = await client.generate(request)
            await on_result(result)
            if progress is not None:
                progress.advance()

        return generate

    await run_jobs((job(r) for r in requests), concurrency)


async def run_jobs(
    jobs: Iterable[Callable[[], Awaitable[Any]]], concurrency: int, on_drained: Callable[[], None] | None = None
) -> None:
    """Run every job with at most `concurrency` at once. A job is one sample, or a whole conversation whose
    steps run in order (one request in flight per job, so `concurrency` is still the requests in flight).
    `on_drained` is called once, when the first worker finds no job left (the run is draining)."""
    pending = iter(jobs)
    drained = False

    async def worker() -> None:
        nonlocal drained
        for job in pending:  # a shared iterator: next() never awaits, so workers cannot race on it
            await job()
        if not drained and on_drained is not None:
            drained = True
            on_drained()

    try:
        async with asyncio.TaskGroup() as group:  # one failing worker (a checkpoint write) cancels the rest
            for _ in range(concurrency):
                group.create_task(worker())
    except ExceptionGroup as failed:  # an expected failure (a store that stayed down) stays one line
        expected = [e for e in failed.exceptions if isinstance(e, DataGenError)]
        if not expected:
            raise
        raise expected[0] from None


def generation_details(client: GenerateClient, started_tokens: int = 0) -> Callable[[float], str]:
    """Extra progress text: output tokens/s, retries and failed attempts by kind."""

    def details(elapsed: float) -> str:
        stats = client.stats
        tokens_per_s = (stats.output_tokens - started_tokens) / max(elapsed, 1e-9)
        return f"{tokens_per_s:,.0f} output tok/s, {stats.retries} retries, failures: {stats.describe_failures()}"

    return details
