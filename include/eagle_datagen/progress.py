"""Progress for long work: count, rate and ETA, plus caller-supplied details (tokens/s, retries, ...).

On a terminal the line is redrawn in place; otherwise (logs, Airflow) it is logged every few seconds.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

log = logging.getLogger("eagle_datagen.progress")


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    def __init__(
        self,
        label: str,
        total: int | None = None,
        unit: str = "items",
        every_s: float = 5.0,
        details: Callable[[float], str] | None = None,
        interactive: bool | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.details = details
        self.interactive = sys.stderr.isatty() if interactive is None else interactive
        self.every_s = 0.5 if self.interactive else every_s
        self.done = 0
        self.started = time.monotonic()
        self._last_report = self.started

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last_report >= self.every_s:
            self._last_report = now
            self._report(self.line(now))

    def _report(self, line: str) -> None:
        if self.interactive:
            sys.stderr.write("\r\033[K" + line)
            sys.stderr.flush()
        else:
            log.info(line)

    def line(self, now: float | None = None) -> str:
        elapsed = max((now or time.monotonic()) - self.started, 1e-9)
        rate = self.done / elapsed
        if self.total:
            remaining = (self.total - self.done) / rate if rate > 0 else None
            eta = format_duration(remaining) if remaining is not None else "?"
            text = (
                f"{self.label}: {self.done:,}/{self.total:,} {self.unit} ({self.done / self.total:.0%}), "
                f"{rate:,.1f}/s, ETA {eta}"
            )
        else:
            text = f"{self.label}: {self.done:,} {self.unit}, {rate:,.1f}/s"
        return f"{text}, {self.details(elapsed)}" if self.details else text

    def finish(self) -> float:
        elapsed = time.monotonic() - self.started
        if self.interactive and elapsed >= self.every_s:
            sys.stderr.write("\r\033[K")
        if elapsed >= 5.0 or self.details:
            log.info("%s: done, %s %s in %s", self.label, f"{self.done:,}", self.unit, format_duration(elapsed))
        return elapsed
