"""The request loop: every prompt's requests to each deployment, sent exactly as a run sends its samples.

The project's client (inference/client.py) with its window per endpoint, retries with backoff, circuit breaker,
lost-request detection and hedging (liveness.py), the scheduler's worker pool (scheduler.run_jobs) and the progress
line; one client per deployment, both deployments at once, each with its own pool. A request is `/generate` with
the prompt's token ids and its category's sampling for its mode (an instant prompt samples as the profile
recommends for instant answers), plus a `sampling_seed` that depends only on the evaluation's
seed, the prompt and the request's index: the same request goes to deployment B, and to any later evaluation with
the same seed (a baseline pairs with it). Its rid is the evaluation's own (eval id and side), so concurrent
evaluations on one server never share one.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from eagle_datagen.evaluation.options import EvaluateOptions
from eagle_datagen.evaluation.prompts import EvalPrompt
from eagle_datagen.evaluation.records import request_record
from eagle_datagen.evaluation.servers import SpeculativeServer
from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.endpoints import Endpoint, EndpointPool
from eagle_datagen.inference.fleet import endpoint_window
from eagle_datagen.inference.samples import SampleRequest, sampling_seed_for
from eagle_datagen.inference.scheduler import generation_details, run_jobs
from eagle_datagen.progress import Progress


@dataclass(frozen=True)
class Side:
    name: str  # "A" (evaluated) or "B" (compared with)
    label: str
    servers: list[SpeculativeServer]


def request_for(
    prompt: EvalPrompt, index: int, sampling: dict[str, Any], seed: int, eval_id: str, side: str
) -> SampleRequest:
    """The `index`-th request of a prompt: its seed from (seed, prompt, index) only; its rid the evaluation's."""
    seed_of = hashlib.sha256(f"evaluate:{seed}:{prompt.prompt_key}:{index}".encode()).hexdigest()
    rid = hashlib.sha256(f"{eval_id}:{side}:{prompt.prompt_key}:{index}".encode()).hexdigest()[:32]
    params = {k: v for k, v in sampling.items() if v is not None} | {"sampling_seed": sampling_seed_for(seed_of)}
    return SampleRequest(
        rid, prompt.prompt_id, prompt.record_id, prompt.category, index, prompt.prompt_ids, params, mode=prompt.mode
    )


async def send(
    sides: list[Side],
    prompts: list[EvalPrompt],
    sampling: dict[str, dict[str, dict[str, Any]]],
    options: EvaluateOptions,
    eval_id: str,
    vocab_size: int | None,
) -> list[dict[str, Any]]:
    """Every prompt's `options.requests_per_prompt` requests to every side, sampled as its category and mode say
    (`sampling[category][mode]`); one record per request."""
    records: list[dict[str, Any]] = []
    total = len(prompts) * options.requests_per_prompt * len(sides)
    access = options.access()
    async with AsyncExitStack() as stack:
        runs: list[Awaitable[None]] = []
        clients: list[tuple[str, GenerateClient]] = []
        progress = Progress("evaluate", total=total, unit="requests", details=_details(clients))
        for side in sides:
            endpoints = [
                Endpoint(s.url, endpoint_window(s.slots or s.max_running_requests, options.concurrency, s.replicas))
                for s in side.servers
            ]
            pool = EndpointPool(endpoints, options.breaker, access=access[side.name])
            client = GenerateClient(pool, options.retry, vocab_size=vocab_size, liveness=options.liveness)
            await stack.enter_async_context(client)
            clients.append((side.name, client))

            def job(
                side: Side, client: GenerateClient, prompt: EvalPrompt, index: int
            ) -> Callable[[], Awaitable[None]]:
                request = request_for(
                    prompt, index, sampling[prompt.category][prompt.mode], options.seed, eval_id, side.name
                )

                async def run() -> None:
                    started = time.monotonic()
                    result = await client.generate(request)
                    records.append(
                        request_record(eval_id, side.name, side.label, prompt, result, time.monotonic() - started)
                    )
                    progress.advance()

                return run

            jobs = [job(side, client, p, k) for p in prompts for k in range(options.requests_per_prompt)]
            runs.append(run_jobs(jobs, pool.workers, on_drained=client.drained))
        await asyncio.gather(*runs)
        progress.finish()
    return records


def _details(clients: list[tuple[str, GenerateClient]]) -> Callable[[float], str]:
    """The progress line's details: each deployment's output tokens/s, retries and failed attempts."""

    def details(elapsed: float) -> str:
        parts = [f"{name}: {generation_details(client)(elapsed)}" for name, client in clients]
        return "; ".join(parts)

    return details
