"""POST /generate: router faults, validation, queueing for a slot, timed "generation", JSON or SSE answers.

Order of events for one request: the router's faults (429, 408), SGLang's validation (400, 500), SGLang's
queue (503, injected or real), a dropped connection, a slow answer, then each prompt (or sample) takes a
slot for its prefill, in the server's prefill lane (prefill_lane.py: one batch at a time, prefill_s_per_token x
the batch's uncached prompt ids), then decode_s_per_token x output seconds. The prefix cache (prefix_cache.py)
is matched as the request's prefill batch forms, holds the prompt once that batch has run and the whole
sequence once the request finishes; `n > 1` first prefills the prompt alone, as SGLang's tokenizer manager
does ("Cache the common prefix for parallel sampling"), so its n samples find it cached.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from eagle_datagen.standin.sglang.aborts import ABORTED_QUEUED, ABORTED_RUNNING, unless_aborted
from eagle_datagen.standin.sglang.engine import QueueFull
from eagle_datagen.standin.sglang.faults import (
    ABORT_FINISH_REASON,
    QUEUE_FULL_BODY,
    ROUTER_408_BODY,
    ROUTER_429_BODY,
    ItemFaults,
    apply_output_faults,
    reported_prompt_tokens,
)
from eagle_datagen.standin.sglang.logprobs import logprob_fields
from eagle_datagen.standin.sglang.outputs import Generation, output_seed
from eagle_datagen.standin.sglang.protocol import (
    BadRequest,
    GenerateItem,
    GenerateRequest,
    InvalidBody,
    SchemaError,
    Timing,
    UncaughtError,
    parse_generate,
    response_object,
)
from eagle_datagen.standin.sglang.speculative import spec_metrics
from eagle_datagen.standin.sglang.state import STATE_KEY, SimState
from eagle_datagen.standin.sglang.tool_calls import tool_call_tail

Emit = Callable[[GenerateItem, dict[str, Any]], Awaitable[None]]


class Dropped(Exception):
    """The drop fault: close the connection without (the rest of) a response."""


async def _sleep(seconds: float) -> None:
    if seconds > 0:  # zero-latency profiles skip the timer entirely
        await asyncio.sleep(seconds)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")


def _sse(body: Any) -> bytes:
    return b"data: " + (body if isinstance(body, bytes) else json.dumps(body).encode()) + b"\n\n"


async def _never_answer(request: web.Request) -> None:
    """The lose fault: hold the connection open, answer nothing, until the client goes away."""
    while request.transport is not None and not request.transport.is_closing():
        await asyncio.sleep(0.2)
    raise Dropped


async def _lost(request: web.Request, state: SimState, parsed: GenerateRequest) -> web.Response:
    """A lost request is held until the client goes away or /abort_request ends it: then it is answered as a
    request aborted in SGLang's waiting queue (it never ran)."""
    with state.aborts.holding([item.rid for item in parsed.items]) as aborted:
        await unless_aborted(_never_answer(request), aborted)  # Dropped when the client goes away first
    timing = Timing.untimed(time.time())
    results = [
        response_object(
            text=state.text([], item.sampling.skip_special_tokens),
            output_ids=[],
            rid=item.rid,
            finish_reason=dict(ABORTED_QUEUED),
            prompt_tokens=len(item.prompt_ids),
            completion_tokens=0,
            timing=timing,
            weight_version=state.config.weight_version,
        )
        for item in parsed.items
    ]
    return _json(results[0] if parsed.single else results)


async def handle_generate(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    state.stats.request_arrived()
    outcome = "disconnected"  # kept if the client goes away or a restart cuts the connection
    try:
        response = await _generate(request, state, time.monotonic())
        outcome = str(response.status)
        return response
    except Dropped:
        outcome = "dropped"
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError from None  # aiohttp's path for a connection that is gone
    finally:
        state.stats.outcomes[outcome] += 1


async def _generate(request: web.Request, state: SimState, arrived: float) -> web.StreamResponse:
    raw = await request.read()
    try:
        body = json.loads(raw)
    except ValueError as exc:
        return _json(InvalidBody(f"JSON decode error: {exc}").body(), 400)
    stream = isinstance(body, dict) and body.get("stream") is True
    faults = state.faults.for_request(state.config.lost_after)
    if faults.error_429:
        state.stats.faults["error_429"] += 1
        return _json(ROUTER_429_BODY, 429)
    if faults.error_408:
        state.stats.faults["error_408"] += 1
        return _json(ROUTER_408_BODY, 408)
    try:
        parsed = parse_generate(body, state.config, state.codec.encode if state.codec else None)
    except (InvalidBody, SchemaError) as exc:  # refused before a stream starts
        return _json(exc.body(), 400)
    except BadRequest as exc:
        if stream:  # SGLang validates inside its stream: a 200, then the error as an event
            return await _stream_error(request, exc.stream_event())
        return _json(exc.body(), 400)
    except UncaughtError:
        if stream:  # the stream has started when SGLang's uncaught error breaks it
            await _start_stream(request)
            raise Dropped from None
        return web.Response(status=500, text="Internal Server Error")
    if faults.error_503:
        state.stats.faults["error_503"] += 1
        return await _stream_error(request, _queue_full_event()) if stream else _json(QUEUE_FULL_BODY, 503)
    if faults.lose:
        state.stats.faults["lose"] += 1
        return await _lost(request, state, parsed)
    if faults.drop and not stream:
        state.stats.faults["drop"] += 1
        raise Dropped
    if faults.slow:
        state.stats.faults["slow"] += 1
        await asyncio.sleep(state.config.slow_seconds)
    item_faults = [state.faults.for_item() for _ in parsed.items]
    for f in item_faults:
        for kind in f.kinds():
            state.stats.faults[kind] += 1
    if stream:
        if faults.drop:
            state.stats.faults["drop"] += 1
        return await _stream(request, state, parsed, item_faults, arrived, drop=faults.drop)
    try:
        results = await _run_all(state, parsed, item_faults, arrived, None)
    except QueueFull:
        return _json(QUEUE_FULL_BODY, 503)
    return _json(results[0] if parsed.single else results)


def _queue_full_event() -> dict[str, Any]:
    return {"error": {"message": QUEUE_FULL_BODY["message"]}}


async def _run_all(
    state: SimState, parsed: GenerateRequest, item_faults: list[ItemFaults], arrived: float, emit: Emit | None
) -> list[dict[str, Any]]:
    """Every item in its own slot, concurrently."""
    await _warm_prefixes(state, parsed)
    return await _concurrently(
        [run_item(state, item, faults, arrived, emit) for item, faults in zip(parsed.items, item_faults, strict=True)]
    )


async def _concurrently(coros: list[Awaitable[Any]]) -> list[Any]:
    """Results in order. The first QueueFull or Dropped cancels the others and is raised as it is."""
    if len(coros) == 1:
        return [await coros[0]]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except ExceptionGroup as errors:
        for kind in (Dropped, QueueFull):
            if errors.subgroup(kind) is not None:
                raise kind from None
        raise
    return [task.result() for task in tasks]


async def _warm_prefixes(state: SimState, parsed: GenerateRequest) -> None:
    """n > 1: one prefill-only pass per prompt before its samples (SGLang sends max_new_tokens=0 first)."""
    if not state.prefix_cache.enabled or all(item.sampling.n == 1 for item in parsed.items):
        return
    prompts = {id(item.prompt_ids): item.prompt_ids for item in parsed.items}
    await _concurrently([_prefill_only(state, ids) for ids in prompts.values()])


async def _prefill_only(state: SimState, prompt_ids: list[int]) -> None:
    await state.pool.acquire()
    try:
        cached = await state.prefill.prefill(prompt_ids)
    finally:
        state.pool.release()
    state.stats.count_prefill(len(prompt_ids), cached)


async def run_item(
    state: SimState, item: GenerateItem, faults: ItemFaults, arrived: float, emit: Emit | None
) -> dict[str, Any]:
    """Generate one output, holding a slot for its modelled time; `emit` receives the streamed partials."""
    cfg = state.config
    sampling = item.sampling
    phases = {"started": arrived, "prefilled": arrived}  # monotonic times, set as the request gets there
    cached = 0  # set once the request has its slot; the partial results of a stream carry it too

    def result(output_ids: list[int], finish: dict | None, completion_tokens: int) -> dict[str, Any]:
        now = time.monotonic()
        wall = time.time() - now  # monotonic -> wall-clock seconds, as meta_info reports them
        timing = Timing(arrived + wall, phases["started"] + wall, phases["prefilled"] + wall, now + wall)
        answer = response_object(
            text=state.text(output_ids, sampling.skip_special_tokens),
            output_ids=output_ids,
            rid=item.rid,
            finish_reason=finish,
            prompt_tokens=reported_prompt_tokens(item.prompt_ids, faults),
            completion_tokens=completion_tokens,
            timing=timing,
            cached_tokens=cached,
            weight_version=cfg.weight_version,
        )
        if item.logprobs is not None:  # return_logprob: SGLang's logprob keys in meta_info (logprobs.py)
            seed = output_seed(item.prompt_ids, sampling.sampling_seed, item.sample_index)
            text = (lambda i: state.text([i], False)) if state.codec is not None else None
            short = faults.logprobs_shape and finish is not None
            answer["meta_info"] |= logprob_fields(state.outputs, output_ids, item.logprobs, seed, short, text)
        if finish is not None and cfg.speculative is not None:  # a finished request of a server with a drafter
            answer["meta_info"].update(spec_metrics(cfg.speculative, sampling.sampling_seed, completion_tokens))
        return answer

    if faults.abort:
        return result([], dict(ABORT_FINISH_REASON), 0)
    # an instant prompt ends in a closed think block: the model answers without reasoning (unless the fault)
    instant = item.prompt_ids[-2:] == [cfg.think_start_id, cfg.think_end_id] and not faults.think_in_instant
    generation = state.outputs.generate(
        item.prompt_ids,
        sampling_seed=sampling.sampling_seed,
        sample_index=item.sample_index,
        max_new_tokens=sampling.max_new_tokens,
        min_new_tokens=sampling.min_new_tokens,
        stop_token_ids=sampling.stop_token_ids,
        ignore_eos=sampling.ignore_eos,
        think_end=not faults.no_think_end,
        instant=instant,
    )
    if cfg.tool_calls and state.codec is not None and generation.finish_reason.get("type") == "stop":
        tail = tool_call_tail(state.codec, item.prompt_ids, cfg.eos_id)
        if tail is not None and (instant or cfg.think_end_id in generation.output_ids):
            ids = generation.output_ids
            reasoning = [] if instant else ids[: ids.index(cfg.think_end_id) + 1]
            generation = Generation(reasoning + tail, {"type": "stop", "matched": cfg.eos_id})
    think_ids = (cfg.think_start_id, cfg.think_end_id)
    output_ids, completion_tokens = apply_output_faults(generation.output_ids, item.prompt_ids, faults, think_ids)
    decoded = len(generation.output_ids)  # the tokens the model "ran" for, whatever the faults did
    with state.aborts.holding([item.rid]) as aborted:  # POST /abort_request ends it early (aborts.py)
        slot, _ = await unless_aborted(state.pool.acquire(), aborted)
        if not slot:
            return result([], dict(ABORTED_QUEUED), 0)
        phases["started"] = time.monotonic()
        try:
            cached = await state.prefill.prefill(item.prompt_ids)  # one batch at a time (prefill_lane.py)
            phases["prefilled"] = time.monotonic()
            if emit is None:
                decoding = _sleep(cfg.decode_s_per_token * decoded)
            else:
                decoding = _stream_partials(state, item, output_ids, faults.echo, decoded, emit, result)
            finished, _ = await unless_aborted(decoding, aborted)
        finally:
            state.pool.release()
        if not finished:  # the ids decoded until the abort, as the real server returns them
            per_token = cfg.decode_s_per_token
            done = min(len(output_ids), int((time.monotonic() - phases["prefilled"]) / per_token)) if per_token else 0
            return result(output_ids[:done], dict(ABORTED_RUNNING), done)
    state.prefix_cache.insert(item.prompt_ids + cached_output(generation, sampling.max_new_tokens))
    state.stats.items += 1
    state.stats.count_prefill(len(item.prompt_ids), cached)
    state.stats.generation_tokens += completion_tokens
    return result(output_ids, generation.finish_reason, completion_tokens)


def cached_output(generation: Generation, max_new_tokens: int | None) -> list[int]:
    """The output ids whose KV a finished request leaves in SGLang's tree (`release_kv_cache` keeps the sequence up
    to `kv_committed_len`). The last id's KV is computed only by the decode step after it: SGLang's overlap
    scheduler (on by default) launches that step before it sees the request finish, except for a request whose
    next id ends it by length (`Scheduler._reqs_finishing_inflight`, `Req.next_output_finishes_by_length`). So a
    request that stopped on a stop id before max_new_tokens leaves its whole output, the stop id included; one
    that ran to max_new_tokens (or stopped on its last allowed id) all but the last id. Measured on the real
    server: tests/engine/test_differential.py::test_cached_tokens_follow_the_real_server."""
    ids = generation.output_ids
    stopped_early = generation.finish_reason.get("type") == "stop" and (
        max_new_tokens is None or len(ids) < max_new_tokens
    )
    return ids if stopped_early else ids[:-1]


async def _stream_partials(
    state: SimState,
    item: GenerateItem,
    output_ids: list[int],
    prefix: int,
    decoded: int,
    emit: Emit,
    result: Callable[[list[int], dict | None, int], dict[str, Any]],
) -> None:
    """Cumulative partial results after the first token and every stream_interval tokens, timed along the
    decode. The final result (with its finish_reason) is the caller's to send."""
    interval = item.sampling.stream_interval or state.config.stream_interval
    per_token = state.config.decode_s_per_token
    total = len(output_ids) - prefix
    sent = 0
    for count in dict.fromkeys([1, *range(interval, total, interval)]):
        if count >= total:
            break
        await _sleep(per_token * (count - sent))
        sent = count
        await emit(item, result(output_ids[: prefix + count], None, count))
    await _sleep(per_token * max(decoded - sent, 0))


async def _start_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Cache-Control": "no-cache"})
    response.content_type = "text/event-stream"
    await response.prepare(request)
    return response


async def _stream_error(request: web.Request, error: dict[str, Any]) -> web.StreamResponse:
    response = await _start_stream(request)
    await response.write(_sse(error) + _sse(b"[DONE]"))
    await response.write_eof()
    return response


async def _stream(
    request: web.Request,
    state: SimState,
    parsed: GenerateRequest,
    item_faults: list[ItemFaults],
    arrived: float,
    drop: bool,
) -> web.StreamResponse:
    """`data: {json}` events with cumulative output_ids, `data: [DONE]` last; a batch's events carry `index`."""
    response = await _start_stream(request)

    async def emit(item: GenerateItem, event: dict[str, Any]) -> None:
        if not parsed.single:
            event["index"] = item.index
        await response.write(_sse(event))
        if drop:  # the drop fault, mid-stream: after the first event
            raise Dropped

    async def emit_final(item: GenerateItem, faults: ItemFaults) -> dict[str, Any]:
        final = await run_item(state, item, faults, arrived, emit)
        await emit(item, final)
        return final

    try:
        await _warm_prefixes(state, parsed)
        await _concurrently([emit_final(item, faults) for item, faults in zip(parsed.items, item_faults, strict=True)])
    except QueueFull:
        await response.write(_sse(_queue_full_event()))
    await response.write(_sse(b"[DONE]"))
    await response.write_eof()
    return response
