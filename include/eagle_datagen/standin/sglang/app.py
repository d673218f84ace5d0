"""The aiohttp application: SGLang's native routes, and `/sim/*` control routes for tests and benchmarks."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any

from aiohttp import web

from eagle_datagen.standin.sglang.config import FaultRates
from eagle_datagen.standin.sglang.generate import handle_generate
from eagle_datagen.standin.sglang.loads import loads_body
from eagle_datagen.standin.sglang.metrics import render_metrics
from eagle_datagen.standin.sglang.speculative import NOT_SPECULATIVE
from eagle_datagen.standin.sglang.state import STATE_KEY, SimState
from eagle_datagen.standin.sglang.tokenize_route import handle_detokenize, handle_tokenize

FLUSH_CACHE_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
FLUSH_FAILED_TEXT = "Flush cache failed.\n"


def _state(request: web.Request) -> SimState:
    return request.app[STATE_KEY]


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


HEALTH_CHECK_TIMEOUT_S = 20.0  # SGLang's /health_generate waits this long for any scheduler output, then 503


async def _hang(request: web.Request, seconds: float | None = None) -> None:
    """Answer nothing until the client goes away (or `seconds` pass)."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while request.transport is not None and not request.transport.is_closing():
        if deadline is not None and time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.1)
    raise asyncio.CancelledError  # the client is gone: aiohttp's path for a closed connection


async def health_generate(request: web.Request) -> web.Response:
    state = _state(request)
    if state.stuck:  # SGLang's probe gets no scheduler output: 503 after its timeout
        await _hang(request, HEALTH_CHECK_TIMEOUT_S)
        return web.Response(status=503)
    return web.Response(status=503 if state.starting else 200)


async def model_info(request: web.Request) -> web.Response:
    cfg = _state(request).config
    return _json(
        {
            "model_path": cfg.model_path,
            "tokenizer_path": cfg.tokenizer_path or cfg.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": cfg.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "kimi_k25",
            "architectures": ["KimiK25ForConditionalGeneration"],
        }
    )


def server_info_body(state: SimState, host: str, port: int) -> dict[str, Any]:
    cfg = state.config
    return {
        "model_path": cfg.model_path,
        "tokenizer_path": cfg.tokenizer_path or cfg.model_path,
        "tokenizer_mode": "auto",
        "skip_tokenizer_init": state.codec is None,  # no tokenizer: no `text` in answers, as with the flag
        "load_format": "auto",
        "trust_remote_code": True,
        "context_length": cfg.context_length,
        "is_embedding": False,
        "served_model_name": cfg.model_path,
        "host": host,
        "port": port,
        "dtype": "auto",
        "kv_cache_dtype": "auto",
        "chat_template": None,
        "reasoning_parser": None,
        "tool_call_parser": None,
        "max_running_requests": cfg.max_running_requests,
        "max_queued_requests": cfg.max_queued_requests,
        "max_total_tokens": None,
        "disable_radix_cache": cfg.prefix_cache_tokens == 0,
        "page_size": 1,
        "chunked_prefill_size": 8192,
        "schedule_policy": "fcfs",
        "tp_size": cfg.tp_size,
        "dp_size": 1,
        "stream_interval": cfg.stream_interval,
        "enable_metrics": True,
        "weight_version": cfg.weight_version,
        "enable_deterministic_inference": cfg.enable_deterministic_inference,
        "enable_watermark": cfg.enable_watermark,
        "watermark_config": "<redacted>",  # as SGLang 0.5.23's /server_info: redacted whether set or not
        "sampling_backend": "flashinfer",
        "sampling_defaults": "model",
        "random_seed": 0,
        "enable_custom_logit_processor": False,
        **(cfg.speculative.server_info() if cfg.speculative is not None else NOT_SPECULATIVE),
        "max_req_input_len": cfg.context_length - 1,
        "internal_states": [{"last_gen_throughput": 0.0}],
        "version": cfg.version,
        **cfg.server_args,  # faked server arguments (serve-sim --server-arg)
        # the stand-in's own settings, under a name real SGLang does not use
        "sglang_sim": {
            "decode_s_per_token": cfg.decode_s_per_token,
            "prefill_s_per_token": cfg.prefill_s_per_token,
            "prefix_cache_tokens": cfg.prefix_cache_tokens,
            "output_tokens": [cfg.output_tokens_min, cfg.output_tokens_max],
            "faults": state.faults.rates.to_dict(),
        },
    }


async def server_info(request: web.Request) -> web.Response:
    state = _state(request)
    return _json(server_info_body(state, *state.address))


async def models(request: web.Request) -> web.Response:
    cfg = _state(request).config
    card = {
        "id": cfg.model_path,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": cfg.model_path,
        "parent": None,
        "max_model_len": cfg.context_length,
    }
    return _json({"object": "list", "data": [card]})


async def flush_cache(request: web.Request) -> web.Response:
    """SGLang refuses to flush while requests run or its scheduler has not yet retired the last batch (which it may
    not have right after an answer): 400 "Flush cache failed." at once, or with `?timeout=S` it waits up to S
    seconds for idle (`SchedulerFlushWrapper`)."""
    state = _state(request)
    try:
        timeout = float(request.query.get("timeout", "0"))
        if not timeout >= 0:
            raise ValueError(timeout)
    except ValueError:
        message = f"1 validation error: query timeout must be a number >= 0, got {request.query['timeout']!r}"
        return _json({"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400}, 400)
    deadline = time.monotonic() + timeout
    while state.pool.running or state.pool.queued:
        if time.monotonic() >= deadline:
            return web.Response(status=400, text="Timed out waiting for idle state." if timeout else FLUSH_FAILED_TEXT)
        await asyncio.sleep(0.01)
    state.prefix_cache.clear()
    # SGLang's names no content type (docs/internals/real-engine.md)
    return web.Response(status=200, text=FLUSH_CACHE_TEXT)


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text=render_metrics(_state(request)), content_type="text/plain", charset="utf-8")


async def loads(request: web.Request) -> web.Response:
    state = _state(request)
    if state.config.loads_fault == "hang" or state.stuck:  # SGLang asks its scheduler, which does not answer
        await _hang(request)
    if state.config.loads_fault == "error":
        return web.Response(status=500, text="Internal Server Error")
    return _json(loads_body(state))


async def sim_stats(request: web.Request) -> web.Response:
    state = _state(request)
    return _json(state.stats.to_json(state.pool))


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"{}")
    except ValueError:
        raise web.HTTPBadRequest(text="the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="the body must be a JSON object")
    return body


async def sim_faults(request: web.Request) -> web.Response:
    """Replace the fault rates: `{"error_503": 0.1, ...}`; kinds left out become 0."""
    try:
        rates = FaultRates.from_dict(await _json_body(request))
    except (TypeError, ValueError) as exc:
        return _json({"error": {"message": str(exc)}}, 400)
    _state(request).set_fault_rates(rates)
    return _json({"faults": rates.to_dict()})


async def sim_restart(request: web.Request) -> web.StreamResponse:
    """Answer, then restart: `{"downtime_s": x}` (default: the config's restart_downtime_s)."""
    state = _state(request)
    downtime = (await _json_body(request)).get("downtime_s", state.config.restart_downtime_s)
    if isinstance(downtime, bool) or not isinstance(downtime, int | float) or downtime < 0:
        return _json({"error": {"message": f"downtime_s must be a non-negative number, got {downtime!r}"}}, 400)
    if state.restart is None:
        return _json({"error": {"message": "this server was not started by a runner that can restart it"}}, 409)
    response = _json({"restarting": True, "downtime_s": downtime})
    await response.prepare(request)
    await response.write_eof()  # on its way before the restart closes this connection
    task = asyncio.get_running_loop().create_task(state.restart(downtime))
    state.background.add(task)
    task.add_done_callback(state.background.discard)
    return response


async def abort_request(request: web.Request) -> web.Response:
    """SGLang's POST /abort_request {"rid": ..., "abort_all": ...}: ends the requests held under that rid (or a
    longer one: aborts.py), 200 with an empty body whether or not any was held; the calls are counted in
    /sim/stats "polls", the requests ended in "aborted"."""
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    if not isinstance(body, dict):
        message = "1 validation error: the body must be a JSON object (AbortReq)"
        return _json({"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400}, 400)
    state = _state(request)
    state.stats.aborted += state.aborts.abort(str(body.get("rid") or ""), body.get("abort_all") is True)
    return web.Response(status=200)


async def sim_reset_stats(request: web.Request) -> web.Response:
    _state(request).reset_stats()
    return _json({"reset": True})


# SGLang 0.5.23 (srt/utils/auth.py) lets these through without the key; /sim/* are the stand-in's own test controls
OPEN_PATHS = ("/health", "/ready", "/metrics", "/sim/")


@web.middleware
async def require_api_key(request: web.Request, handler) -> web.StreamResponse:
    """SGLang's --api-key: 401 `{"error": "Unauthorized"}` without `Authorization: Bearer KEY` (compared in
    constant time), except on OPEN_PATHS."""
    key = _state(request).config.api_key
    if key and not request.path.startswith(OPEN_PATHS):
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            _state(request).stats.polls[f"unauthorized {request.path}"] += 1
            return _json({"error": "Unauthorized"}, 401)
    return await handler(request)


@web.middleware
async def not_found_as_json(request: web.Request, handler) -> web.StreamResponse:
    """An unknown path is FastAPI's 404 `{"detail": "Not Found"}`, as on the real server. Requests other than
    /generate and /sim/* are counted by path (/sim/stats "polls"), so a test sees what a router polls."""
    if request.path != "/generate" and not request.path.startswith("/sim/"):
        _state(request).stats.polls[f"{request.method} {request.path}"] += 1
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return _json({"detail": "Not Found"}, 404)


def build_app(state: SimState) -> web.Application:
    # a 262k-token prompt is ~2 MB of JSON; batches more
    app = web.Application(client_max_size=256 << 20, middlewares=[require_api_key, not_found_as_json])
    app[STATE_KEY] = state
    app.router.add_route("POST", "/generate", handle_generate)
    app.router.add_route("PUT", "/generate", handle_generate)
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health_generate)
    for path in ("/get_model_info", "/model_info"):
        app.router.add_get(path, model_info)
    for path in ("/get_server_info", "/server_info"):
        app.router.add_get(path, server_info)
    app.router.add_get("/v1/models", models)
    for path in ("/v1/tokenize", "/tokenize") if state.config.tokenize_api != "none" else ():
        app.router.add_post(path, handle_tokenize)
    for path in ("/v1/detokenize", "/detokenize") if state.config.tokenize_api != "none" else ():
        app.router.add_post(path, handle_detokenize)
    app.router.add_route("GET", "/flush_cache", flush_cache)
    app.router.add_route("POST", "/flush_cache", flush_cache)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/loads", loads)
    app.router.add_post("/abort_request", abort_request)
    app.router.add_get("/sim/stats", sim_stats)
    app.router.add_post("/sim/faults", sim_faults)
    app.router.add_post("/sim/restart", sim_restart)
    app.router.add_post("/sim/reset_stats", sim_reset_stats)
    return app
