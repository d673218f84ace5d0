"""The hedged copy of a lost request (inference/client.py, liveness.py) against serve-sim replicas: a lost
request during an outage, with no endpoint left for its hedge, leaves its sample for a rerun instead of
crashing the run; a hedge that fails is not counted as won; the lost copy is aborted on its server."""

from __future__ import annotations

import asyncio

from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.endpoints import BreakerPolicy, Endpoint, EndpointPool
from eagle_datagen.inference.liveness import LivenessPolicy
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from eagle_datagen_stack.processes import free_port

WATCH = LivenessPolicy(lost_after_s=0.5, poll_s=0.1, grace_s=0.1)
RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.02)


def sample() -> SampleRequest:
    return SampleRequest.create(
        prompt_id="p",
        record_id=None,
        category="chat",
        sample_index=0,
        prompt_ids=[163587, 1000, 163586, 163588, 69702, 163601, 163606],
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
