"""GenerateClient against a small real HTTP server that records what reaches it: a request holding an id
beyond the model's vocabulary is never sent, and the error bodies of SGLang and its router all give their
message."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.endpoints import Endpoint, EndpointPool
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.inference.samples import SampleRequest, SampleResult

VOCAB = 163840
ANSWER = {
    "output_ids": [5, 163607, 7, 163586],
    "meta_info": {"finish_reason": {"type": "stop", "matched": 163586}, "completion_tokens": 4, "prompt_tokens": 2},
}


def sample(prompt_ids: list[int], **sampling: Any) -> SampleRequest:
    return SampleRequest.create(
        prompt_id="p",
        record_id=None,
        category="chat",
        sample_index=0,
        prompt_ids=prompt_ids,
        model="m",
        sampling={"temperature": 1.0, **sampling},
    )


def recording_server(received: list[dict], status: int = 200, body: Any = None, text: str | None = None) -> TestServer:
    async def generate(request: web.Request) -> web.Response:
        received.append(await request.json())
        if text is not None:
            return web.Response(status=status, text=text)
        return web.json_response(ANSWER if body is None else body, status=status)

    app = web.Application()
    app.router.add_post("/generate", generate)
    return TestServer(app, host="127.0.0.1")


def generate_all(server: TestServer, requests: list[SampleRequest], **client: Any) -> list[SampleResult]:
    async def scenario() -> list[SampleResult]:
        async with server:
            pool = EndpointPool([Endpoint(str(server.make_url("")).rstrip("/"), window=4)])
            policy = RetryPolicy(max_attempts=1, base_delay_s=0.0, max_delay_s=0.0)
            async with GenerateClient(pool, policy, **client) as generate_client:
                return [await generate_client.generate(r) for r in requests]

    return asyncio.run(scenario())


def test_a_prompt_id_beyond_the_vocabulary_never_reaches_the_server():
    received: list[dict] = []
    good, bad = sample([1, 2, 163606]), sample([1, 163841, 163606])
    results = generate_all(recording_server(received), [bad, good], vocab_size=VOCAB)
    assert [r["input_ids"] for r in received] == [good.prompt_ids]  # only the good one was sent
    assert results[0].error and results[0].error.startswith("id_beyond_model_vocab: prompt id 163841")
    assert not results[0].retryable and results[0].attempts == 0 and results[0].finish_type == "error"
    assert results[1].error is None and results[1].output_ids == ANSWER["output_ids"]


def test_stop_token_ids_beyond_the_vocabulary_are_not_sent_either():
    received: list[dict] = []
    request = sample([1, 163606], stop_token_ids=[163840])
    [result] = generate_all(recording_server(received), [request], vocab_size=VOCAB)
    assert received == [] and result.error and "stop_token_ids [163840]" in result.error


def test_the_last_id_of_the_vocabulary_is_sent():
    received: list[dict] = []
    [result] = generate_all(recording_server(received), [sample([VOCAB - 1, 163606])], vocab_size=VOCAB)
    assert len(received) == 1 and result.error is None


def test_error_bodies_of_every_shape_reach_the_result():
    """A 400 is permanent (sent once); its message, string or object, is what the sample's error says."""
    cases = [
        ({"error": "unknown field `bogus_key`, expected one of `max_new_tokens`"}, "unknown field `bogus_key`"),
        (
            {"error": {"message": "The input (9 tokens) is longer than the model's context length (8 tokens)."}},
            "(9 tokens)",
        ),
    ]
    for answer, expected in cases:
        received: list[dict] = []
        [result] = generate_all(recording_server(received, status=400, body=answer), [sample([1, 163606])])
        assert len(received) == 1 and not result.retryable
        assert result.error is not None and result.error.startswith("http_400: ") and expected in result.error


def test_the_queue_full_503_is_retried_with_its_message_counted():
    received: list[dict] = []
    answer = {"object": "error", "message": "The request queue is full.", "type": "Service Unavailable"}
    [result] = generate_all(recording_server(received, status=503, body=answer), [sample([1, 163606])])
    assert result.retryable and result.error == "gave up after 1 attempts: http_503: The request queue is full."
