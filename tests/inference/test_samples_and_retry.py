"""Sample identity, request bodies and the retry policy."""

from __future__ import annotations

import random

from eagle_datagen.inference.retry import RetryPolicy, failure_from_status
from eagle_datagen.inference.samples import SampleRequest, make_sample_id, request_id, sampling_seed_for

SAMPLING = {"temperature": 1.0, "top_p": 0.95, "max_new_tokens": 100}


def make(index=0, sampling=SAMPLING, prompt_id="p" * 64, model="moonshotai/Kimi-K2.5"):
    return SampleRequest.create(
        prompt_id=prompt_id,
        record_id="r",
        category="chat",
        sample_index=index,
        prompt_ids=[1, 2, 163606],
        model=model,
        sampling=sampling,
    )


def test_sample_identity_is_deterministic_and_distinct_per_index_and_config():
    assert make().sample_id == make().sample_id
    ids = {make(i).sample_id for i in range(8)}
    seeds = {make(i).sampling["sampling_seed"] for i in range(8)}
    assert len(ids) == 8 and len(seeds) == 8
    assert make(sampling=SAMPLING | {"temperature": 0.7}).sample_id != make().sample_id
    assert make(model="other/model").sample_id != make().sample_id
    assert make(sampling=SAMPLING | {"top_k": None}).sample_id == make().sample_id  # unset is unset


def test_body_has_a_string_rid_and_sglang_sampling_keys():
    request = make()
    body = request.body()
    assert body["input_ids"] == [1, 2, 163606]
    assert isinstance(body["rid"], str) and body["rid"] == request.sample_id
    assert request.body(3)["rid"] == f"{request.sample_id}-r3"
    assert set(body["sampling_params"]) == {"temperature", "top_p", "max_new_tokens", "sampling_seed"}
    assert "seed" not in body["sampling_params"]
    assert 0 <= body["sampling_params"]["sampling_seed"] < 2**31
    assert sampling_seed_for(make_sample_id("a", 0, "m", {})) == sampling_seed_for(make_sample_id("a", 0, "m", {}))
    assert request_id("x", 1) == "x"


def test_backoff_grows_exponentially_with_full_jitter_and_a_ceiling():
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=4.0)
    rng = random.Random(0)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)]:
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8  # jitter spans the range


def test_status_classification():
    for status in (408, 429, 500, 502, 503, 504):
        assert failure_from_status(status, "x").transient
    for status in (400, 404, 413, 422):
        assert not failure_from_status(status, "x").transient
    assert failure_from_status(400, "too long").describe() == "http_400: too long"
