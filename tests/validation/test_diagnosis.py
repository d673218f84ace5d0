"""Run-level diagnoses: each violated threshold names the likely cause and the fix, in one line."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.profile import load_profile
from eagle_datagen.validation import REASONS, DiagnosisThresholds, ValidationFailed, check_run, diagnose

KIMI = load_profile("kimi-k2.5")
QWEN = load_profile("qwen3")
ZERO_TOLERANCE = ("prompt_suffix", "id_out_of_range")


def test_every_reason_has_a_threshold_and_a_message():
    names = {f.name for f in fields(DiagnosisThresholds)} - {"min_samples"}
    assert names == set(REASONS)
    for reason in REASONS:
        assert len(diagnose({reason: 100}, 100, profile=KIMI)) == 1, reason
        assert len(diagnose({reason: 100}, 100)) == 1, reason  # without a profile too


def test_defaults():
    t = DiagnosisThresholds()
    assert (t.missing_think_end, t.think_start_in_output, t.prompt_echo, t.completion_tokens_mismatch) == (
        0.5,
        0.2,
        0.01,
        0.01,
    )
    assert (t.prompt_suffix, t.id_out_of_range, t.finish_length, t.finish_abort) == (0.0, 0.0, 0.5, 0.2)
    assert (t.request_error, t.repetition_loop, t.min_samples) == (0.2, 0.2, 20)


@pytest.mark.parametrize(
    ("reason", "count", "expected"),
    [
        (
            "missing_think_end",
            73,
            r"^73% \(73/100\) of samples have no </think> \(163607\).*something strips think tokens .*"
            r"\(SGLang.s --reasoning-parser does not.*not through a proxy that rewrites answers$",
        ),
        (
            "prompt_echo",
            2,
            r"output_ids that start with the prompt's tail.*SGLang 0\.5\.0-0\.5\.4 has this bug: "
            r"upgrade SGLang",
        ),
        ("finish_length", 60, r"hit max_new_tokens.*raise --max-new-tokens \(reasoning traces are long\)"),
        (
            "think_start_in_output",
            30,
            r"contain <think> \(163606\) in the output.*the model generated <think> "
            r"although the prompt ends in it: is the chat template the model's own\?",
        ),
        ("completion_tokens_mismatch", 5, r"output_ids different from completion_tokens.*upgrade SGLang"),
        (
            "prompt_suffix",
            1,
            r"prompts do not end in '<think>' \(163606\).*none allowed.*the tokenizer's template "
            r"does not end prompts in <think> \(163606\) as the profile expects: the tokenizer or the profile is "
            r"wrong \(check --tokenizer and --profile\)",
        ),
        (
            "id_out_of_range",
            1,
            r"ids beyond the vocabulary of moonshotai/Kimi-K2\.5 \(163840\).*the server serves "
            r"another model",
        ),
        ("request_error", 21, r"of requests failed permanently.*HTTP 400"),
        ("finish_abort", 25, r"^25% \(25/100\) of requests were aborted by the server.*overloaded or restarting"),
        (
            "repetition_loop",
            21,
            r"repetition loop.*check sampling \(temperature/top_p\).*temperature 1\.0, top_p 0\.95",
        ),
        ("no_eos", 6, r"stopped without the EOS <\|im_end\|> \(163586\).*stop"),
        ("prompt_tokens_mismatch", 2, r"prompt_tokens different.*input_ids as sent"),
        ("multiple_think_end", 21, r"contain </think> \(163607\) more than once"),
        ("empty_answer", 21, r"end right after </think> \(163607\) with no answer"),
        ("runaway_thinking", 51, r"reason for more than max_reasoning_tokens"),
    ],
)
def test_each_diagnosis_names_cause_and_fix(reason, count, expected):
    lines = diagnose({reason: count}, 100, profile=KIMI)
    assert len(lines) == 1
    assert "\n" not in lines[0]
    assert re.search(expected, lines[0]), lines[0]


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("missing_think_start", "have no <think> (151667)"),
        ("multiple_think_start", "<think> (151667) more than once"),
        ("think_end_before_start", "</think> (151668) before <think> (151667)"),
    ],
)
def test_generated_thinking_diagnoses_use_the_profile_tokens(reason, expected):
    (line,) = diagnose({reason: 80}, 100, profile=QWEN)
    assert expected in line, line


def test_rates_at_or_below_the_threshold_pass():
    assert diagnose({"missing_think_end": 50, "finish_length": 50}, 100) == []
    assert diagnose({"missing_think_end": 51}, 100) != []
    assert diagnose({"prompt_echo": 1}, 100) == []  # 1% allowed
    assert diagnose({"prompt_echo": 2}, 100) != []
    assert diagnose({}, 0) == [] and diagnose({}, 1000) == []


def test_unknown_codes_are_ignored():
    assert diagnose({"valid": 900, "something_new": 100}, 1000) == []


def test_min_samples_rule():
    # 10 of 10 samples truncated: too few samples to judge a rate...
    assert diagnose({"finish_length": 10, "missing_think_end": 10}, 10) == []
    # ...but from min_samples on, the rate counts
    assert len(diagnose({"finish_length": 20, "missing_think_end": 20}, 20)) == 2
    assert len(diagnose({"finish_length": 10}, 10, DiagnosisThresholds(min_samples=5))) == 1


@pytest.mark.parametrize("reason", ZERO_TOLERANCE)
def test_zero_tolerance_reasons_fail_on_one_sample_even_in_small_runs(reason):
    assert len(diagnose({reason: 1}, 1_000_000)) == 1
    assert len(diagnose({reason: 1}, 3)) == 1
    with pytest.raises(ValidationFailed):
        check_run({reason: 1}, 1, DiagnosisThresholds())


def test_lines_follow_the_reason_order():
    counts = {"repetition_loop": 90, "prompt_echo": 90, "request_error": 90}
    lines = diagnose(counts, 100)
    assert len(lines) == 3
    assert "request_error" in lines[0] and "prompt's tail" in lines[1] and "repetition loop" in lines[2]


def test_check_run_raises_one_line():
    check_run({"finish_length": 5}, 100, DiagnosisThresholds(), KIMI)  # fine: no exception
    with pytest.raises(ValidationFailed) as info:
        check_run({"missing_think_end": 80, "prompt_echo": 10}, 100, DiagnosisThresholds(), KIMI)
    message = str(info.value)
    assert "\n" not in message
    assert message == "; ".join(info.value.diagnoses)
    assert len(info.value.diagnoses) == 2
    assert message.startswith("10% (10/100) of samples have output_ids")  # REASONS order: echo first
    assert isinstance(info.value, DataGenError)


def test_custom_thresholds():
    strict = DiagnosisThresholds(missing_think_end=0.0)
    assert diagnose({"missing_think_end": 1}, 5, strict)[0].startswith("20% (1/5)")
    for bad in ({"prompt_echo": 1.5}, {"finish_length": -0.1}, {"min_samples": -1}):
        with pytest.raises(ConfigError):
            DiagnosisThresholds(**bad)


def test_user_rates_override_the_defaults_and_bad_ones_are_refused():
    from eagle_datagen.errors import ConfigError
    from eagle_datagen.validation.diagnosis import DiagnosisThresholds

    thresholds = DiagnosisThresholds().with_rates({"prompt_echo": 0.05})
    assert thresholds.prompt_echo == 0.05 and thresholds.rates()["missing_think_end"] == 0.5
    with pytest.raises(ConfigError, match="unknown reason 'prompt_ecco'; known reasons: request_error"):
        DiagnosisThresholds().with_rates({"prompt_ecco": 0.05})
    with pytest.raises(ConfigError, match="the rate of prompt_echo must be a number between 0 and 1, not 5"):
        DiagnosisThresholds().with_rates({"prompt_echo": 5})
