"""The SGLang `/generate` client: token ids in, token ids out, every failure classified and counted.

One aiohttp session per endpoint (its connection limit equals the endpoint's window), reused for every
request. `generate` never raises for a failed request: it returns a `SampleResult` whose `error` says
what ended it, so one bad sample cannot stop a shard.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from eagle_datagen.inference.endpoints import Endpoint, EndpointPool, NoEndpointAvailable
from eagle_datagen.inference.retry import Failure, RetryPolicy, failure_from_status
from eagle_datagen.inference.samples import SampleRequest, SampleResult


@dataclass
class GenerationStats:
    sent: int = 0
    completed: int = 0
    retries: int = 0
    failed: int = 0  # samples that ended in a permanent error
    output_tokens: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # failed attempts by kind

    def describe_failures(self) -> str:
        return ", ".join(f"{kind} {n}" for kind, n in self.failures.most_common()) or "none"


def _error_message(body: bytes) -> str:
    """SGLang's error bodies: {"error": {"message"}}, {"message"} (OpenAI style 503) or plain text."""
    try:
        payload = json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace").strip()[:300] or "(empty body)"
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
        if "message" in payload:
            return str(payload["message"])[:300]
    return str(payload)[:300]


def _parse_answer(payload: Any) -> tuple[list[int], dict[str, Any]] | Failure:
    if not isinstance(payload, dict):
        return Failure("bad_response", "the response is not a JSON object", transient=True)
    output_ids, meta = payload.get("output_ids"), payload.get("meta_info")
    if not isinstance(output_ids, list) or not isinstance(meta, dict):
        return Failure("bad_response", "the response lacks output_ids or meta_info", transient=True)
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        return Failure("abort", str(finish.get("message", "aborted")), transient=True, status=finish.get("status_code"))
    return output_ids, meta


class GenerateClient:
    def __init__(self, pool: EndpointPool, policy: RetryPolicy | None = None, seed: int = 0) -> None:
        self.pool = pool
        self.policy = policy or RetryPolicy()
        self.stats = GenerationStats()
        self._rng = random.Random(seed)
        self._sessions: dict[str, aiohttp.ClientSession] = {}

    async def __aenter__(self) -> GenerateClient:
        timeout = aiohttp.ClientTimeout(total=self.policy.request_timeout_s, sock_connect=10)
        for endpoint in self.pool.endpoints:
            connector = aiohttp.TCPConnector(limit=endpoint.window, enable_cleanup_closed=True)
            self._sessions[endpoint.url] = aiohttp.ClientSession(
                base_url=endpoint.url.rstrip("/") + "/", connector=connector, timeout=timeout
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(s.close() for s in self._sessions.values()))
        self._sessions.clear()

    async def _attempt(self, endpoint: Endpoint, body: dict[str, Any]) -> tuple[list[int], dict[str, Any]] | Failure:
        session = self._sessions[endpoint.url]
        try:
            async with session.post("generate", json=body) as response:
                raw = await response.read()
                if response.status != 200:
                    return failure_from_status(response.status, _error_message(raw))
        except TimeoutError:
            return Failure("timeout", f"no answer within {self.policy.request_timeout_s:.0f}s", transient=True)
        except aiohttp.ServerDisconnectedError:
            return Failure("disconnect", "the server closed the connection", transient=True)
        except aiohttp.ClientConnectorError as exc:
            return Failure("connect_error", str(exc.os_error or exc), transient=True)
        except aiohttp.ClientError as exc:
            return Failure("connection_error", f"{type(exc).__name__}: {exc}", transient=True)
        try:
            return _parse_answer(json.loads(raw))
        except ValueError:
            return Failure("bad_response", "the response is not valid JSON", transient=True)

    async def generate(self, request: SampleRequest) -> SampleResult:
        result = SampleResult(request)
        for attempt in range(1, self.policy.max_attempts + 1):
            try:
                endpoint = await self.pool.acquire(request.prompt_ids)
            except NoEndpointAvailable as exc:
                self.stats.failures["no_endpoint"] += 1
                result.error, result.retryable = f"no_endpoint: {exc}", True
                break
            self.stats.sent += 1
            outcome = await self._attempt(endpoint, request.body(attempt))
            ok = not isinstance(outcome, Failure)
            # A 400 is about this prompt, not the endpoint; everything transient counts against the endpoint.
            await self.pool.release(endpoint, ok=ok, endpoint_fault=not ok and outcome.transient)
            result.attempts, result.endpoint = attempt, endpoint.url
            if not isinstance(outcome, Failure):
                result.output_ids, result.meta_info = outcome
                result.finish_reason = result.meta_info.get("finish_reason") or {}
                self.stats.completed += 1
                self.stats.output_tokens += len(result.output_ids)
                return result
            self.stats.failures[outcome.kind] += 1
            if not outcome.transient:
                result.error, result.retryable = outcome.describe(), False
                break
            if attempt == self.policy.max_attempts:
                result.error, result.retryable = f"gave up after {attempt} attempts: {outcome.describe()}", True
                break
            self.stats.retries += 1
            await asyncio.sleep(self.policy.delay(attempt, self._rng))
        self.stats.failed += 1
        return result
