"""Liveness of outstanding requests: find a request that its server no longer works on, within minutes,
whatever an honest answer may take (a 32k-token reasoning answer takes 20+ minutes, so no timeout can tell).

Each endpoint's own view of its load (SGLang's `GET /v1/loads`: running and waiting requests, summed over its
data-parallel ranks) is polled every `poll_s` and compared with the requests this client has in flight there. When
the server counts fewer than the client for `lost_after_s` on end (polls whose count may still hold requests that
just ended do not break the run; a shortfall is flagged on two polls in a row), the difference is lost inside the
server (or on the way): that many of the oldest requests (those in flight for longer than `grace_s`) are flagged,
and the client sends a hedged copy of each (the same sample identity and seed, its own rid) to another endpoint; the
first answer wins, the other is cancelled and aborted on its server (`POST /abort_request` with its rid), and the
sample is stored once. A request lost again on the hedge's endpoint fails as `lost` (transient): the endpoint
breakers count it, so a replica that keeps losing requests is taken out, and a deployment that loses everything ends
as every other dead deployment does (`give_up_after`).

An endpoint whose `/v1/loads` cannot be read is watched by probes instead: one without it (a 404: an older
SGLang, a router) at once, one whose `/v1/loads` fails `failures_to_probe` polls in a row (it errors, or hangs
as it does when the scheduler is stuck: SGLang asks the scheduler for it) with a warning naming it, until it
answers again. Probe: when no request there has ended for `lost_after_s`, `GET /health_generate` (SGLang
answers 200 as soon as its scheduler shows any output, 503 after 20 s without; a busy server does not run
the probe, so it costs nothing); `probe_failures` failed probes in a row mean its scheduler has stopped, and
every request there past its grace is flagged lost. A probe cannot find one request lost by a server that
still works, which only the count can. The endpoint report records how each endpoint was watched
(`watched_by`), what failed, and every detection (`summary`).

The drain hedge: once the run has handed out its last request (`drain`), replicas fall idle one by one while
the last requests run elsewhere, and the run waits for its slowest one. Then each poll, the oldest requests in
flight for longer than `drain_hedge_factor` x the run's median answer time (at least `drain_hedge_min_s`) get a
copy on a replica that holds none of the run's own requests any more and has free slots (same sample identity
and seed, rid `-d`); the first answer wins and the other copy is aborted, as for a lost request, but the
original's replica is not blamed: it still works, only slower. Each request is hedged at most once. A hedge
costs an otherwise idle replica's time.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from eagle_datagen import settings
from eagle_datagen.inference.access import NO_ACCESS, ServerAccess

log = logging.getLogger(__name__)
BY_LOADS = "v1/loads"  # `watched_by`: the server's count compared with the run's
BY_PROBES = "health_generate"  # `watched_by`: probes of an endpoint whose requests went quiet


@dataclass(frozen=True)
class LivenessPolicy:
    # How long the server must count fewer requests than the client before the difference is called lost:
    # the bound on how late a lost request is noticed (settings.py says why this default).
    lost_after_s: float = settings.LOST_AFTER_S
    poll_s: float = 5.0  # how often each endpoint's load is read (the smg router polls every 10 s)
    grace_s: float = 5.0  # younger requests may not have reached the server's count yet
    enabled: bool = True
    failures_to_probe: int = 3  # /v1/loads polls failing in a row before the endpoint is watched by probes
    probe_failures: int = 2  # failed /health_generate probes in a row that mean the scheduler has stopped
    # one /v1/loads poll or probe: SGLang's /health_generate gives up after 20 s without scheduler output
    request_timeout_s: float = 30.0
    # The drain hedge (see above): a request in flight for longer than this many times the run's median
    # answer time, and at least drain_hedge_min_s, gets a copy on an idle replica once the run is draining.
    drain_hedge: bool = True
    drain_hedge_factor: float = 2.0
    drain_hedge_min_s: float = 30.0


@dataclass(eq=False)
class Watched:
    """One request in flight, as the monitor sees it."""

    url: str
    rid: str
    started: float = field(default_factory=time.monotonic)
    lost: asyncio.Event = field(default_factory=asyncio.Event)  # set: flagged as lost
    hedge: bool = False  # a hedged copy itself: never hedged again, and not the run's own work on its replica
    drain: asyncio.Event = field(default_factory=asyncio.Event)  # set: a drain hedge to `drain_to` is asked for
    drain_to: str | None = None
    drain_asked: bool = False  # asked once: never again (a copy that found no slot may be asked once more)


@dataclass
class _Endpoint:
    """What the monitor knows of one endpoint."""

    heard_at: float  # the last time an attempt there ended with anything from the server (an answer, an error)
    no_loads: bool = False  # /v1/loads is 404: watched by probes for the run
    load_failures: int = 0  # /v1/loads polls failed in a row
    failed_probes: int = 0  # /health_generate probes failed in a row
    probed_at: float = 0.0
    watched_by: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)  # loads_failed, probes, probes_failed


# queues a request may sit in besides running and waiting (SGLang 0.5.23's `queues` section): counting them
# can only hide a loss, never invent one
_OTHER_QUEUES = ("grammar", "paused", "retracted")


def _counted(load: dict[str, Any]) -> int:
    """Requests one data-parallel rank of the server holds, as its /v1/loads entry says."""
    queues = load.get("queues") or {}
    others = sum(int(queues.get(q, 0)) for q in _OTHER_QUEUES)
    return int(load["num_running_reqs"]) + int(load["num_waiting_reqs"]) + others


class LivenessMonitor:
    def __init__(self, policy: LivenessPolicy, urls: list[str], access: ServerAccess = NO_ACCESS) -> None:
        self.policy = policy
        self._urls = urls
        self._access = access  # the deployment's key: /v1/loads and /abort_request want it
        # its own connections: the generation sessions' are all taken when every request there is lost
        self._session: aiohttp.ClientSession | None = None
        self._watched: dict[str, set[Watched]] = {url: set() for url in urls}
        now = time.monotonic()
        self._endpoints: dict[str, _Endpoint] = {url: _Endpoint(heard_at=now) for url in urls}
        self._short_since: dict[str, float] = {}
        # when requests there last ended (the server may still count those for a moment: see compare)
        self._ended: dict[str, deque[float]] = {}
        self._short_last: set[str] = set()  # endpoints whose last poll was short
        self.detected: Counter[str] = Counter()  # requests flagged as lost, per endpoint
        self.hedged: Counter[str] = Counter()  # hedged copies sent, per endpoint they went to
        self.hedges_won: Counter[str] = Counter()  # hedged copies that answered first, per endpoint
        self.aborted: Counter[str] = Counter()  # /abort_request sent for a cancelled copy, per endpoint
        self.drain_hedged: Counter[str] = Counter()  # drain hedges sent, per endpoint they went to
        self.drain_hedges_won: Counter[str] = Counter()  # drain hedges that answered first, per endpoint
        self._answer_s: deque[float] = deque(maxlen=4096)  # the run's recent answer times (originals)
        self._free_slots: Callable[[str], int] | None = None  # set by `drain`: the run hands out nothing more
        self._task: asyncio.Task[None] | None = None
        self._aborts: set[asyncio.Task[None]] = set()

    def _endpoint(self, url: str) -> _Endpoint:
        return self._endpoints.setdefault(url, _Endpoint(heard_at=time.monotonic()))

    def watch(self, url: str, rid: str, hedge: bool = False) -> Watched:
        entry = Watched(url, rid, hedge=hedge)
        self._watched.setdefault(url, set()).add(entry)
        return entry

    def forget(self, entry: Watched, at: float | None = None) -> None:
        watched = self._watched.get(entry.url, set())
        if entry in watched:
            watched.discard(entry)
            ended = self._ended.setdefault(entry.url, deque(maxlen=4096))
            ended.append(time.monotonic() if at is None else at)

    def answered(self, entry: Watched) -> None:
        """The request answered (an original, in its own time): its duration sets the drain hedge's threshold."""
        if not entry.hedge:
            self._answer_s.append(time.monotonic() - entry.started)

    def drain(self, free_slots: Callable[[str], int]) -> None:
        """The run has handed out its last request: from now on, idle replicas take drain hedges.
        `free_slots(url)`: the requests that endpoint can take now (0 when out of service or busy)."""
        if self.policy.drain_hedge:
            self._free_slots = free_slots

    def drain_hedge_after_s(self) -> float:
        median = statistics.median(self._answer_s) if self._answer_s else 0.0
        return max(self.policy.drain_hedge_min_s, self.policy.drain_hedge_factor * median)

    def ask_drain_hedges(self, now: float) -> list[Watched]:
        """Once draining: the oldest requests past the threshold, each assigned a replica that holds none of the
        run's own requests and has free slots (at most one copy per free slot); returns those asked now."""
        if self._free_slots is None:
            return []
        idle = {
            url: self._free_slots(url)
            for url, entries in self._watched.items()
            if not any(not e.hedge for e in entries)
        }
        idle = {url: free for url, free in idle.items() if free > 0}
        if not idle:
            return []
        after = self.drain_hedge_after_s()
        waiting = sorted(
            (
                e
                for entries in self._watched.values()
                for e in entries
                if not e.hedge and not e.drain_asked and not e.lost.is_set() and now - e.started >= after
            ),
            key=lambda e: e.started,
        )
        asked = []
        for entry in waiting:
            target = max((u for u in idle if u != entry.url and idle[u] > 0), key=lambda u: idle[u], default=None)
            if target is None:
                break
            idle[target] -= 1
            entry.drain_asked, entry.drain_to = True, target
            entry.drain.set()
            asked.append(entry)
        if asked:
            log.info(
                "draining: %d request(s) in flight for over %.0f s (the run's median answer x %g) get a copy on an "
                "idle replica (oldest rid %s)",
                len(asked),
                after,
                self.policy.drain_hedge_factor,
                asked[0].rid,
            )
        return asked

    def heard_from(self, url: str) -> None:
        """An attempt there ended with something from the server: it is not stuck (what probes wait for)."""
        self._endpoint(url).heard_at = time.monotonic()

    def start(self) -> None:
        if self.policy.enabled and self._task is None:
            timeout = aiohttp.ClientTimeout(total=self.policy.request_timeout_s)
            self._session = self._access.session(connector={"limit_per_host": 2}, timeout=timeout)
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
        """Every poll_s, a check of each busy endpoint whose last check has ended: each on its own, so that one
        slow to answer (a stuck scheduler's /v1/loads hangs) delays nobody else's."""
        checks: dict[str, asyncio.Task[None]] = {}
        try:
            while True:
                await asyncio.sleep(self.policy.poll_s)
                now = time.monotonic()
                for url, entries in self._watched.items():
                    running = checks.get(url)
                    if (running is None or running.done()) and any(self._past_grace(e, now) for e in entries):
                        checks[url] = asyncio.create_task(self._check(url), name=f"liveness {url}")
                self.ask_drain_hedges(now)
        finally:
            for task in checks.values():
                task.cancel()
            await asyncio.gather(*checks.values(), return_exceptions=True)

    def _past_grace(self, entry: Watched, now: float) -> bool:
        return now - entry.started >= self.policy.grace_s

    async def _check(self, url: str) -> None:
        """One poll of one busy endpoint: its count, or (when that cannot be read) a probe."""
        endpoint = self._endpoint(url)
        if not endpoint.no_loads:
            asked = time.monotonic()
            load = await self._server_load(url, endpoint)
            if load is not None:
                endpoint.watched_by.add(BY_LOADS)
                self.compare(url, load, time.monotonic(), asked=asked)
                return
        if endpoint.no_loads or endpoint.load_failures >= self.policy.failures_to_probe:
            endpoint.watched_by.add(BY_PROBES)
            await self._probe_if_quiet(url, endpoint)

    async def _server_load(self, url: str, endpoint: _Endpoint) -> int | None:
        """Requests the server is running or has waiting; None when it cannot say (a 404 for good, else this
        poll: after failures_to_probe in a row, with a warning, the endpoint is watched by probes until its
        /v1/loads answers again)."""
        assert self._session is not None
        try:
            async with self._session.get(url.rstrip("/") + "/v1/loads") as response:
                if response.status == 404:
                    endpoint.no_loads = True
                    log.warning(
                        "SGLang at %s has no /v1/loads: lost requests there are watched by /health_generate probes "
                        "only (a stopped scheduler is found, one request lost by a working server is not)",
                        url,
                    )
                    return None
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}")
                body = await response.json(content_type=None)
            load = sum(_counted(entry) for entry in body["loads"])
        except TimeoutError:
            self._load_failed(url, endpoint, f"no answer within {self.policy.request_timeout_s:.0f} s")
            return None
        except (aiohttp.ClientError, ValueError, KeyError, TypeError) as exc:
            self._load_failed(url, endpoint, f"{type(exc).__name__}: {exc}"[:200])
            return None
        if endpoint.load_failures >= self.policy.failures_to_probe:
            log.warning("SGLang at %s answers /v1/loads again: its count is compared again", url)
        endpoint.load_failures = 0
        return load

    def _load_failed(self, url: str, endpoint: _Endpoint, problem: str) -> None:
        endpoint.load_failures += 1
        endpoint.counts["loads_failed"] += 1
        if endpoint.load_failures == self.policy.failures_to_probe:
            log.warning(
                "SGLang at %s failed /v1/loads %d times in a row (last: %s): lost requests there are watched by "
                "/health_generate probes until it answers again",
                url,
                endpoint.load_failures,
                problem,
            )

    async def _probe_if_quiet(self, url: str, endpoint: _Endpoint) -> None:
        """Probe an endpoint none of whose requests has ended for lost_after_s (at most every quarter of that);
        after probe_failures failed probes in a row, flag every request there past its grace as lost."""
        now = time.monotonic()
        quiet_s = now - endpoint.heard_at
        if quiet_s < self.policy.lost_after_s or now - endpoint.probed_at < self.policy.lost_after_s / 4:
            return
        endpoint.probed_at = now
        endpoint.counts["probes"] += 1
        problem = await self._health_generate(url)
        if problem is None:
            endpoint.failed_probes = 0
            return
        endpoint.failed_probes += 1
        endpoint.counts["probes_failed"] += 1
        if endpoint.failed_probes < self.policy.probe_failures:
            return
        endpoint.failed_probes = 0
        now = time.monotonic()
        lost = [e for e in self._watched.get(url, ()) if self._past_grace(e, now) and not e.lost.is_set()]
        self._flag(url, lost)
        if lost:
            log.warning(
                "SGLang at %s failed /health_generate %d times in a row (last: %s) and no request there ended for "
                "%.0f s: its scheduler seems stuck; %d requests there are lost, sent again elsewhere",
                url,
                self.policy.probe_failures,
                problem,
                quiet_s,
                len(lost),
            )

    async def _health_generate(self, url: str) -> str | None:
        """None when the server's scheduler answered the probe; else what went wrong."""
        assert self._session is not None
        try:
            async with self._session.get(url.rstrip("/") + "/health_generate") as response:
                await response.read()
                return None if response.status == 200 else f"/health_generate answered {response.status}"
        except TimeoutError:
            return f"/health_generate gave no answer within {self.policy.request_timeout_s:.0f} s"
        except aiohttp.ClientError as exc:
            return f"/health_generate failed ({type(exc).__name__}: {exc})"[:200]

    def _flag(self, url: str, lost: list[Watched]) -> None:
        for entry in lost:
            entry.lost.set()
        self.detected[url] += len(lost)

    def compare(self, url: str, load: int, now: float, asked: float | None = None) -> list[Watched]:
        """Flag the requests that the server's `load` (asked for at `asked`, read at `now`) no longer counts,
        once the shortfall has lasted lost_after_s; returns those flagged now."""
        entries = self._watched.get(url, set())
        old = sorted((e for e in entries if self._past_grace(e, now)), key=lambda e: e.started)
        # Every request in flight there is compared, the young too: the server counts the ones it has received,
        # so comparing only the old would let each new request hide a lost one, and a busy replica always has
        # new ones. A request still on its way shows as a shortfall for a moment, far less than lost_after_s.
        missing = len(entries) - load - sum(e.lost.is_set() for e in entries)
        if missing <= 0:
            # A count taken as requests end may still hold some the run has heard back from (the answer comes
            # before the scheduler lets go of it, and the count is older than `now`): those hide a lost one for
            # a poll. On a busy replica a request ends every poll, so such a poll must not restart the clock, or
            # a loss there is never found; only a poll that no recent end can explain clears the shortfall.
            if missing + self._ended_since(url, (now if asked is None else asked) - self.policy.grace_s) <= 0:
                self._short_since.pop(url, None)
            self._short_last.discard(url)
            return []
        since = self._short_since.setdefault(url, now)
        # Flagged on two short polls in a row only: an answer still on its way back shows as a shortfall for
        # one poll, and with the clock kept through hidden polls, one such poll alone would hedge a live request.
        confirmed = url in self._short_last
        self._short_last.add(url)
        lost = [e for e in old if not e.lost.is_set()][:missing]  # only requests past their grace are flagged
        if now - since < self.policy.lost_after_s or not lost or not confirmed:
            return []
        self._short_since.pop(url, None)
        self._short_last.discard(url)
        self._flag(url, lost)
        log.warning(
            "SGLang at %s counts %d requests, this run has %d there: %d lost for %.0f s, sent again elsewhere "
            "(oldest rid %s)",
            url,
            load,
            len(entries),
            len(lost),
            now - since,
            lost[0].rid,
        )
        return lost

    def _ended_since(self, url: str, start: float) -> int:
        ended = self._ended.get(url, ())
        count = 0
        for at in reversed(ended):
            if at < start:
                break
            count += 1
        return count

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
        """Per endpoint: how it was watched (`watched_by`: "v1/loads" while its count was compared,
        "health_generate" while it was watched by probes instead; empty when it never had a request past its
        grace), what failed, and what was found."""
        urls = sorted(
            set(self._endpoints) | set(self.detected) | set(self.hedged) | set(self.aborted) | set(self.drain_hedged)
        )
        found = {}
        for url in urls:
            endpoint = self._endpoint(url)
            found[url] = {
                "lost_detected": self.detected[url],
                "hedges_sent": self.hedged[url],
                "hedges_won": self.hedges_won[url],
                "drain_hedges_sent": self.drain_hedged[url],
                "drain_hedges_won": self.drain_hedges_won[url],
                "aborted": self.aborted[url],
                "loads_failed": endpoint.counts["loads_failed"],
                "probes": endpoint.counts["probes"],
                "probes_failed": endpoint.counts["probes_failed"],
                "watched_by": sorted(endpoint.watched_by),
                "no_loads": endpoint.no_loads,
            }
        return found
