"""The evaluation's numbers from its records: the headline accept length is total output tokens over total verify
steps (what drafter cards print), beside it the same without the prefill token and the mean over prompts of SGLang's
per-request figure; intervals come from a bootstrap over prompts, inside the possible range by construction;
failed and unmeasured requests are counted, never averaged in; a paired difference resamples prompts jointly."""

from __future__ import annotations

import numpy as np
import pytest

from eagle_datagen.evaluation import intervals
from eagle_datagen.evaluation.aggregate import failure_kind, paired, prompt_totals, prompt_values, summarize
from eagle_datagen.evaluation.intervals import MIN_PROMPTS, mean_interval, paired_ratio_interval, ratio_interval

NUM_STEPS = 3  # top-k 1, 4 draft tokens: a verify step emits at most 4 tokens


def record(category, key, tokens=30, steps=10, correct=None, status="ok", side="A", **extra):
    """A request of `tokens` output tokens in `steps` verify steps; `correct` drafts accepted (default: every token
    but the prefill's and one bonus per step, as SGLang counts an answer not cut short)."""
    measured = status == "ok"
    correct = tokens - 1 - steps if correct is None else correct
    base = {
        "side": side,
        "category": category,
        "prompt_key": key,
        "status": status,
        "error": None,
        "completion_tokens": tokens if status != "failed" else None,
        "latency_s": 1.5,
        "e2e_latency_s": 1.0 if status != "failed" else None,
        "spec_verify_ct": steps if measured else None,
        "spec_accept_length": tokens / steps if measured else None,  # SGLang's: completion_tokens / verify_ct
        "spec_accept_rate": correct / (steps * NUM_STEPS) if measured else None,
        "spec_num_correct_drafts": correct if measured else None,
        "spec_num_proposed_drafts": steps * NUM_STEPS if measured else None,
        "spec_correct_drafts_histogram": [0, 0, 0, steps] if measured else None,
    }
    return base | extra


def test_a_short_answer_reads_high_per_request_and_the_headline_is_tokens_over_verify_steps():
    rows = [
        record("chat", "short", tokens=5, steps=1),  # the prefill's token, then 3 drafts and the bonus in one step
        record("chat", "long", tokens=101, steps=50),  # 2 tokens per step
    ]
    assert rows[0]["spec_accept_length"] == 5.0  # SGLang's per-request figure: above num_steps + 1
    block = summarize(rows)["categories"]["chat"]
    assert block["accept_length_total"]["value"] == pytest.approx(106 / 51)  # the cards' figure
    assert block["accept_length_no_prefill"]["value"] == pytest.approx(1 + (3 + 50) / 51)
    assert block["accept_length"]["mean"] == pytest.approx((5.0 + 101 / 50) / 2)  # the mean over prompts: 3.51
    assert block["accept_length_total"]["numerator"] == 106 and block["accept_length_total"]["verify_steps"] == 51
    alone = summarize(rows[:1])["categories"]["chat"]
    assert alone["accept_length_no_prefill"]["value"] == NUM_STEPS + 1  # without the prefill token: at most 4
    assert alone["accept_length_total"]["ci95"] is None  # one prompt: no spread to judge


def test_without_sglangs_count_the_accepted_drafts_are_the_output_less_prefill_and_bonus_tokens():
    counted = record("math", "p", tokens=33, steps=8)
    uncounted = counted | {"spec_num_correct_drafts": None}
    for row in (counted, uncounted):
        assert summarize([row])["overall"]["accept_length_no_prefill"]["value"] == pytest.approx(32 / 8)


def test_a_prompts_requests_are_summed_and_failures_are_counted_not_averaged():
    rows = [
        record("math", "p1", tokens=20, steps=10),
        record("math", "p1", tokens=41, steps=10),
        record("math", "p2", tokens=9, steps=2),
        record("math", "p3", status="failed", error="gave up after 8 attempts: http_503: The request queue is full."),
        record("math", "p3", tokens=1, status="unmeasured"),  # answered without a verify step
        record("code", "q1", tokens=12, steps=8),
    ]
    assert prompt_totals(rows, "accept_length_total") == {
        ("code", "q1"): (12, 8),
        ("math", "p1"): (61, 20),
        ("math", "p2"): (9, 2),
    }
    assert prompt_values(rows, "accept_length") == {("code", "q1"): 1.5, ("math", "p1"): 3.05, ("math", "p2"): 4.5}
    result = summarize(rows)
    math_block = result["categories"]["math"]
    counts = (math_block["requests"], math_block["failed"], math_block["unmeasured"], math_block["measured"])
    assert counts == (5, 1, 1, 3)
    assert math_block["prompts"] == 2 and math_block["accept_length_total"]["value"] == pytest.approx(70 / 22)
    assert math_block["failures"] == {"http_503": 1}
    assert math_block["output_tokens"] == 20 + 41 + 9 + 1  # answered requests, unmeasured included
    assert math_block["verify_steps"] == {"total": 22, "per_request": 22 / 3}
    assert math_block["correct_drafts_histogram"]["counts"] == [0, 0, 0, 22]
    assert result["overall"]["accept_length_total"]["value"] == pytest.approx(82 / 30)
    assert result["overall"]["requests"] == 6


def skewed_prompts(n, seed):
    """n prompts of a drafter that helps on a few: most at about 1 token per step, some near 4."""
    rng = np.random.default_rng(seed)
    steps = rng.integers(5, 60, size=n)
    per_step = np.where(rng.random(n) < 0.2, 3.6, 1.0)
    return (np.floor(steps * per_step) + 1).astype(float), steps.astype(float)


@pytest.mark.parametrize("n", [2, 5, 6, 30, 400])
def test_the_interval_is_inside_the_prompts_range_and_holds_the_value(n):
    tokens, steps = skewed_prompts(n, seed=n)
    stat = ratio_interval(tokens, steps)
    ratios = tokens / steps
    low, high = stat["ci95"]
    assert ratios.min() <= low <= stat["value"] <= high <= ratios.max()
    assert low >= 1.0  # never below one token per verify step, unlike a t interval over skewed values
    no_prefill = ratio_interval(tokens - 1 - steps, steps, offset=1.0)
    assert 1.0 <= no_prefill["ci95"][0] and no_prefill["ci95"][1] <= NUM_STEPS + 1
    assert stat["n"] == n and (stat["warning"] is not None) == (n < MIN_PROMPTS)
    assert ratio_interval(tokens, steps) == stat  # the fixed seed: the same records give the same interval


def test_the_docs_old_code_row_has_no_interval_below_one():
    """The docs' table had "code (5) 1.53 [0.51, 2.55]" (Student's t over 5 values, one prompt far above the rest)."""
    values = [1.0, 1.03, 1.0, 1.05, 3.57]
    stat = mean_interval(values)
    assert stat["mean"] == pytest.approx(np.mean(values)) and stat["ci95"][0] >= 1.0 and stat["ci95"][1] <= 3.57
    assert "too few" in stat["warning"]


def test_the_bootstrap_is_the_documented_one():
    """Recomputed from the recipe docs/internals/evaluation.md gives: numpy's default_rng(SEED), RESAMPLES multinomial
    draws
    of n prompts, the ratio of the drawn totals, the 2.5% and 97.5% percentiles."""
    tokens, steps = skewed_prompts(40, seed=3)
    rng = np.random.default_rng(intervals.SEED)
    counts = rng.multinomial(40, np.full(40, 1 / 40), size=intervals.RESAMPLES)
    expected = np.percentile((counts @ tokens) / (counts @ steps), [2.5, 97.5])
    assert ratio_interval(tokens, steps)["ci95"] == pytest.approx(list(expected), rel=1e-12)


def test_the_interval_holds_the_true_ratio_about_95_times_in_100_with_enough_prompts():
    rng = np.random.default_rng(11)
    truth_tokens, truth_steps = skewed_prompts(200_000, seed=12)
    truth = truth_tokens.sum() / truth_steps.sum()
    held, trials = 0, 200
    for _ in range(trials):
        pick = rng.integers(0, len(truth_tokens), size=60)
        low, high = ratio_interval(truth_tokens[pick], truth_steps[pick])["ci95"]
        held += low <= truth <= high
    assert 0.88 <= held / trials <= 0.99, held / trials


def test_a_paired_difference_cancels_the_prompts_difficulty():
    tokens, steps = skewed_prompts(30, seed=5)
    better = tokens + steps * 0.5  # B's answers, half a token more per step on every prompt
    diff = paired_ratio_interval((better, steps), (tokens, steps))
    side_a, side_b = ratio_interval(better, steps), ratio_interval(tokens, steps)
    assert diff["value"] == pytest.approx(side_a["value"] - side_b["value"]) == pytest.approx(0.5)
    assert diff["ci95"] == pytest.approx([0.5, 0.5])  # a constant gain: the joint resampling shows it exactly
    assert side_a["ci95"][1] - side_a["ci95"][0] > 0.3  # while each side alone spreads widely
    assert diff["warning"] is None
    same = paired_ratio_interval((tokens, steps), (tokens[::-1], steps[::-1]))  # no real difference
    assert same["ci95"][0] <= 0 <= same["ci95"][1] and "do not separate" in same["warning"]
    few = paired_ratio_interval((better[:5], steps[:5]), (tokens[:5], steps[:5]))
    assert "too few" in few["warning"]
    assert paired_ratio_interval(([], []), ([], []))["warning"] == "no prompt measured on both sides"


def test_paired_blocks_are_over_prompts_measured_on_both_sides():
    a = [record("math", f"p{i}", tokens=31 + i, steps=10) for i in range(5)] + [record("math", "only_a")]
    b = [record("math", f"p{i}", tokens=21 + i, steps=10, side="B") for i in range(5)] + [record("math", "p9")]
    result = paired(a, b)["categories"]["math"]
    assert (result["paired_prompts"], result["only_a"], result["only_b"]) == (5, 1, 1)
    assert result["accept_length_total_diff"]["value"] == pytest.approx((165 - 115) / 50)
    assert result["accept_length_diff"]["mean"] == pytest.approx(1.0)
    assert result["accept_length_no_prefill_diff"]["value"] == pytest.approx(1.0)
    assert "too few" in result["warning"]


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
