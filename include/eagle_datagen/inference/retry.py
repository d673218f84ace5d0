"""What to retry, and how long to wait: one policy for every transient failure of a request."""

from __future__ import annotations

import random
from dataclasses import dataclass

from eagle_datagen import settings

# Overload and server restarts: worth another try, possibly on another endpoint.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = settings.MAX_ATTEMPTS
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    request_timeout_s: float = settings.REQUEST_TIMEOUT_S  # a long reasoning trace at real GPU speed takes minutes

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Exponential backoff with full jitter: spreads retries of many requests failed at once."""
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return rng.uniform(0.0, ceiling)


@dataclass(frozen=True)
class Failure:
    """A failed attempt: `kind` names it for counters and logs; `transient` says whether to retry."""

    kind: str  # http_503, http_400, abort, disconnect, timeout, ...
    message: str
    transient: bool
    status: int | None = None

    def describe(self) -> str:
        return f"{self.kind}: {self.message}"


def failure_from_status(status: int, message: str) -> Failure:
    return Failure(f"http_{status}", message, transient=status in TRANSIENT_STATUSES or status >= 500, status=status)
