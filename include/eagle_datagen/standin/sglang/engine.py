"""The throughput model: a fixed number of slots, a bounded FIFO queue in front of them, and counters.

A request holds one slot while it "runs" (sleeps for prefill and decode); everything waits on asyncio
futures, never on a busy loop. Busy slot-seconds are integrated on every change of the running count, so
occupancy = busy slot-seconds / (slots x seconds since the first request) is exact, not sampled.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any


class QueueFull(Exception):
    """More than max_queued_requests would be waiting (SGLang answers 503 "The request queue is full.")."""


class SlotPool:
    def __init__(self, slots: int, max_queued: int) -> None:
        self.slots = slots
        self.max_queued = max_queued
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._busy_s = 0.0
        self._changed_at = time.monotonic()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def _set_running(self, running: int) -> None:
        now = time.monotonic()
        self._busy_s += self.running * (now - self._changed_at)
        self._changed_at = now
        self.running = running

    def busy_slot_seconds(self) -> float:
        return self._busy_s + self.running * (time.monotonic() - self._changed_at)

    def reset_busy(self) -> None:
        self._busy_s = 0.0
        self._changed_at = time.monotonic()

    async def acquire(self) -> None:
        if self.running < self.slots and not self._waiters:
            self._set_running(self.running + 1)
            return
        if len(self._waiters) >= self.max_queued:
            raise QueueFull
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # release() hands its slot over: `running` stays counted
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot arrived as we were cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._set_running(self.running - 1)


@dataclass
class SimStats:
    """Counters for /sim/stats and /metrics. Outcomes are per HTTP request, keyed by status or `dropped`."""

    outcomes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    polls: Counter[str] = field(default_factory=Counter)  # other requests ("GET /metrics"): a router's polls
    items: int = 0  # generations finished (a batch item or one of n samples each count once)
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (meta_info.cached_tokens)
    prefill_passes: int = 0  # prompts prefilled: one per generation, plus n > 1's prefill-only pass
    generation_tokens: int = 0
    restarts: int = 0
    aborted: int = 0  # requests ended by POST /abort_request
    first_request_at: float | None = None  # wall clock (time.time())
    last_request_at: float | None = None
    first_request_mono: float | None = None

    def request_arrived(self) -> None:
        now = time.time()
        if self.first_request_at is None:
            self.first_request_at = now
            self.first_request_mono = time.monotonic()
        self.last_request_at = now

    def count_prefill(self, prompt_tokens: int, cached_tokens: int) -> None:
        self.prefill_passes += 1
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens

    def occupancy(self, pool: SlotPool) -> float:
        if self.first_request_mono is None:
            return 0.0
        elapsed = time.monotonic() - self.first_request_mono
        return pool.busy_slot_seconds() / (pool.slots * elapsed) if elapsed > 0 else 0.0

    def to_json(self, pool: SlotPool) -> dict[str, Any]:
        return {
            "requests": {"total": sum(self.outcomes.values()), "by_outcome": dict(self.outcomes)},
            "faults": dict(self.faults),
            "polls": dict(self.polls),
            "generations": self.items,
            "running": pool.running,
            "queued": pool.queued,
            "max_running_requests": pool.slots,
            "max_queued_requests": pool.max_queued,
            "slot_occupancy": self.occupancy(pool),
            "busy_slot_seconds": pool.busy_slot_seconds(),
            "first_request_at": self.first_request_at,
            "last_request_at": self.last_request_at,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "computed_prompt_tokens": self.prompt_tokens - self.cached_tokens,
            "prefill_passes": self.prefill_passes,
            "generation_tokens": self.generation_tokens,
            "restarts": self.restarts,
            "aborted": self.aborted,
        }
