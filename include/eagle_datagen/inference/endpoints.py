"""Endpoints (SGLang replicas or routers): a concurrency window each, least-outstanding balancing and a
circuit breaker that takes a failing endpoint out and lets one probe request test it back in."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class Endpoint:
    url: str
    window: int  # requests in flight at most
    outstanding: int = 0
    consecutive_failures: int = 0
    open_until: float = 0.0  # breaker open (endpoint out) until this monotonic time
    probing: bool = False  # half-open: one request is testing the endpoint
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


@dataclass
class EndpointPool:
    endpoints: list[Endpoint]
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def total_window(self) -> int:
        return sum(e.window for e in self.endpoints)

    async def acquire(self) -> Endpoint:
        """The available endpoint with the fewest requests in flight; waits while none is available."""
        async with self._changed:
            while True:
                now = time.monotonic()
                candidates = [e for e in self.endpoints if e.available(now)]
                if candidates:
                    chosen = min(candidates, key=lambda e: (e.outstanding / e.window, e.outstanding))
                    chosen.outstanding += 1
                    if chosen.open_until:
                        chosen.probing = True
                    return chosen
                reopen = [e.open_until - now for e in self.endpoints if e.open_until > now]
                timeout = max(0.01, min(reopen)) if reopen else None
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
                if endpoint.open_until:  # a successful probe closes the breaker
                    endpoint.open_until = 0.0
                endpoint.probing = False
                endpoint.consecutive_failures = 0 if ok else endpoint.consecutive_failures
            else:
                endpoint.failures += 1
                endpoint.consecutive_failures += 1
                was_probe = endpoint.probing
                endpoint.probing = False
                if was_probe or endpoint.consecutive_failures >= self.breaker.failures_to_open:
                    excess = max(0, endpoint.consecutive_failures - self.breaker.failures_to_open)
                    open_s = min(self.breaker.max_open_s, self.breaker.open_s * 2**excess)
                    endpoint.open_until = time.monotonic() + open_s
            self._changed.notify_all()

    def describe(self) -> str:
        now = time.monotonic()
        parts = []
        for e in self.endpoints:
            state = "open" if e.open_until > now else "probing" if e.probing else "ok"
            parts.append(f"{e.url} [{state}, {e.outstanding}/{e.window} in flight, {e.served} served]")
        return "; ".join(parts)
