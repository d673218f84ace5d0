"""Least-outstanding balancing, windows and the circuit breaker of the endpoint pool."""

from __future__ import annotations

import asyncio
import time

import pytest

from eagle_datagen.inference.endpoints import BreakerPolicy, Endpoint, EndpointPool


def pool(*windows, **breaker):
    return EndpointPool([Endpoint(f"http://e{i}", w) for i, w in enumerate(windows)], BreakerPolicy(**breaker))


def test_least_outstanding_spreads_requests_and_respects_windows():
    async def scenario():
        p = pool(2, 2)
        chosen = [await p.acquire() for _ in range(4)]
        assert sorted(e.url for e in chosen) == ["http://e0", "http://e0", "http://e1", "http://e1"]
        waiter = asyncio.create_task(p.acquire())
        await asyncio.sleep(0.05)
        assert not waiter.done()  # both windows are full
        await p.release(chosen[0], ok=True, endpoint_fault=False)
        assert (await asyncio.wait_for(waiter, 1)).url == chosen[0].url

    asyncio.run(scenario())


def test_breaker_opens_after_consecutive_failures_then_probes_back():
    async def scenario():
        p = pool(4, 4, failures_to_open=2, open_s=0.2)
        bad, good = p.endpoints
        for _ in range(2):
            bad.outstanding += 1
            await p.release(bad, ok=False, endpoint_fault=True)
        assert bad.open_until > time.monotonic()
        assert {(await p.acquire()).url for _ in range(4)} == {"http://e1"}  # bad is out
        for _ in range(4):
            await p.release(good, ok=True, endpoint_fault=False)
        await asyncio.sleep(0.25)
        probe = await p.acquire()
        assert probe is bad and bad.probing  # half-open: one probe
        others = [await p.acquire() for _ in range(3)]
        assert all(e is good for e in others)
        await p.release(probe, ok=True, endpoint_fault=False)
        assert bad.open_until == 0.0 and not bad.probing

    asyncio.run(scenario())


def test_failed_probe_reopens_for_longer():
    async def scenario():
        p = pool(4, failures_to_open=1, open_s=0.1, max_open_s=10)
        (e,) = p.endpoints
        e.outstanding += 1
        await p.release(e, ok=False, endpoint_fault=True)
        await asyncio.sleep(0.12)
        probe = await p.acquire()
        await p.release(probe, ok=False, endpoint_fault=True)
        assert e.open_until - time.monotonic() > 0.15  # doubled

    asyncio.run(scenario())


@pytest.mark.parametrize("ok", [True, False])
def test_prompt_errors_do_not_count_against_the_endpoint(ok):
    async def scenario():
        p = pool(1, failures_to_open=1)
        e = await p.acquire()
        await p.release(e, ok=ok, endpoint_fault=False)
        assert e.open_until == 0.0 and e.consecutive_failures == 0

    asyncio.run(scenario())
