"""The SGLang `/generate` client: token ids in, token ids out, every failure classified and counted.

One aiohttp session per endpoint (its connection limit equals the endpoint's window), reused for every
request. `generate` never raises for a failed request: it returns a `SampleResult` whose `error` says
what ended it, so one bad sample cannot stop a shard.

A last guard before anything is sent: a request holding an id at or above the model's `vocab_size` (in
`input_ids` or `stop_token_ids`) fails permanently as `id_beyond_model_vocab` without reaching a server.
Tokenization already rejects such prompts; the guard exists because one such id kills a real SGLang server
(its scheduler raises and the process exits), taking every other request in flight with it.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from eagle_datagen.inference.access import REFUSED_STATUSES
from eagle_datagen.inference.endpoints import Endpoint, EndpointPool, NoEndpointAvailable
from eagle_datagen.inference.error_body import error_message
from eagle_datagen.inference.liveness import LivenessMonitor, LivenessPolicy, Watched
from eagle_datagen.inference.logprobs import compact
from eagle_datagen.inference.retry import Failure, RetryPolicy, failure_from_status
from eagle_datagen.inference.samples import SampleRequest, SampleResult


@dataclass
class GenerationStats:
    sent: int = 0
    completed: int = 0
    retries: int = 0
    failed: int = 0  # samples that ended in a permanent error
    output_tokens: int = 0
    server_faults: int = 0  # answers the screen refused as server faults and sent again
    failures: Counter[str] = field(default_factory=Counter)  # failed attempts by kind

    def describe_failures(self) -> str:
        return ", ".join(f"{kind} {n}" for kind, n in self.failures.most_common()) or "none"


def _parse_answer(payload: Any) -> tuple[list[int], dict[str, Any]] | Failure:
    if not isinstance(payload, dict):
        return Failure("bad_response", "the response is not a JSON object", transient=True)
    output_ids, meta = payload.get("output_ids"), payload.get("meta_info")
    if not isinstance(output_ids, list) or not isinstance(meta, dict):
        return Failure("bad_response", "the response lacks output_ids or meta_info", transient=True)
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        return Failure("abort", str(finish.get("message", "aborted")), transient=True, status=finish.get("status_code"))
    return output_ids, compact(meta)  # top-k logprobs, when asked: compact at once (inference/logprobs.py)


def beyond_vocab(request: SampleRequest, vocab_size: int) -> str | None:
    """Why the request must not be sent (an id the model does not have), or None."""
    prompt = request.prompt_ids
    if prompt and max(prompt) >= vocab_size:
        bad = next(i for i in prompt if i >= vocab_size)
        return f"prompt id {bad} is beyond the model's vocabulary of {vocab_size} ids; not sent"
    stops = request.sampling.get("stop_token_ids") or []
    if any(i >= vocab_size for i in stops):
        return f"stop_token_ids {stops} hold an id beyond the model's vocabulary of {vocab_size} ids; not sent"
    return None


class Judgement(Protocol):
    reason: str | None  # None: a valid answer

    @property
    def server_fault(self) -> bool: ...


class AnswerScreen(Protocol):
    """Judges each answer as it arrives (generation/screen.py); may raise to stop the run."""

    def check_answer(
        self, endpoint: str, request: SampleRequest, output_ids: list[int], meta_info: dict[str, Any]
    ) -> Judgement: ...

    def request_lost(self, endpoint: str) -> None: ...


class GenerateClient:
    def __init__(
        self,
        pool: EndpointPool,
        policy: RetryPolicy | None = None,
        seed: int = 0,
        screen: AnswerScreen | None = None,
        vocab_size: int | None = None,
        liveness: LivenessPolicy | None = None,
    ) -> None:
        self.pool = pool
        self.liveness_policy = liveness or LivenessPolicy(enabled=False)
        self.liveness: LivenessMonitor | None = None
        self.policy = policy or RetryPolicy()
        self.screen = screen
        self.vocab_size = vocab_size  # set: requests with ids at or above it are never sent
        self.stats = GenerationStats()
        self._rng = random.Random(seed)
        self._sessions: dict[str, aiohttp.ClientSession] = {}

    async def __aenter__(self) -> GenerateClient:
        timeout = aiohttp.ClientTimeout(total=self.policy.request_timeout_s, sock_connect=10)
        for endpoint in self.pool.endpoints:
            self._sessions[endpoint.url] = self.pool.access.session(  # the deployment's key on every request
                connector={"limit": endpoint.window, "enable_cleanup_closed": True},
                base_url=endpoint.url.rstrip("/") + "/",
                timeout=timeout,
            )
        if self.liveness_policy.enabled:
            urls = [e.url for e in self.pool.endpoints]
            self.liveness = LivenessMonitor(self.liveness_policy, urls, self.pool.access)
            self.liveness.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.liveness is not None:
            await self.liveness.stop()
        await asyncio.gather(*(s.close() for s in self._sessions.values()))
        self._sessions.clear()

    async def _attempt(self, endpoint: Endpoint, body: dict[str, Any]) -> tuple[list[int], dict[str, Any]] | Failure:
        session = self._sessions[endpoint.url]
        try:
            async with session.post("generate", json=body) as response:
                raw = await response.read()
                if response.status != 200:
                    return failure_from_status(response.status, error_message(raw))
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

    def _lost(self, endpoint: Endpoint) -> None:
        self.stats.failures["lost"] += 1
        if self.screen is not None:
            self.screen.request_lost(endpoint.url)  # may raise RunStopped: every endpoint is out

    def _heard(self, monitor: LivenessMonitor, endpoint: Endpoint, body: dict[str, Any]) -> asyncio.Task[Any]:
        """The attempt as a task; when it ends with anything from the server, the monitor hears of it (probes wait
        for an endpoint whose requests have all gone quiet: liveness.py)."""
        task = asyncio.create_task(self._attempt(endpoint, body))
        task.add_done_callback(lambda t: t.cancelled() or monitor.heard_from(endpoint.url))
        return task

    async def _watched_attempt(
        self, endpoint: Endpoint, request: SampleRequest, attempt: int
    ) -> tuple[tuple[list[int], dict[str, Any]] | Failure, Endpoint, Endpoint | None]:
        """One attempt, watched by the liveness monitor (liveness.py). When its server loses it, its slot is
        given back at once (as a failure of that endpoint: the server no longer works on it), and a hedged copy
        goes to another endpoint; the first answer wins, the other copy is cancelled and aborted by rid.
        Returns the outcome, the endpoint that gave it, and the endpoint whose slot the caller releases (the
        hedge's once there is one; None when this attempt holds no slot any more). With no endpoint left for
        the hedge (every one is out: `NoEndpointAvailable`), the lost copy is aborted and the attempt fails as
        `no_endpoint`, so the sample is left for a rerun like every other sample of a dead deployment."""
        body = request.body(attempt)
        monitor = self.liveness
        if monitor is None:
            return await self._attempt(endpoint, body), endpoint, endpoint
        watched = monitor.watch(endpoint.url, body["rid"])
        first = self._heard(monitor, endpoint, body)
        second: asyncio.Task[Any] | None = None
        acquiring: asyncio.Task[Endpoint] | None = None
        try:
            while True:
                state = await _first_lost_or_drain(first, watched)
                if state == "answered":
                    monitor.answered(watched)
                    return first.result(), endpoint, endpoint
                if state == "lost":
                    break
                watched.drain.clear()
                other = self.pool.take_free(watched.drain_to) if watched.drain_to else None
                if other is None:  # the slot went to other work meanwhile: may be asked again
                    watched.drain_asked = False
                    continue
                return await self._drain_race(monitor, endpoint, body, first, watched, other)
            await self.pool.release(endpoint, ok=False, endpoint_fault=True)
            self._lost(endpoint)  # may raise RunStopped: every endpoint is out
            acquiring = asyncio.create_task(self.pool.acquire(request.prompt_ids, avoid=endpoint.url))
            await asyncio.wait({first, acquiring}, return_when=asyncio.FIRST_COMPLETED)
            if first.done():  # the original answered while its hedge waited for a slot: late, not lost
                if acquiring.done() and not acquiring.cancelled() and acquiring.exception() is None:
                    await self.pool.release(acquiring.result(), ok=False, endpoint_fault=False)  # unused slot
                return first.result(), endpoint, None
            try:
                other = acquiring.result()
            except NoEndpointAvailable as exc:
                monitor.spawn_abort(endpoint.url, body["rid"])
                stranded = Failure("no_endpoint", f"lost by {endpoint.url}, no endpoint for its hedge: {exc}", True)
                return stranded, endpoint, None
            hedge_body = body | {"rid": f"{body['rid']}-h"}
            monitor.hedged[other.url] += 1
            hedge_watch = monitor.watch(other.url, hedge_body["rid"], hedge=True)  # never drain-hedged itself
            second = self._heard(monitor, other, hedge_body)
            lost_too = asyncio.create_task(hedge_watch.lost.wait())
            try:
                await asyncio.wait({first, second, lost_too}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                lost_too.cancel()
                monitor.forget(hedge_watch)
            if second.done():  # the hedge ended first: the original is dropped on its server
                if not isinstance(second.result(), Failure):  # a failed hedge is retried like any failure
                    monitor.hedges_won[other.url] += 1
                monitor.spawn_abort(endpoint.url, body["rid"])
                return second.result(), other, other
            monitor.spawn_abort(other.url, hedge_body["rid"])
            if first.done():  # the original answered after all (late, not lost): its answer is kept
                await self.pool.release(other, ok=False, endpoint_fault=False)  # the hedge's slot, unused
                return first.result(), endpoint, None
            monitor.spawn_abort(endpoint.url, body["rid"])  # lost on both endpoints
            self._lost(other)
            lost = Failure("lost", f"lost by {endpoint.url} and by {other.url} (liveness.py)", transient=True)
            return lost, other, other
        finally:
            monitor.forget(watched)
            for task in (first, second, acquiring):
                if task is not None and not task.done():
                    task.cancel()

    async def _drain_race(
        self,
        monitor: LivenessMonitor,
        endpoint: Endpoint,
        body: dict[str, Any],
        first: asyncio.Task[Any],
        watched: Watched,
        other: Endpoint,
    ) -> tuple[tuple[list[int], dict[str, Any]] | Failure, Endpoint, Endpoint | None]:
        """The drain hedge (liveness.py): a copy of a slow request on `other` (whose slot is held), raced against
        the original. The first answer wins and the other copy is aborted; a copy that fails or is lost drops
        out (counted against its endpoint) and the other one is waited for. The loser's slot is released here,
        the winner's is the caller's."""
        hedge_body = body | {"rid": f"{body['rid']}-d"}
        monitor.drain_hedged[other.url] += 1
        hedge_watch = monitor.watch(other.url, hedge_body["rid"], hedge=True)
        second = self._heard(monitor, other, hedge_body)
        copies = {first: (endpoint, watched), second: (other, hedge_watch)}
        last: tuple[Any, Endpoint] | None = None
        try:
            while copies:
                lost = {asyncio.create_task(w.lost.wait()): task for task, (_, w) in copies.items()}
                try:
                    await asyncio.wait(set(copies) | set(lost), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in lost:
                        waiter.cancel()
                for task in [t for t in copies if t.done() or copies[t][1].lost.is_set()]:
                    where, watch = copies.pop(task)
                    if task.done() and not isinstance(task.result(), Failure):
                        for rest, (elsewhere, rest_watch) in copies.items():  # the loser: aborted, slot freed
                            rest.cancel()
                            monitor.spawn_abort(elsewhere.url, rest_watch.rid)
                            await self.pool.release(elsewhere, ok=False, endpoint_fault=False)
                        if task is second:
                            monitor.drain_hedges_won[other.url] += 1
                        return task.result(), where, where
                    if not task.done():  # lost on its server: dropped, its endpoint blamed
                        task.cancel()
                        monitor.spawn_abort(where.url, watch.rid)
                        self._lost(where)
                        last = (Failure("lost", f"lost by {where.url} (liveness.py)", transient=True), where)
                    else:
                        last = (task.result(), where)
                    if copies:  # the other copy still runs: this one's slot is freed as a failure of its own
                        failure = last[0]
                        await self.pool.release(where, ok=False, endpoint_fault=failure.transient)
            assert last is not None
            return last[0], last[1], last[1]  # both failed: the last one's slot is the caller's
        finally:
            monitor.forget(hedge_watch)
            if not second.done():
                second.cancel()

    def drained(self) -> None:
        """The run has handed out its last request: idle replicas may take drain hedges (liveness.py)."""
        if self.liveness is not None:
            self.liveness.drain(self.pool.free_slots)

    async def generate(self, request: SampleRequest) -> SampleResult:
        result = SampleResult(request)
        refused = beyond_vocab(request, self.vocab_size) if self.vocab_size is not None else None
        if refused is not None:
            self.stats.failures["id_beyond_model_vocab"] += 1
            self.stats.failed += 1
            result.error, result.retryable = f"id_beyond_model_vocab: {refused}", False
            return result
        avoid: str | None = None  # after a server fault: another endpoint, when there is one
        for attempt in range(1, self.policy.max_attempts + 1):
            try:
                endpoint = await self.pool.acquire(request.prompt_ids, avoid)
            except NoEndpointAvailable as exc:
                self.stats.failures["no_endpoint"] += 1
                result.error, result.retryable = f"no_endpoint: {exc}", True
                break
            self.stats.sent += 1
            outcome, endpoint, held = await self._watched_attempt(endpoint, request, attempt)
            ok = not isinstance(outcome, Failure)
            # A 400 is about this prompt, not the endpoint; everything transient counts against the endpoint.
            if held is not None:
                await self.pool.release(held, ok=ok, endpoint_fault=not ok and outcome.transient)
            result.attempts, result.endpoint = attempt, endpoint.url
            if not isinstance(outcome, Failure):
                output_ids, meta_info = outcome
                verdict = (
                    self.screen.check_answer(endpoint.url, request, output_ids, meta_info) if self.screen else None
                )
                if verdict is not None and verdict.server_fault:  # the model did not give this answer: ask again
                    self.stats.server_faults += 1
                    self.stats.failures[str(verdict.reason)] += 1
                    avoid = endpoint.url
                    if attempt == self.policy.max_attempts:
                        result.error = f"gave up after {attempt} attempts: the last answer had {verdict.reason}"
                        result.retryable = True
                        break
                    self.stats.retries += 1
                    continue
                result.output_ids, result.meta_info = output_ids, meta_info
                result.finish_reason = result.meta_info.get("finish_reason") or {}
                result.reject_reason = verdict.reason if verdict is not None else None
                self.stats.completed += 1
                self.stats.output_tokens += len(result.output_ids)
                return result
            self.stats.failures[outcome.kind] += 1
            if outcome.status in REFUSED_STATUSES and outcome.kind.startswith("http_"):  # the key: stop the run
                raise self.pool.access.refused(endpoint.url.rstrip("/") + "/generate", outcome.status)
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


async def _first_lost_or_drain(attempt: asyncio.Task[Any], watched: Watched) -> str:
    """Wait for the attempt's outcome ("answered"), for the monitor to flag it lost ("lost") or to ask for its
    drain hedge ("drain"); the attempt still runs in the last two cases."""
    flagged = asyncio.create_task(watched.lost.wait())
    drain = asyncio.create_task(watched.drain.wait())
    try:
        await asyncio.wait({attempt, flagged, drain}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        flagged.cancel()
        drain.cancel()
    if attempt.done():
        return "answered"
    return "lost" if watched.lost.is_set() else "drain"
