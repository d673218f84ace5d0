"""Support for the tests against the real SGLang engine (tests/engine/, tests/dags/test_category_run_real_engine.py).

- `engine_or_skip()`: the engine environment and the tiny model are built (`make sglang`), or the test skips
  with the reason; under `make test` (EAGLE_DATAGEN_REQUIRE_ENGINE=1) it fails instead, since there they must be.
- `RecordingProxy`: an aiohttp pass-through in front of a real server that records every `/generate` it
  forwards (the request's `input_ids` and `rid`, the answer's status, `output_ids` and `meta_info`), so a test
  checks published rows against what the server itself received and returned, not against the client's word.
  With `swallow_nth` it loses one answer on the way: the N-th /generate is forwarded and answered by the
  server, but the answer is withheld and the client's connection held open (a request lost between server and
  client; /health and /v1/loads pass through, so the server's own count no longer has it). It also records
  each `POST /abort_request` it forwards (`aborts`) and when each /generate arrived (`arrived`).
- `real_servers`: real SGLang CPU servers (tiny model), started side by side, each behind a RecordingProxy;
  a start costs 25-65 s and ~2 GB, so a module shares its servers and never runs more than two.
- `published_rows`, `assert_rows_match_server`: the rows of a run, and that check.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow.parquet as pq
import pytest
from aiohttp import web

from eagle_datagen_stack.processes import free_port
from eagle_datagen_stack.sglang_engine import (
    ServerOptions,
    SGLangServer,
    missing_engine,
    start_side_by_side,
    tiny_model_dir,
)

THINK_START, THINK_END, IM_END = 163606, 163607, 163586


def engine_or_skip() -> None:
    reason = missing_engine()
    if reason is None:
        return
    if os.environ.get("EAGLE_DATAGEN_REQUIRE_ENGINE") == "1":
        pytest.fail(f"real-engine tests: {reason} (make test builds it first)")
    pytest.skip(f"real-engine tests need the engine: {reason}")


@dataclass(frozen=True)
class Exchange:
    """One /generate as the server saw it: one prompt (a batch is split into its items)."""

    rid: str | None
    input_ids: list[int]
    sampling_params: dict[str, Any]
    status: int
    output_ids: list[int] | None
    meta_info: dict[str, Any] | None
    text: str | None


def _items(request: Any, answer: Any, status: int) -> list[Exchange]:
    if not isinstance(request, dict):
        return []
    ids = request.get("input_ids") or []
    batch = bool(ids) and isinstance(ids[0], list)
    prompts = ids if batch else [ids]
    rids = request.get("rid") if isinstance(request.get("rid"), list) else [request.get("rid")] * len(prompts)
    answers = answer if isinstance(answer, list) else [answer] * len(prompts)
    exchanges = []
    for prompt, rid, reply in zip(prompts, rids, answers, strict=False):
        ok = status == 200 and isinstance(reply, dict)
        exchanges.append(
            Exchange(
                rid=rid,
                input_ids=list(prompt),
                sampling_params=dict(request.get("sampling_params") or {}),
                status=status,
                output_ids=reply.get("output_ids") if ok else None,
                meta_info=reply.get("meta_info") if ok else None,
                text=reply.get("text") if ok else None,
            )
        )
    return exchanges


def _json_or_none(body: bytes, key: str) -> Any:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value.get(key) if isinstance(value, dict) else None


async def _hold(request: web.Request) -> None:
    """Keep the client's connection open without an answer until the client goes away."""
    while request.transport is not None and not request.transport.is_closing():
        await asyncio.sleep(0.1)
    raise asyncio.CancelledError  # aiohttp's path for a connection that is gone


@dataclass
class RecordingProxy:
    """`with RecordingProxy(upstream_url) as proxy:` point the client at `proxy.url`; `proxy.exchanges` holds
    what went through. GETs (preflight) pass through unrecorded; an upstream that is down answers 502."""

    upstream: str
    port: int = 0
    exchanges: list[Exchange] = field(default_factory=list)
    refused: int = 0  # requests that found the upstream down
    swallow_nth: int | None = None  # the N-th /generate (1: the first) has its answer withheld
    swallowed: list[Exchange] = field(default_factory=list)  # that answer, as the server gave it
    swallowed_at: float | None = None  # time.time() when the server gave it
    aborts: list[tuple[str | None, int]] = field(default_factory=list)  # (rid, the server's status) forwarded
    arrived: dict[str | None, float] = field(default_factory=dict)  # rid -> time.time() of its /generate
    _generates: int = field(default=0, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _runner: web.AppRunner | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        number = 0
        if request.method == "POST" and request.path == "/generate":
            with self._lock:
                self._generates += 1
                number = self._generates
                self.arrived[_json_or_none(body, "rid")] = time.time()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        try:
            async with self._session.request(
                request.method, self.upstream.rstrip("/") + request.path_qs, data=body, headers=headers
            ) as upstream:
                payload = await upstream.read()
                status, content_type = upstream.status, upstream.headers.get("Content-Type", "application/json")
        except aiohttp.ClientError:
            with self._lock:
                self.refused += 1
            raise web.HTTPBadGateway(text="recording proxy: upstream SGLang unreachable") from None
        if request.method == "POST" and request.path == "/generate":
            try:
                sent, answer = json.loads(body), json.loads(payload)
            except ValueError:
                sent, answer = None, None
            with self._lock:
                if number == self.swallow_nth:
                    self.swallowed.extend(_items(sent, answer, status))
                    self.swallowed_at = time.time()
                else:
                    self.exchanges.extend(_items(sent, answer, status))
            if number == self.swallow_nth:
                await _hold(request)
        if request.method == "POST" and request.path == "/abort_request":
            with self._lock:
                self.aborts.append((_json_or_none(body, "rid"), status))
        return web.Response(body=payload, status=status, headers={"Content-Type": content_type})

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        await self._runner.cleanup()
        await self._session.close()

    def start(self) -> RecordingProxy:
        self.port = self.port or free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="recording-proxy")
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop = None

    def clear(self) -> None:
        with self._lock:
            self.exchanges.clear()
            self.refused = 0
            self.swallowed.clear()
            self.aborts.clear()
            self.arrived.clear()
            self.swallowed_at, self._generates = None, 0

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def published_rows(root: Path, run_id: str) -> dict[str, list[dict]]:
    """{"data": rows, "quarantine": rows} of a run under a local output root."""
    rows: dict[str, list[dict]] = {"data": [], "quarantine": []}
    for kind in rows:
        for part in sorted(root.glob(f"{kind}/category=*/run={run_id}/part-*.parquet")):
            rows[kind].extend(pq.read_table(part).to_pylist())
    return rows


def sample_id_of(rid: str | None) -> str | None:
    """The sample a request id belongs to (retries append -rN, a hedged copy -h; the canary's rid is its own)."""
    return rid.split("-r")[0].removesuffix("-h") if rid else None


def assert_rows_match_server(rows: list[dict], exchanges: list[Exchange]) -> None:
    """Every published row is exactly one answer the server gave: for its sample's rid the server received
    `prompt_ids` and returned `output_ids` (and the row counts what meta_info counted)."""
    answered: dict[str, list[Exchange]] = {}
    for exchange in exchanges:
        if exchange.status == 200 and exchange.output_ids is not None:
            answered.setdefault(sample_id_of(exchange.rid), []).append(exchange)
    for row in rows:
        candidates = answered.get(row["sample_id"], [])
        assert candidates, f"sample {row['sample_id']} was published but the server never answered it"
        match = [e for e in candidates if e.input_ids == row["prompt_ids"] and e.output_ids == row["output_ids"]]
        assert match, f"sample {row['sample_id']}: stored ids differ from what the server received/returned"
        assert row["completion_tokens"] == match[-1].meta_info["completion_tokens"] == len(row["output_ids"])
        assert match[-1].meta_info["prompt_tokens"] == len(row["prompt_ids"])


@contextmanager
def real_servers(log_dir: Path, *options: ServerOptions) -> Iterator[list[tuple[SGLangServer, RecordingProxy]]]:
    """One real server per `options`, started side by side, each with a RecordingProxy in front."""
    engine_or_skip()
    servers = [SGLangServer(tiny_model_dir(), log_dir, o, name=f"sglang-{i}") for i, o in enumerate(options)]
    with ExitStack() as stack:
        for server in start_side_by_side(servers):
            stack.callback(server.stop)
        proxies = [stack.enter_context(RecordingProxy(s.url)) for s in servers]
        yield list(zip(servers, proxies, strict=True))
