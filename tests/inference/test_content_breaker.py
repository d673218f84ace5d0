"""The content breaker's decisions, one answer at a time, and the pool leaving ejected endpoints out."""

from __future__ import annotations

import asyncio

import pytest

from eagle_datagen.inference.content_breaker import ContentBreaker, ContentBreakerPolicy
from eagle_datagen.inference.endpoints import Endpoint, EndpointPool, NoEndpointAvailable
from eagle_datagen.validation.diagnosis import DiagnosisThresholds
from eagle_datagen.validation.screening import SERVER_FAULT_REASONS

A, B, C = "http://a:1", "http://b:1", "http://c:1"


def breaker(urls=(A, B), **rates) -> ContentBreaker:
    thresholds = DiagnosisThresholds().with_rates(rates)
    return ContentBreaker(list(urls), ContentBreakerPolicy(), thresholds.rates(), SERVER_FAULT_REASONS)


def test_three_server_faults_of_one_reason_in_the_last_50_answers_eject():
    b = breaker()
    for _ in range(10):
        assert b.record(A, None) is None
    assert b.record(A, "prompt_echo", {"detail": "d1"}) is None
    assert b.record(A, "completion_tokens_mismatch") is None  # another reason: counted on its own
    assert b.record(A, "prompt_echo") is None
    ejection = b.record(A, "prompt_echo", {"detail": "output_ids start with ..."})
    assert ejection is not None and ejection.reason == "prompt_echo" and ejection.kind == "server_fault"
    assert "3 of its last 14 answers" in ejection.evidence and ejection.answers == 14
    assert not b.is_available(A) and b.is_available(B) and not b.all_ejected


def test_faults_older_than_the_window_are_forgotten():
    b = breaker()
    for _ in range(3):
        b.record(A, "prompt_echo")
        for _ in range(30):
            b.record(A, None)
    assert b.is_available(A)  # never 3 within 50 answers


def test_the_users_rate_raises_the_count_that_ejects():
    assert breaker().faults_to_eject("prompt_echo") == 3  # 1% of 50 is below the minimum of 3
    assert breaker(prompt_echo=0.1).faults_to_eject("prompt_echo") == 6  # more than 5 of 50
    assert breaker(prompt_echo=1.0).faults_to_eject("prompt_echo") == 50


def test_a_model_behaviour_far_above_the_other_endpoints_ejects_one_that_all_share_does_not():
    b = breaker((A, B, C))
    for i in range(30):
        b.record(B, "missing_think_end" if i % 10 == 0 else None)
        b.record(C, "missing_think_end" if i % 10 == 5 else None)
    ejection = None
    for _ in range(12):
        ejection = ejection or b.record(A, "missing_think_end")
    assert ejection is not None and ejection.kind == "model_behaviour"
    assert "in 10 of its 10 answers, against 6 of 60" in ejection.evidence

    shared = breaker((A, B))
    for i in range(200):  # 30% on both: a model behaviour, no outlier
        for url in (A, B):
            assert shared.record(url, "missing_think_end" if (i * 7 + len(url)) % 10 < 3 else None) is None


def test_the_pool_leaves_ejected_endpoints_out_and_avoids_the_one_that_answered_wrong():
    async def scenario():
        b = breaker()
        pool = EndpointPool([Endpoint(A, 2), Endpoint(B, 2)], gate=b)
        first = await pool.acquire(avoid=A)
        assert first.url == B
        await pool.release(first, ok=True, endpoint_fault=False)
        for _ in range(3):
            b.record(B, "prompt_echo")
        assert (await pool.acquire(avoid=A)).url == A  # the only endpoint left, even if avoided
        for _ in range(3):
            b.record(A, "prompt_echo")
        with pytest.raises(NoEndpointAvailable, match="content breaker"):
            await pool.acquire()

    asyncio.run(scenario())
