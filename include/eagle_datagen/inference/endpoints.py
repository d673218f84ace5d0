"""Endpoints (SGLang replicas or routers): a concurrency window each, a circuit breaker that takes a failing
endpoint out and lets one probe request test it back in, and the choice of endpoint per request.

Two ways to choose. Least outstanding: the endpoint with the most room, whatever the prompt. Prefix affinity
(`affinity`, with several replica URLs): the replica that `inference/affinity.py` picks for the prompt's
leading ids; a request whose replica has no room waits in that replica's queue, and a replica whose window
would fall below `steal_below` of its size while others have requests waiting takes the oldest request
waiting elsewhere, so affinity never leaves slots idle. With one URL (a router, whose `cache_aware` policy
does the affinity itself, or a single server) there is nothing to choose and requests go out in order.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from eagle_datagen import settings
from eagle_datagen.inference.access import NO_ACCESS, ServerAccess
from eagle_datagen.inference.affinity import PrefixAffinity, prefix_keys


@dataclass
class Endpoint:
    url: str
    window: int  # requests in flight at most
    outstanding: int = 0
    consecutive_failures: int = 0
    open_until: float = 0.0  # breaker open (endpoint out) until this monotonic time
    probing: bool = False  # half-open: one request is testing the endpoint
    trips: int = 0  # times the breaker opened in a row without a success since; doubles the open time
    served: int = 0
    failures: int = 0
    # affinity only: requests waiting for this endpoint (their future, prefix keys, prompt length), oldest first
    waiters: deque[tuple[asyncio.Future[Endpoint | None], list[int], int]] = field(default_factory=deque, repr=False)

    def in_service(self, now: float) -> bool:
        """Not taken out: breaker closed, or half-open with its one probe not yet sent."""
        return self.open_until == 0.0 or (now >= self.open_until and not self.probing)

    def available(self, now: float) -> bool:
        return self.outstanding < self.window and self.in_service(now)

    @property
    def load(self) -> int:
        return self.outstanding + len(self.waiters)


@dataclass
class BreakerPolicy:
    failures_to_open: int = 5
    open_s: float = 2.0
    max_open_s: float = 60.0
    # With every endpoint out and no success for this long, stop waiting: the samples left are given back
    # as retryable (a rerun picks them up) instead of the run hanging on a dead deployment.
    give_up_after_s: float = settings.GIVE_UP_AFTER_S


class NoEndpointAvailable(Exception):
    """Every endpoint has been failing for longer than the breaker's give_up_after_s."""


class EndpointGate(Protocol):
    """The content breaker (content_breaker.py): endpoints whose answers are wrong stay out for the run."""

    def is_available(self, endpoint: Endpoint) -> bool: ...


@dataclass
class EndpointPool:
    endpoints: list[Endpoint]
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    affinity: PrefixAffinity | None = None  # None: least outstanding
    steal_below: float = 0.8  # affinity: an endpoint under this share of its window takes work waiting elsewhere
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    last_ok: float = field(default_factory=time.monotonic)
    gate: EndpointGate | None = None  # the content breaker: endpoints it ejected stay out for the run
    stolen: int = 0  # affinity: requests that went elsewhere than their replica to keep slots busy
    access: ServerAccess = NO_ACCESS  # the deployment's API key and CA bundle: every session to it carries them

    def __post_init__(self) -> None:
        self._by_url = {e.url: e for e in self.endpoints}
        if self.affinity is not None and len(self.endpoints) < 2:
            self.affinity = None  # one endpoint: nothing to choose (behind a router, the router chooses)

    def admitted(self, endpoint: Endpoint) -> bool:
        return self.gate is None or self.gate.is_available(endpoint)

    def usable(self, avoid: str | None = None) -> list[Endpoint]:
        """The endpoints the gate admits; without `avoid` (the one whose answer was wrong) when others are."""
        admitted = [e for e in self.endpoints if self.admitted(e)]
        return [e for e in admitted if e.url != avoid] or admitted

    @property
    def total_window(self) -> int:
        return sum(e.window for e in self.endpoints)

    @property
    def workers(self) -> int:
        """Requests to keep assigned: with affinity, half a window more, so that each replica has its own waiting."""
        return self.total_window if self.affinity is None else self.total_window + self.total_window // 2

    def in_service(self, endpoint: Endpoint, now: float) -> bool:
        """The availability predicate affinity consults: the transport breaker's and the content breaker's."""
        return endpoint.in_service(now) and self.admitted(endpoint)

    async def acquire(self, prompt_ids: Sequence[int] | None = None, avoid: str | None = None) -> Endpoint:
        """An endpoint for one request (counted in flight until `release`); waits while none has room.
        `avoid`: the endpoint whose answer to this request was a server fault; the resend goes elsewhere
        (least outstanding among the others), when there is another."""
        if self.affinity is not None and prompt_ids is not None and avoid is None:
            return await self._acquire_affine(prefix_keys(prompt_ids), len(prompt_ids))
        async with self._changed:
            while True:
                now = time.monotonic()
                usable = self.usable(avoid)
                if not usable:
                    raise NoEndpointAvailable("every endpoint was taken out by the content breaker")
                candidates = [e for e in usable if e.available(now)]
                if candidates:
                    chosen = min(candidates, key=lambda e: (e.outstanding / e.window, e.outstanding))
                    chosen.outstanding += 1
                    if chosen.open_until:
                        chosen.probing = True
                    return chosen
                all_out = all(e.open_until for e in usable)
                give_up_at = self.last_ok + self.breaker.give_up_after_s
                if all_out and now > give_up_at:
                    raise NoEndpointAvailable(
                        f"every endpoint has failed for {now - self.last_ok:.0f}s: {self.describe()}"
                    )
                wake = [e.open_until for e in usable if e.open_until > now]
                if all_out:
                    wake.append(give_up_at)
                timeout = max(0.01, min(wake) - now) if wake else None
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout)
                except TimeoutError:
                    pass

    def free_slots(self, url: str) -> int:
        """The requests `url` can take now without anyone waiting for a slot: 0 when it is out, full, or has
        waiters (the drain hedge takes only what nothing else would use)."""
        endpoint = self._by_url.get(url)
        if endpoint is None or endpoint.waiters or not self.in_service(endpoint, time.monotonic()):
            return 0
        return max(0, endpoint.window - endpoint.outstanding)

    def take_free(self, url: str) -> Endpoint | None:
        """A slot of `url` for a drain hedge if it has one free (`free_slots`), else None; released as any."""
        return self._take(self._by_url[url]) if self.free_slots(url) > 0 else None

    def _load_of(self, url: str) -> int:
        return self._by_url[url].load

    def _take(self, endpoint: Endpoint) -> Endpoint:
        endpoint.outstanding += 1
        if endpoint.open_until:
            endpoint.probing = True
        return endpoint

    def _idle(self, now: float, free_to_move: bool) -> Endpoint | None:
        """An endpoint in service that nobody waits for, with room (a request free to move: moving it splits
        no prompt or conversation, `PrefixAffinity.free_to_move`) or under steal_below of its window (any
        request: its slots would idle)."""
        for e in self.endpoints:
            limit = e.window if free_to_move else self.steal_below * e.window
            if not e.waiters and self.in_service(e, now) and e.outstanding < limit:
                return e
        return None

    async def _acquire_affine(self, keys: list[int], length: int) -> Endpoint:
        affinity = self.affinity
        assert affinity is not None
        while True:
            now = time.monotonic()
            name = affinity.choose(keys, self._load_of, lambda url, now=now: self.in_service(self._by_url[url], now))
            if name is None:  # every endpoint is out: wait for a breaker to half-open, or give up
                if not self.usable():
                    raise NoEndpointAvailable("every endpoint was taken out by the content breaker")
                self._check_give_up(now)
                wake = [e.open_until for e in self.endpoints if e.open_until > now]
                wake.append(self.last_ok + self.breaker.give_up_after_s)
                await asyncio.sleep(max(0.01, min(wake) - now))
                continue
            target = self._by_url[name]
            if target.available(now) and not target.waiters:
                return self._take(target)
            idle = self._idle(now, free_to_move=affinity.free_to_move(keys))
            if idle is not None:
                self.stolen += 1
                affinity.rehome(keys, idle.url)  # its prompt's next samples follow it there
                return self._take(idle)
            waiter: asyncio.Future[Endpoint | None] = asyncio.get_running_loop().create_future()
            entry = (waiter, keys, length)
            target.waiters.append(entry)
            try:
                handed = await waiter  # an endpoint whose slot was handed over, or None: choose again
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.result() is not None:
                    self._free_slot(waiter.result())  # the slot arrived as we were cancelled: pass it on
                elif entry in target.waiters:
                    target.waiters.remove(entry)
                raise
            if handed is not None:
                return handed

    def _hand_over(self, endpoint: Endpoint, donor: Endpoint, anyone: bool = True) -> bool:
        """Give a live waiter of `donor` a slot of `endpoint` (counts are the caller's): the oldest when the
        slot is the donor's own; else, newest first, one free to move (moving it splits nothing), or, with
        `anyone`, the one with the shortest prompt (the least to prefill again on `endpoint`); a moved
        waiter's prompt follows it to `endpoint`."""
        own = donor is endpoint
        waiters = donor.waiters
        if not own and self.affinity is not None:
            free_to_move = self.affinity.free_to_move
            chosen = next((e for e in reversed(waiters) if not e[0].done() and free_to_move(e[1])), None)
            if chosen is None:
                if not anyone:
                    return False
                chosen = min((e for e in waiters if not e[0].done()), key=lambda e: e[2], default=None)
                if chosen is None:
                    return False
            waiters.remove(chosen)
            waiters.append(chosen)  # taken below
        while waiters:
            waiter, keys, _ = waiters.popleft() if own else waiters.pop()
            if not waiter.done():
                if endpoint.open_until:
                    endpoint.probing = True  # half-open: this request is its probe
                if not own and self.affinity is not None:
                    self.stolen += 1
                    self.affinity.rehome(keys, endpoint.url)
                waiter.set_result(endpoint)
                return True
        return False

    def _feed_idle(self, now: float) -> None:
        """Endpoints that nobody waits for take requests waiting elsewhere: any room at all for a request whose
        move splits nothing (free to move), under steal_below of the window (slots about to idle,
        at the end of a run too) for any. Runs on every release, so a drained endpoint is fed as well."""
        for e in self.endpoints:
            while not e.waiters and e.outstanding < e.window and self.in_service(e, now):
                donor = max(self.endpoints, key=lambda d: len(d.waiters))
                if donor is e or not donor.waiters:
                    return
                if not self._hand_over(e, donor, anyone=e.outstanding < self.steal_below * e.window):
                    break
                e.outstanding += 1

    def _check_give_up(self, now: float) -> None:
        if now > self.last_ok + self.breaker.give_up_after_s:
            raise NoEndpointAvailable(f"every endpoint has failed for {now - self.last_ok:.0f}s: {self.describe()}")

    def _free_slot(self, endpoint: Endpoint) -> None:
        """A slot of `endpoint` is free: its oldest waiter takes it; then idle endpoints are fed (`_feed_idle`).
        A taken-out endpoint's waiters choose again (its keys go to the next replica on the ring)."""
        now = time.monotonic()
        if self.in_service(endpoint, now):
            if not self._hand_over(endpoint, endpoint):  # handed over: it stays counted in flight
                endpoint.outstanding -= 1
        else:
            waiters, endpoint.waiters = endpoint.waiters, deque()
            for waiter, _, _ in waiters:
                if not waiter.done():
                    waiter.set_result(None)
            endpoint.outstanding -= 1
        self._feed_idle(now)

    async def release(self, endpoint: Endpoint, ok: bool, endpoint_fault: bool) -> None:
        """`endpoint_fault`: the failure says the endpoint is unwell (not, say, a 400 for a bad prompt)."""
        async with self._changed:
            if self.affinity is None:
                endpoint.outstanding -= 1
            if ok or not endpoint_fault:
                if ok:
                    endpoint.served += 1
                    self.last_ok = time.monotonic()
                if endpoint.open_until:  # a successful probe closes the breaker
                    endpoint.open_until = 0.0
                endpoint.probing = False
                if ok:
                    endpoint.consecutive_failures = endpoint.trips = 0
            else:
                now = time.monotonic()
                endpoint.failures += 1
                endpoint.consecutive_failures += 1
                was_probe, endpoint.probing = endpoint.probing, False
                # Failures of requests sent before the breaker opened do not extend it; a failed probe does.
                tripped = endpoint.consecutive_failures >= self.breaker.failures_to_open
                if was_probe or (tripped and endpoint.open_until <= now):
                    endpoint.trips += 1
                    open_s = min(self.breaker.max_open_s, self.breaker.open_s * 2 ** (endpoint.trips - 1))
                    endpoint.open_until = now + open_s
            if self.affinity is not None:
                self._free_slot(endpoint)  # after the breaker's verdict: a tripped endpoint hands its waiters on
            self._changed.notify_all()

    def describe(self) -> str:
        now = time.monotonic()
        parts = []
        for e in self.endpoints:
            state = "open" if e.open_until > now else "probing" if e.probing else "ok"
            parts.append(f"{e.url} [{state}, {e.outstanding}/{e.window} in flight, {e.served} served]")
        return "; ".join(parts)
