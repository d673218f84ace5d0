"""The answer screen's early diagnosis: a setup signature stops the run, chance near a threshold does not."""

from __future__ import annotations

import pytest

from eagle_datagen.generation.screen import AnswerScreen, RunStopped, lower_bound
from eagle_datagen.inference.content_breaker import ContentBreakerPolicy
from eagle_datagen.inference.samples import SampleRequest, SampleResult
from eagle_datagen.validation.diagnosis import DiagnosisThresholds
from eagle_datagen.validation.rules import ValidationLimits


def screen(kimi_profile) -> AnswerScreen:
    limits, thresholds = ValidationLimits(), DiagnosisThresholds()
    return AnswerScreen(["http://a:1"], kimi_profile, "r1", limits, thresholds, ContentBreakerPolicy())


def result(reason: str | None) -> SampleResult:
    request = SampleRequest("s", "p", None, "chat", 0, [1, 163606], {})
    return SampleResult(request, output_ids=[1, 163586], endpoint="http://a:1", reject_reason=reason)


def test_a_rate_surely_above_its_threshold_stops_the_run(kimi_profile):
    s = screen(kimi_profile)
    with pytest.raises(RunStopped, match=r"stopped after 20 answers: 90% \(18/20\) of samples have no </think>"):
        for i in range(20):
            s.count_row(result("missing_think_end" if i >= 2 else None))
    assert "--run-id r1 to continue" in s.stopped


def test_an_airflow_run_stopped_early_is_told_its_fix_in_airflow_words(kimi_profile):
    limits, thresholds = ValidationLimits(), DiagnosisThresholds()
    s = AnswerScreen(
        ["http://a:1"], kimi_profile, "r1", limits, thresholds, ContentBreakerPolicy(), front_end="airflow"
    )
    with pytest.raises(RunStopped):
        for i in range(20):
            s.count_row(result("finish_length" if i >= 2 else None))
    assert "raise the max_new_tokens param" in s.stopped and "clear the DAG run's failed tasks" in s.stopped
    assert "--" not in s.stopped, s.stopped


def test_a_rate_near_its_threshold_does_not_stop_the_run_early(kimi_profile):
    s = screen(kimi_profile)
    for i in range(40):  # 55%: above 50%, but not surely
        s.count_row(result("missing_think_end" if i % 20 < 11 else None))
    assert s.stopped is None and lower_bound(22, 40) < 0.5


def test_a_zero_tolerance_reason_stops_at_once(kimi_profile):
    with pytest.raises(RunStopped, match="prompt_suffix|do not end in"):
        screen(kimi_profile).count_row(result("prompt_suffix"))
