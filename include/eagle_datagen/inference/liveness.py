"""Liveness of outstanding requests: find a request that its server no longer works on, within minutes,
whatever an honest answer may take (a 32k-token reasoning answer takes 20+ minutes, so no timeout can tell).

Each endpoint's own view of its load (SGLang's `GET /v1/loads`: running and waiting requests, summed over
its data-parallel ranks) is polled every `poll_s` and compared with the requests this client has had in
flight there for longer than `grace_s`. When the server counts fewer than the client for `lost_after_s`
on end, the difference is lost inside the server (or on the way): the oldest of those requests are flagged,
and the client sends a hedged copy of each (the same sample identity and seed, its own rid) to another
endpoint; the first answer wins, the other is cancelled and aborted on its server (`POST /abort_request`
with its rid), and the sample is stored once. A request lost again on the hedge's endpoint fails as
`lost` (transient): the endpoint breakers count it, so a replica that keeps losing requests is taken out,
and a deployment that loses everything ends as every other dead deployment does (`give_up_after`).

An endpoint without `/v1/loads` (an older SGLang, a router) is not watched; the run says so once.
Every detection is counted per endpoint (`summary`), for the run's endpoint report.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from eagle_datagen import settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LivenessPolicy:
    # How long the server must count fewer requests than the client before the difference is called lost:
    # the bound on how late a lost request is noticed (settings.py says why this default).
    lost_after_s: float = settings.LOST_AFTER_S
    poll_s: float = 5.0  # how often each endpoint's load is read (the smg router polls every 10 s)
    grace_s: float = 5.0  # younger requests may not have reached the server's count yet
    enabled: bool = True


@dataclass(eq=False)
class Watched:
    """One request in flight, as the monitor sees it."""

    url: str
    rid: str
    started: float = field(default_factory=time.monotonic)
    lost: asyncio.Event = field(default_factory=asyncio.Event)  # set: flagged as lost


# queues a request may sit in besides running and waiting (SGLang 0.5.23's `queues` section): counting them
# can only hide a loss, never invent one
_OTHER_QUEUES = ("grammar", "paused", "retracted")


def _counted(load: dict[str, Any]) -> int:
    """Requests one data-parallel rank of the server holds, as its /v1/loads entry says."""
    queues = load.get("queues") or {}
    others = sum(int(queues.get(q, 0)) for q in _OTHER_QUEUES)
    return int(load["num_running_reqs"]) + int(load["num_waiting_reqs"]) + others


class LivenessMonitor:
    def __init__(self, policy: LivenessPolicy, urls: list[str]) -> None:
        self.policy = policy
        self._urls = urls
        # its own connections: the generation sessions' are all taken when every request there is lost
        self._session: aiohttp.ClientSession | None = None
        self._watched: dict[str, set[Watched]] = {url: set() for url in urls}
        self._short_since: dict[str, float] = {}
        self.unwatched: set[str] = set()  # endpoints without /v1/loads
        self.detected: Counter[str] = Counter()  # requests flagged as lost, per endpoint
        self.hedged: Counter[str] = Counter()  # hedged copies sent, per endpoint they went to
        self.hedges_won: Counter[str] = Counter()  # hedged copies that answered first, per endpoint
        self.aborted: Counter[str] = Counter()  # /abort_request sent for a cancelled copy, per endpoint
        self._task: asyncio.Task[None] | None = None
        self._aborts: set[asyncio.Task[None]] = set()

    def watch(self, url: str, rid: str) -> Watched:
        entry = Watched(url, rid)
        self._watched.setdefault(url, set()).add(entry)
        return entry

    def forget(self, entry: Watched) -> None:
        self._watched.get(entry.url, set()).discard(entry)

    def start(self) -> None:
        if self.policy.enabled and self._task is None:
            connector = aiohttp.TCPConnector(limit_per_host=2)
            self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10))
            self._task = asyncio.create_task(self._run(), name="liveness")

    def spawn_abort(self, url: str, rid: str) -> None:
        task = asyncio.create_task(self.abort(url, rid))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    async def stop(self) -> None:
        """Stop polling; the aborts still on their way are awaited (each is bounded), so none is left behind."""
        if self._aborts:
            await asyncio.gather(*self._aborts, return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.policy.poll_s)
            now = time.monotonic()
            busy = [
                url
                for url, entries in self._watched.items()
                if url not in self.unwatched and any(now - e.started >= self.policy.grace_s for e in entries)
            ]
            loads = await asyncio.gather(*(self._server_load(url) for url in busy))
            for url, load in zip(busy, loads, strict=True):
                if load is not None:
                    self.compare(url, load, time.monotonic())

    async def _server_load(self, url: str) -> int | None:
        """Requests the server is running or has waiting; None when it cannot say (then it is not watched)."""
        assert self._session is not None
        try:
            async with self._session.get(url.rstrip("/") + "/v1/loads") as response:
                if response.status == 404:
                    self.unwatched.add(url)
                    log.warning("SGLang at %s has no /v1/loads: lost requests there are not detected", url)
                    return None
                if response.status != 200:
                    return None
                body = await response.json(content_type=None)
            return sum(_counted(load) for load in body["loads"])
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError):
            return None  # a busy or restarting server: asked again at the next poll

    def compare(self, url: str, load: int, now: float) -> list[Watched]:
        """Flag the requests that the server's `load` no longer counts, once the shortfall has lasted
        lost_after_s; returns those flagged now."""
        old = sorted((e for e in self._watched.get(url, ()) if now - e.started >= self.policy.grace_s),
                     key=lambda e: e.started)  # fmt: skip
        flagged = sum(e.lost.is_set() for e in old)
        missing = len(old) - load - flagged
        if missing <= 0:
            self._short_since.pop(url, None)
            return []
        since = self._short_since.setdefault(url, now)
        if now - since < self.policy.lost_after_s:
            return []
        self._short_since.pop(url, None)
        lost = [e for e in old if not e.lost.is_set()][:missing]
        for entry in lost:
            entry.lost.set()
        self.detected[url] += len(lost)
        log.warning(
            "SGLang at %s counts %d requests, this run has %d there for over %.0f s: %d lost for %.0f s, "
            "sent again elsewhere (oldest rid %s)",
            url,
            load,
            len(old),
            self.policy.grace_s,
            len(lost),
            now - since,
            lost[0].rid,
        )
        return lost

    async def abort(self, url: str, rid: str) -> None:
        """Ask the server to drop a copy nobody waits for any more (best effort: it may be gone already)."""
        self.aborted[url] += 1
        if self._session is None:
            return
        try:
            async with self._session.post(url.rstrip("/") + "/abort_request", json={"rid": rid}) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError):
            pass

    def summary(self) -> dict[str, dict[str, Any]]:
        urls = sorted(set(self.detected) | set(self.hedged) | set(self.unwatched))
        return {
            url: {
                "lost_detected": self.detected[url],
                "hedges_sent": self.hedged[url],
                "hedges_won": self.hedges_won[url],
                "aborted": self.aborted[url],
                "watched": url not in self.unwatched,
            }
            for url in urls
        }
