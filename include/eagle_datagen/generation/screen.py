"""Validate each answer as it arrives, eject sick endpoints, and stop a run that cannot succeed.

The client hands every answer to `AnswerScreen.check_answer`: a server fault is sent again elsewhere (the
client does that), a model-behaviour answer is kept for quarantine, and the content breaker counts both
per endpoint. Every stored result then passes `count_row`, which keeps the run-wide reason counts of this
invocation and applies the run-level diagnoses (validation/diagnosis.py) as soon as `min_samples` rows are
in and a reason's rate is surely above its threshold. The run stops at once, with one line that names the
endpoints, when every endpoint is ejected or a setup signature passes its threshold; what was generated
stays checkpointed, so a rerun after the fix continues.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

from eagle_datagen import settings
from eagle_datagen.generation.endpoint_journal import EndpointJournal
from eagle_datagen.inference.content_breaker import ContentBreaker, ContentBreakerPolicy, Ejection
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.profile import ModelProfile
from eagle_datagen.validation.diagnosis import (
    REASON_MODES,
    DiagnosisThresholds,
    ValidationFailed,
    diagnose,
    explain,
)
from eagle_datagen.validation.rules import ValidationLimits
from eagle_datagen.validation.screening import SERVER_FAULT_REASONS, Verdict, judge_answer

log = logging.getLogger(__name__)


# Requests one endpoint lost in a row (accepted, never answered: inference/liveness.py), no valid answer from
# it in between, that take it out for the run: one lost request is an accident, three are a broken replica.
LOST_TO_EJECT = 3
LOST_REASON = "lost_requests"
LOST_FIX = "a request lost inside the server (a stuck scheduler or worker): restart the replica"
EARLY_Z = 3.0  # standard errors: a model behaviour at 40% against a 50% threshold stops 2 runs in 10,000


def lower_bound(count: int, total: int, z: float = EARLY_Z) -> float:
    """Wilson score lower bound of the rate count/total."""
    if total <= 0:
        return 0.0
    p, d = count / total, 1 + z * z / total
    return (p + z * z / (2 * total) - z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))) / d


class RunStopped(ValidationFailed):
    """The deployment cannot give this run valid answers: the run stopped early; its checkpoints are kept."""


class AnswerScreen:
    def __init__(
        self,
        urls: list[str],
        profile: ModelProfile,
        run_id: str,
        limits: ValidationLimits,
        thresholds: DiagnosisThresholds,
        policy: ContentBreakerPolicy,
        journal: EndpointJournal | None = None,
        by: str = "run",
        front_end: str = "cli",  # the diagnoses name settings as this front end calls them
    ) -> None:
        self.front_end = front_end
        self.profile = profile
        self.run_id = run_id
        self.limits = limits
        self.thresholds = thresholds
        self.journal = journal
        self.breaker = ContentBreaker(urls, policy, thresholds.rates(), SERVER_FAULT_REASONS, by=by)
        self.rows: Counter[str] = Counter()  # this invocation's stored results by reason ("valid" included)
        self.mode_rows: Counter[str] = Counter()  # ... and by mode: a reason of one mode is a share of its samples
        self.stopped: str | None = None
        self._lost_in_a_row: Counter[str] = Counter()

    # --- answers ---------------------------------------------------------------------------------------------

    def check_answer(
        self, endpoint: str, request: SampleRequest, output_ids: list[int], meta_info: dict[str, Any]
    ) -> Verdict:
        if self.stopped is not None:  # another request of this run stopped it: no more answers count
            raise RunStopped([self.stopped])
        verdict = judge_answer(
            request.prompt_ids, output_ids, meta_info, self.profile, self.limits, request.mode, request.top_logprobs
        )
        evidence = None
        if verdict.server_fault:
            evidence = {
                "sample_id": request.sample_id,
                "reason": verdict.reason,
                "detail": verdict.detail,
                "output_head": list(output_ids[:8]),
                "output_ids": len(output_ids),
                "completion_tokens": meta_info.get("completion_tokens"),
                "prompt_tokens": meta_info.get("prompt_tokens"),
                "prompt_ids": len(request.prompt_ids),
            }
        if verdict.reason is None:
            self._lost_in_a_row.pop(endpoint, None)
        ejection = self.breaker.record(endpoint, verdict.reason, evidence)
        if ejection is not None:
            self._ejected(ejection)
        return verdict

    def request_lost(self, endpoint: str) -> None:
        """The liveness monitor found a request of `endpoint` lost; LOST_TO_EJECT in a row take it out."""
        tally = self.breaker.tallies.get(endpoint)
        if tally is None or tally.ejection is not None:
            return
        self._lost_in_a_row[endpoint] += 1
        lost = self._lost_in_a_row[endpoint]
        if lost < LOST_TO_EJECT:
            return
        evidence = f"{lost} requests in a row accepted and never answered, no longer counted in its /v1/loads"
        tally.ejection = Ejection(endpoint, LOST_REASON, "server_fault", evidence, tally.answers, by=self.breaker.by)
        self._ejected(tally.ejection)

    def learn(self, key: str, ejection: Ejection) -> None:
        """An ejection recorded earlier in this run (another shard task or invocation): stays out here."""
        if ejection.endpoint not in self.breaker.tallies or not self.breaker.is_available(ejection.endpoint):
            return  # not an endpoint of this invocation, or already out
        self.breaker.learn(ejection)
        log.warning(
            "endpoint %s was taken out earlier in run %s (by %s, %s): leaving it out; delete %s to use it again",
            ejection.endpoint,
            self.run_id,
            ejection.by or "?",
            f"{ejection.reason}: {ejection.evidence}",
            key,
        )

    def _ejected(self, ejection: Ejection) -> None:
        fix = _fix(ejection, self.profile, self.front_end)
        log.warning(
            "endpoint %s taken out of rotation for the rest of run %s: %s %s; likely cause: %s",
            ejection.endpoint,
            self.run_id,
            ejection.reason,
            ejection.evidence,
            fix,
        )
        if self.journal is not None:
            self.journal.record_ejection(ejection)
        self.raise_if_all_out()

    def raise_if_all_out(self) -> None:
        if not self.breaker.all_ejected:
            return
        by_fix: dict[str, list[str]] = {}  # endpoints with the same likely cause share its line
        for e in self.breaker.ejections():
            by_fix.setdefault(_fix(e, self.profile, self.front_end), []).append(e.describe())
        parts = [f"{'; '.join(described)}: {fix}" for fix, described in by_fix.items()]
        self.stop(f"every endpoint was taken out: {'; '.join(parts)}", [e.endpoint for e in self.breaker.ejections()])

    # --- stored results -----------------------------------------------------------------------------------

    def count_row(self, result: SampleResult) -> None:
        """Count a stored result; stop the run when a run-level diagnosis holds already."""
        self.rows["request_error" if result.error else result.reject_reason or "valid"] += 1
        self.mode_rows[result.request.mode] += 1
        total = sum(self.rows.values())

        def out_of(reason: str) -> int:
            return self.mode_rows[REASON_MODES[reason]] if reason in REASON_MODES else total

        # Judged on the evidence so far: a reason counts once its rate is surely above the threshold (the
        # lower bound of its confidence interval), not when a few early answers happen to pass it.
        sure = {
            reason: count
            for reason, count in self.rows.items()
            if reason != "valid" and lower_bound(count, out_of(reason)) > (self.thresholds.rate(reason) or 0.0)
        }
        modes = dict(self.mode_rows)
        lines = diagnose(sure, total, self.thresholds, self.profile, self.front_end, modes) if sure else []
        if not lines:
            return
        serving = [t for t in self.breaker.tallies.values() if t.rows]
        by_endpoint = ", ".join(f"{t.url} {t.rows - t.valid}/{t.rows} quarantined" for t in serving) or ", ".join(
            self.breaker.tallies
        )
        self.stop(
            f"stopped after {total} answers: {'; '.join(lines)} (endpoints: {by_endpoint})", list(self.breaker.tallies)
        )

    def stop(self, diagnosis: str, endpoints: list[str]) -> None:
        message = (
            f"{diagnosis}; what was generated is checkpointed: fix the deployment and "
            f"{settings.resume_hint(self.front_end, self.run_id)} to continue"
        )
        if self.stopped is None:
            self.stopped = message
            log.error("run %s stopped early: %s", self.run_id, message)
            if self.journal is not None:
                self.journal.record_stop(message, endpoints)
        raise RunStopped([message])

    # --- reporting ------------------------------------------------------------------------------------------

    @property
    def answered(self) -> int:
        return sum(t.answers for t in self.breaker.tallies.values())

    def tally(self) -> dict[str, Any]:
        return {
            "by": self.breaker.by,
            "policy": self.breaker.policy.to_json() | {"max_rates": self.thresholds.rates()},
            "rows": dict(self.rows),
            "stopped": self.stopped,
            "endpoints": {url: t.to_json() for url, t in self.breaker.tallies.items()},
        }

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per endpoint, for the run's summary line: answers, retried faults, quarantined, ejection."""
        return {
            url: {
                "answers": t.answers,
                "server_faults": sum(t.server_faults.values()),
                "quarantined": sum(t.quarantined.values()),
                "ejected": t.ejection.describe() if t.ejection else None,
            }
            for url, t in self.breaker.tallies.items()
        }


def _fix(ejection: Ejection, profile: ModelProfile, front_end: str = "cli") -> str:
    """The likely cause of an ejection, and its fix."""
    return LOST_FIX if ejection.reason == LOST_REASON else explain(ejection.reason, profile, front_end)[1]
