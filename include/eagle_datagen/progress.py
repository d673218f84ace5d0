"""Progress lines for long work: count, rate and ETA, logged at most every few seconds."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("eagle_datagen.progress")


def _eta(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    def __init__(self, label: str, total: int | None = None, unit: str = "items", every_s: float = 5.0) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.every_s = every_s
        self.done = 0
        self.started = time.monotonic()
        self._last_log = self.started

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last_log >= self.every_s:
            self._last_log = now
            log.info(self.line(now))

    def line(self, now: float | None = None) -> str:
        elapsed = max((now or time.monotonic()) - self.started, 1e-9)
        rate = self.done / elapsed
        if self.total:
            remaining = (self.total - self.done) / rate if rate > 0 else float("inf")
            eta = _eta(remaining) if remaining != float("inf") else "?"
            return (
                f"{self.label}: {self.done:,}/{self.total:,} {self.unit} ({self.done / self.total:.0%}), "
                f"{rate:,.0f}/s, ETA {eta}"
            )
        return f"{self.label}: {self.done:,} {self.unit}, {rate:,.0f}/s"

    def finish(self) -> float:
        elapsed = time.monotonic() - self.started
        if elapsed >= self.every_s:
            log.info("%s: done, %s %s in %.1fs", self.label, f"{self.done:,}", self.unit, elapsed)
        return elapsed
