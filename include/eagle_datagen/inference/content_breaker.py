"""The content breaker: takes an endpoint whose answers are wrong out of rotation for the rest of the run.

Beside the transport breaker (endpoints.py: an endpoint that does not answer is rested, then probed), this
one judges what an endpoint answers. Two signatures eject an endpoint:
- server faults: one server-fault reason (the echo bug, a token count that disagrees with the ids) in at
  least `min_faults` of its last `window` answers, and in more than the reason's user rate of them;
- a model-behaviour outlier: one model-behaviour reason (no `</think>`, ...) far more frequent on this
  endpoint than on the others together, on the same prompts' mix (the shared queue deals prompts to every
  endpoint alike): a reasoning parser left on one replica. A model that often misses `</think>` misses
  it on every replica alike and ejects none.
An ejected endpoint stays out: the pool asks `is_available` before it chooses one. The breaker only keeps
counts and decides; what an ejection means for the run (a warning, a record, a stop) is the caller's.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from eagle_datagen.errors import ConfigError

EVIDENCE_PER_ENDPOINT = 20  # server-fault answers kept per endpoint for the run's endpoint report


@dataclass(frozen=True)
class ContentBreakerPolicy:
    window: int = 50  # an endpoint's recent answers in which server faults are counted
    min_faults: int = 3  # at least this many answers with one server-fault reason in the window eject it
    # A model-behaviour rate is compared once the endpoint and the others together have this many answers;
    # the endpoint is an outlier when its rate is at least min_gap above the others' and the difference is
    # outlier_z standard errors (a two-proportion z-test: chance alone almost never gets there).
    outlier_min_answers: int = 10
    outlier_min_gap: float = 0.25
    outlier_z: float = 5.0

    def __post_init__(self) -> None:
        if self.window < 1 or not 1 <= self.min_faults <= self.window:
            raise ConfigError("the content breaker needs window >= 1 and 1 <= min_faults <= window")
        if self.outlier_min_answers < 1 or not 0 < self.outlier_min_gap <= 1 or self.outlier_z <= 0:
            raise ConfigError("the content breaker needs outlier_min_answers >= 1, 0 < min_gap <= 1, z > 0")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Ejection:
    endpoint: str
    reason: str
    kind: Literal["server_fault", "model_behaviour"]
    evidence: str  # one line: the counts that decided it, and an example
    answers: int  # the endpoint's answers (in the invocation that ejected it) when it was ejected
    at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    by: str = ""  # who ejected it: "run" for the command line, "shard N" for an orchestrator's task

    def describe(self) -> str:
        return f"{self.endpoint} ({self.reason}: {self.evidence})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Ejection:
        return cls(**{k: raw[k] for k in ("endpoint", "reason", "kind", "evidence", "answers", "at", "by")})


@dataclass
class EndpointTally:
    """What one endpoint answered in this invocation."""

    url: str
    window: int
    answers: int = 0
    valid: int = 0
    quarantined: Counter[str] = field(default_factory=Counter)  # model-behaviour reasons: kept as rows
    server_faults: Counter[str] = field(default_factory=Counter)  # retried elsewhere, never rows
    evidence: list[dict[str, Any]] = field(default_factory=list)
    ejection: Ejection | None = None
    learned: bool = False  # the ejection was recorded earlier in the run (another shard task, invocation)
    recent: deque[str | None] = field(init=False)

    def __post_init__(self) -> None:
        self.recent = deque(maxlen=self.window)

    @property
    def rows(self) -> int:
        return self.valid + sum(self.quarantined.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "answers": self.answers,
            "valid": self.valid,
            "quarantined": dict(self.quarantined),
            "server_faults": dict(self.server_faults),
            "ejection": self.ejection.to_json() if self.ejection and not self.learned else None,
            "learned_ejection": self.ejection.to_json() if self.ejection and self.learned else None,
            "evidence": self.evidence,
        }


class ContentBreaker:
    def __init__(
        self,
        urls: list[str],
        policy: ContentBreakerPolicy,
        max_rates: Mapping[str, float],
        server_fault_reasons: Collection[str],
        by: str = "run",
    ) -> None:
        self.policy = policy
        self.max_rates = dict(max_rates)
        self.server_fault_reasons = frozenset(server_fault_reasons)
        self.by = by
        self.tallies = {url: EndpointTally(url, policy.window) for url in urls}

    def is_available(self, endpoint: Any) -> bool:
        """False once the endpoint is ejected (the pool consults this before it chooses an endpoint)."""
        tally = self.tallies.get(endpoint if isinstance(endpoint, str) else endpoint.url)
        return tally is None or tally.ejection is None

    @property
    def all_ejected(self) -> bool:
        return all(t.ejection is not None for t in self.tallies.values())

    def ejections(self) -> list[Ejection]:
        return [t.ejection for t in self.tallies.values() if t.ejection is not None]

    def faults_to_eject(self, reason: str) -> int:
        """Answers with this server-fault reason in the window that eject: more than the user's rate of the
        window, and at least min_faults (one or two odd answers are no signature)."""
        rate = self.max_rates.get(reason, 0.0)
        return min(self.policy.window, max(self.policy.min_faults, math.floor(rate * self.policy.window) + 1))

    def learn(self, ejection: Ejection) -> None:
        """An ejection recorded earlier in the run: the endpoint stays out here too."""
        tally = self.tallies.get(ejection.endpoint)
        if tally is not None and tally.ejection is None:
            tally.ejection, tally.learned = ejection, True

    def record(self, url: str, reason: str | None, evidence: dict[str, Any] | None = None) -> Ejection | None:
        """Count one answer of `url` (reason None: valid); the ejection it causes, if any."""
        tally = self.tallies[url]
        tally.answers += 1
        tally.recent.append(reason)
        if reason is None:
            tally.valid += 1
            return None
        if reason in self.server_fault_reasons:
            tally.server_faults[reason] += 1
            if evidence is not None and len(tally.evidence) < EVIDENCE_PER_ENDPOINT:
                tally.evidence.append(evidence)
            if tally.ejection is None:
                return self._check_faults(tally, reason)
            return None
        tally.quarantined[reason] += 1
        return self._check_outlier(tally, reason) if tally.ejection is None else None

    def _eject(self, tally: EndpointTally, reason: str, kind: str, evidence: str) -> Ejection:
        tally.ejection = Ejection(tally.url, reason, kind, evidence, tally.answers, by=self.by)  # type: ignore[arg-type]
        return tally.ejection

    def _check_faults(self, tally: EndpointTally, reason: str) -> Ejection | None:
        count = sum(1 for r in tally.recent if r == reason)
        if count < self.faults_to_eject(reason):
            return None
        example = tally.evidence[-1]["detail"] if tally.evidence else ""
        text = f"{count} of its last {len(tally.recent)} answers" + (f", e.g. {example}" if example else "")
        return self._eject(tally, reason, "server_fault", text)

    def _check_outlier(self, tally: EndpointTally, reason: str) -> Ejection | None:
        others = [t for t in self.tallies.values() if t is not tally and t.ejection is None]
        n_self, n_other = tally.rows, sum(t.rows for t in others)
        minimum = self.policy.outlier_min_answers
        if n_self < minimum or n_other < minimum:
            return None
        c_self, c_other = tally.quarantined[reason], sum(t.quarantined[reason] for t in others)
        p_self, p_other = c_self / n_self, c_other / n_other
        pooled = (c_self + c_other) / (n_self + n_other)
        spread = math.sqrt(pooled * (1 - pooled) * (1 / n_self + 1 / n_other))
        if p_self - p_other < self.policy.outlier_min_gap or spread == 0:
            return None
        if (p_self - p_other) / spread < self.policy.outlier_z:
            return None
        text = f"in {c_self} of its {n_self} answers, against {c_other} of {n_other} on the other endpoints"
        return self._eject(tally, reason, "model_behaviour", text)
