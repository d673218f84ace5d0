"""The hedged copy of a lost request (inference/client.py, liveness.py) against serve-sim replicas: a lost
request during an outage, with no endpoint left for its hedge, leaves its sample for a rerun instead of
crashing the run; a hedge that fails is not counted as won; the lost copy is aborted on its server."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.endpoints import BreakerPolicy, Endpoint, EndpointPool
from eagle_datagen.inference.liveness import LivenessPolicy
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.inference.scheduler import run_jobs
from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from eagle_datagen_stack.processes import free_port

WATCH = LivenessPolicy(lost_after_s=0.5, poll_s=0.1, grace_s=0.1)
RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.02)


def sample(i: int = 0) -> SampleRequest:
    return SampleRequest.create(
        prompt_id=f"p{i}",
        record_id=None,
        category="chat",
        sample_index=0,
        prompt_ids=[163587, 1000 + i, 163586, 163588, 69702, 163601, 163606],
        model="m",
        sampling={"max_new_tokens": 64},
    )


def generate(urls: list[str], breaker: BreakerPolicy) -> tuple[SampleResult, GenerateClient]:
    async def scenario() -> tuple[SampleResult, GenerateClient]:
        pool = EndpointPool([Endpoint(url, window=1) for url in urls], breaker)
        async with GenerateClient(pool, RETRY, liveness=WATCH) as client:
            return await asyncio.wait_for(client.generate(sample()), 30), client

    return asyncio.run(scenario())


def test_a_request_lost_while_no_endpoint_is_left_for_its_hedge_is_left_for_a_rerun():
    """The other endpoint is down (its breaker open, every endpoint failing for longer than give_up_after): the
    hedge finds no endpoint (NoEndpointAvailable), the lost copy is aborted, and the sample comes back as
    retryable `no_endpoint`, as every other sample of a dead deployment does, instead of an exception."""
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: refused at once
    breaker = BreakerPolicy(failures_to_open=1, open_s=60.0, give_up_after_s=0.2)
    with SimServerThread(SimConfig(faults={"lose": 1.0}).with_profile("instant")) as losing:
        result, client = generate([down, losing.url], breaker)  # the first attempt goes to `down`, the next loses
        assert losing.stats()["aborted"] == 1  # the lost copy was aborted on its server
    assert result.retryable and result.error is not None and result.error.startswith("no_endpoint"), result.error
    assert client.stats.failures["lost"] == 1 and client.stats.failures["connect_error"] == 1
    assert client.stats.failed == 1 and client.stats.completed == 0
    assert client.liveness is not None and dict(client.liveness.hedged) == {}  # no hedge could be sent


def test_a_hedge_that_fails_is_not_counted_as_won_and_the_sample_is_retried():
    """Each attempt is lost on `losing`; its hedge goes to `down` and fails at once (refused): a failed hedge is
    a failure like any other (retried), never a win, and each lost copy is still aborted."""
    down = f"http://127.0.0.1:{free_port()}"
    breaker = BreakerPolicy(failures_to_open=5, open_s=0.05, give_up_after_s=30.0)
    with SimServerThread(SimConfig(faults={"lose": 1.0}).with_profile("instant")) as losing:
        result, client = generate([losing.url, down], breaker)
        aborted = losing.stats()["aborted"]
    assert client.liveness is not None
    assert client.liveness.hedged[down] == RETRY.max_attempts and client.liveness.hedges_won[down] == 0
    assert client.stats.failures["lost"] == client.stats.failures["connect_error"] == RETRY.max_attempts
    assert aborted == RETRY.max_attempts
    assert result.retryable and result.error is not None and result.error.startswith("gave up after 3 attempts")


# --- the drain hedge: the run's last requests on a slow replica get a copy on an idle one


def drain_requests(n: int) -> list[SampleRequest]:
    return [sample(i) for i in range(n)]


SLOW_ANSWER_S = 6.0  # 60 ids at 0.1 s each on the slow replica; the fast one answers at once


def slow_and_fast() -> tuple[SimServerThread, SimServerThread]:
    fixed = {"output_tokens_min": 60, "output_tokens_max": 60}
    fast = SimServerThread(dataclasses.replace(SimConfig().with_profile("instant"), **fixed))
    slow = SimServerThread(dataclasses.replace(SimConfig().with_profile("instant"), decode_s_per_token=0.1, **fixed))
    return slow, fast


def drain(urls: list[str], policy: LivenessPolicy, n: int = 12) -> tuple[list[SampleResult], GenerateClient, float]:
    async def scenario() -> tuple[list[SampleResult], GenerateClient, float]:
        pool = EndpointPool([Endpoint(url, window=2) for url in urls], BreakerPolicy())
        results: list[SampleResult] = []
        async with GenerateClient(pool, RETRY, liveness=policy) as client:
            started = time.monotonic()

            def job(request: SampleRequest):
                async def run() -> None:
                    results.append(await client.generate(request))

                return run

            await asyncio.wait_for(run_jobs([job(r) for r in drain_requests(n)], 4, client.drained), 60)
            return results, client, time.monotonic() - started

    return asyncio.run(scenario())


def test_the_last_requests_on_a_slow_replica_are_hedged_on_the_idle_one_and_each_answer_is_kept_once():
    """Two requests go to the slow replica first (least outstanding, 2 slots each), the fast one answers the
    other ten at once and falls idle: once the run has handed out its last request, the two slow ones (in flight
    past drain_hedge_min_s) get a copy on the fast replica, whose answers win; the slow copies are aborted, and
    the slow replica is not blamed (it still works). Side by side, without the drain hedge the run waits for
    the slow answers."""
    policy = dataclasses.replace(WATCH, lost_after_s=60.0, drain_hedge_min_s=0.5)
    slow, fast = slow_and_fast()
    with slow, fast:
        results, client, elapsed = drain([slow.url, fast.url], policy)
        aborts = slow.stats()["polls"].get("POST /abort_request", 0)
        slow_answers = slow.stats()["requests"]["total"]
    assert len(results) == 12 and all(r.output_ids for r in results)
    assert len({r.request.sample_id for r in results}) == 12  # each sample answered once
    assert {r.endpoint for r in results} == {fast.url}  # the slow copies lost the race
    assert client.liveness is not None
    assert client.liveness.drain_hedged[fast.url] == client.liveness.drain_hedges_won[fast.url] == slow_answers
    assert slow_answers >= 1 and aborts == slow_answers  # every slow copy was aborted by rid
    assert client.stats.failures == {} and client.pool.endpoints[0].failures == 0  # not blamed
    assert elapsed < SLOW_ANSWER_S / 2

    slow, fast = slow_and_fast()
    with slow, fast:
        results, client, waited = drain([slow.url, fast.url], dataclasses.replace(policy, drain_hedge=False))
    assert len(results) == 12 and client.liveness is not None and sum(client.liveness.drain_hedged.values()) == 0
    assert waited >= SLOW_ANSWER_S * 0.8 > elapsed  # without it: the slow answers' time


def test_a_drain_hedge_that_fails_leaves_the_original_to_answer():
    """The idle replica refuses the copy (its /generate answers 503 every time): the failed copy drops out, counted
    against its endpoint, and the original's own answer is kept."""
    policy = dataclasses.replace(WATCH, lost_after_s=60.0, drain_hedge_min_s=0.3)
    fixed = {"output_tokens_min": 20, "output_tokens_max": 20}
    slow = SimServerThread(dataclasses.replace(SimConfig().with_profile("instant"), decode_s_per_token=0.1, **fixed))
    failing = SimServerThread(SimConfig(faults={"error_503": 1.0}).with_profile("instant"))
    with slow, failing:
        results, client, _ = drain([slow.url, failing.url], policy, n=1)  # the one request goes to `slow`
        copies = failing.stats()["requests"]["total"]
    assert len(results) == 1 and results[0].output_ids and results[0].endpoint == slow.url
    assert client.liveness is not None and copies == client.liveness.drain_hedged[failing.url] == 1
    assert client.liveness.drain_hedges_won[failing.url] == 0
    assert client.stats.failures == {} and client.pool.endpoints[1].failures == 1  # the copy's failure, its own
