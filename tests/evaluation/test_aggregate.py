"""The evaluation's numbers from its records: Student's t intervals over prompts, a prompt's value the mean of its
measured requests, failed and unmeasured requests counted but never averaged in, the paired difference over the
prompts measured on both sides."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from eagle_datagen.evaluation.aggregate import failure_kind, paired, prompt_values, summarize
from eagle_datagen.evaluation.intervals import mean_interval, t_quantile

# t(0.975, df) from the standard tables
T_TABLE = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 19: 2.093, 29: 2.045, 60: 2.000, 120: 1.980}


@pytest.mark.parametrize(("df", "expected"), sorted(T_TABLE.items()))
def test_t_quantile_is_the_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=5e-4)


def test_interval_is_mean_plus_minus_t_times_standard_error():
    values = [2.1, 3.4, 2.9, 3.8, 2.2, 3.0]
    stat = mean_interval(values)
    half = t_quantile(0.975, 5) * np.std(values, ddof=1) / math.sqrt(len(values))
    assert stat["mean"] == pytest.approx(np.mean(values))
    assert stat["ci95"] == pytest.approx([np.mean(values) - half, np.mean(values) + half])
    assert mean_interval([]) == {"mean": None, "ci95": None, "n": 0, "sd": None}
    assert mean_interval([3.0])["ci95"] is None  # one prompt: no spread to judge


def test_the_interval_covers_the_true_mean_95_times_in_100():
    rng = random.Random(7)
    covered = 0
    for _ in range(2000):
        values = [rng.gauss(3.0, 0.6) for _ in range(12)]
        low, high = mean_interval(values)["ci95"]
        covered += low <= 3.0 <= high
    assert 0.935 < covered / 2000 < 0.965


def record(category, key, status="ok", length=3.0, rate=0.6, side="A", **extra):
    base = {
        "side": side,
        "category": category,
        "prompt_key": key,
        "status": status,
        "error": None,
        "completion_tokens": 30 if status != "failed" else None,
        "latency_s": 1.5,
        "e2e_latency_s": 1.0 if status != "failed" else None,
        "spec_verify_ct": 10 if status == "ok" else None,
        "spec_accept_length": length if status == "ok" else None,
        "spec_accept_rate": rate if status == "ok" else None,
        "spec_num_correct_drafts": 18 if status == "ok" else None,
        "spec_num_proposed_drafts": 30 if status == "ok" else None,
        "spec_correct_drafts_histogram": [2, 2, 2, 4] if status == "ok" else None,
    }
    return base | extra


def test_a_prompts_value_is_its_requests_mean_and_failures_are_counted_not_averaged():
    rows = [
        record("math", "p1", length=2.0),
        record("math", "p1", length=4.0),  # p1's value: 3.0
        record("math", "p2", length=5.0),
        record("math", "p3", status="failed", error="gave up after 8 attempts: http_503: The request queue is full."),
        record("math", "p3", status="unmeasured"),  # answered without a verify step
        record("code", "q1", length=1.5, rate=0.2),
    ]
    assert prompt_values(rows, "accept_length") == {("math", "p1"): 3.0, ("math", "p2"): 5.0, ("code", "q1"): 1.5}
    result = summarize(rows)
    math_block = result["categories"]["math"]
    assert (math_block["requests"], math_block["failed"], math_block["unmeasured"], math_block["measured"]) == (
        5,
        1,
        1,
        3,
    )
    assert math_block["prompts"] == 2 and math_block["accept_length"]["mean"] == pytest.approx(4.0)
    assert math_block["failures"] == {"http_503": 1}
    assert math_block["output_tokens"] == 4 * 30  # answered requests, unmeasured included
    assert math_block["verify_steps"] == {"total": 30, "per_request": 10.0}
    assert math_block["correct_drafts_histogram"]["counts"] == [6, 6, 6, 12]
    assert math_block["output_tokens_per_s"]["mean"] == pytest.approx(30.0)  # 30 tokens in the server's 1.0 s
    assert result["overall"]["accept_length"]["mean"] == pytest.approx((3.0 + 5.0 + 1.5) / 3)
    assert result["overall"]["requests"] == 6


def test_paired_difference_is_over_prompts_measured_on_both_sides():
    a = [record("math", f"p{i}", length=3.0 + 0.1 * i) for i in range(5)] + [record("math", "only_a")]
    b = [record("math", f"p{i}", length=2.0 + 0.1 * i + 0.05 * (i % 2), side="B") for i in range(5)]
    b.append(record("math", "p9", side="B"))
    result = paired(a, b)["categories"]["math"]
    diffs = [1.0 - 0.05 * (i % 2) for i in range(5)]
    assert (result["paired_prompts"], result["only_a"], result["only_b"]) == (5, 1, 1)
    assert result["accept_length_diff"]["mean"] == pytest.approx(np.mean(diffs))
    a_values = [3.0 + 0.1 * i for i in range(5)]
    b_values = [2.0 + 0.1 * i + 0.05 * (i % 2) for i in range(5)]
    assert result["accept_length_diff"] == mean_interval([x - y for x, y in zip(a_values, b_values, strict=True)])


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ("gave up after 8 attempts: http_503: The request queue is full.", "http_503"),
        ("http_400: The input (9 tokens) is longer than the model's context length", "http_400"),
        ("no_endpoint: every endpoint has failed for 600s", "no_endpoint"),
        ("gave up after 2 attempts: lost: lost by http://a and by http://b", "lost"),
        (None, "unknown"),
    ],
)
def test_failures_are_counted_by_kind(error, kind):
    assert failure_kind(error) == kind
