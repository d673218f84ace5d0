"""Endpoints (SGLang replicas or routers): a concurrency window each, least-outstanding balancing and a
circuit breaker that takes a failing endpoint out and lets one probe request test it back in."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Protocol


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

    def available(self, now: float) -> bool:
        if self.outstanding >= self.window:
            return False
        if self.open_until == 0.0:
            return True
        return now >= self.open_until and not self.probing  # half-open: exactly one probe


@dataclass
class BreakerPolicy:
    failures_to_open: int = 5
    open_s: float = 2.0
    max_open_s: float = 60.0
    # With every endpoint out and no success for this long, stop waiting: the samples left are given back
    # as retryable (a rerun picks them up) instead of the run hanging on a dead deployment.
    give_up_after_s: float = 600.0


class NoEndpointAvailable(Exception):
    """Every endpoint has been failing for longer than the breaker's give_up_after_s."""


class EndpointGate(Protocol):
    """The content breaker (content_breaker.py): endpoints whose answers are wrong stay out for the run."""

    def is_available(self, endpoint: Endpoint) -> bool: ...


@dataclass
class EndpointPool:
    endpoints: list[Endpoint]
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    last_ok: float = field(default_factory=time.monotonic)
    gate: EndpointGate | None = None

    def usable(self, avoid: str | None = None) -> list[Endpoint]:
        """The endpoints the gate admits; without `avoid` (the one whose answer was wrong) when others are."""
        admitted = [e for e in self.endpoints if self.gate is None or self.gate.is_available(e)]
        return [e for e in admitted if e.url != avoid] or admitted

    @property
    def total_window(self) -> int:
        return sum(e.window for e in self.endpoints)

    async def acquire(self, avoid: str | None = None) -> Endpoint:
        """The available endpoint with the fewest requests in flight; waits while none is available."""
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

    async def release(self, endpoint: Endpoint, ok: bool, endpoint_fault: bool) -> None:
        """`endpoint_fault`: the failure says the endpoint is unwell (not, say, a 400 for a bad prompt)."""
        async with self._changed:
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
            self._changed.notify_all()

    def describe(self) -> str:
        now = time.monotonic()
        parts = []
        for e in self.endpoints:
            state = "open" if e.open_until > now else "probing" if e.probing else "ok"
            parts.append(f"{e.url} [{state}, {e.outstanding}/{e.window} in flight, {e.served} served]")
        return "; ".join(parts)
