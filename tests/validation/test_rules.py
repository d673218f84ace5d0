"""Token-level validation: one crafted sample per reason, the check order, the echo and loop detectors."""

from __future__ import annotations

import numpy as np
import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.logprobs import LOGPROBS_KEY, compact
from eagle_datagen.profile import load_profile
from eagle_datagen.validation.rules import (
    REASONS,
    ValidationLimits,
    answer_length,
    find_repetition_loop,
    reasoning_length,
    validate_sample,
)

KIMI = load_profile("kimi-k2.5")
QWEN = load_profile("qwen3")
assert KIMI.thinking == "prefilled" and QWEN.thinking == "generated"

THINK, END, EOS = 163606, 163607, 163586  # Kimi <think>, </think>, <|im_end|>
Q_THINK, Q_END, Q_EOS = 151667, 151668, 151645  # Qwen3
# "What is 2+2?" rendered by the Kimi template ends in <|im_end|><|im_assistant|>assistant<|im_middle|><think>.
KIMI_PROMPT = [163587, 1, 2, 163601, 220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]
QWEN_PROMPT = [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198]
REASONING = [40, 1184, 311, 912, 220, 17, 323, 220, 17]
ANSWER = [19, 13]


def row(prompt, output, **overrides):
    base = {
        "sample_id": "s0",
        "prompt_ids": list(prompt),
        "output_ids": list(output),
        "finish_reason": "stop",
        "completion_tokens": len(output),
        "prompt_tokens": len(prompt),
        "error": None,
    }
    return base | overrides


def kimi(output=None, **overrides):
    output = REASONING + [END] + ANSWER + [EOS] if output is None else output
    return row(KIMI_PROMPT, output, **overrides)


def qwen(output=None, **overrides):
    output = [Q_THINK] + REASONING + [Q_END] + ANSWER + [Q_EOS] if output is None else output
    return row(QWEN_PROMPT, output, **overrides)


def test_valid_samples_pass():
    assert validate_sample(kimi(), KIMI) is None
    assert validate_sample(qwen(), QWEN) is None


def test_numpy_ids_and_sglang_finish_mapping_are_accepted():
    sample = kimi()
    sample["prompt_ids"] = np.asarray(sample["prompt_ids"], dtype=np.int32)
    sample["output_ids"] = np.asarray(sample["output_ids"], dtype=np.int32)
    sample["finish_reason"] = {"type": "stop", "matched": EOS}
    assert validate_sample(sample, KIMI) is None


LOOP = REASONING + [END] + ANSWER + [7, 8, 9] * 10 + [EOS]
VALID = REASONING + [END] + ANSWER + [EOS]


def with_logprobs(k=2, output=VALID, **damage):
    """A valid Kimi row whose answer carries top-k logprobs as SGLang returns them (compacted by the client);
    `damage`: short (one position fewer), mismatch (a sampled logprob off), invalid (a positive logprob), none."""
    own = [[-0.25, t, None] for t in output]
    tops = [[[-0.25, t, None]] + [[-2.0 - j, 1000 + j, None] for j in range(k - 1)] for t in output]
    if damage.get("short"):
        tops = tops[:-1]
    if damage.get("mismatch"):
        own[3][0] = -0.5
    if damage.get("invalid"):
        tops[2][1][0] = 0.5
    meta = {"output_token_logprobs": own, "output_top_logprobs": tops}
    logprobs = None if damage.get("none") else compact(meta)[LOGPROBS_KEY]
    return kimi(output, top_logprobs_num=k, logprobs=logprobs)

# reason -> (profile, row, limits): each row fails that check and passes every check before it.
CASES = {
    "request_error": (KIMI, kimi([], error="HTTP 400: The input is too long", finish_reason="error"), None),
    "finish_abort": (KIMI, kimi([5, 6], finish_reason="abort"), None),
    "finish_length": (KIMI, kimi(REASONING, finish_reason="length"), None),
    "prompt_suffix": (KIMI, row(KIMI_PROMPT[:-1], REASONING + [END] + ANSWER + [EOS]), None),
    "prompt_tokens_mismatch": (KIMI, kimi(prompt_tokens=len(KIMI_PROMPT) + 1), None),
    "completion_tokens_mismatch": (KIMI, kimi(completion_tokens=3), None),
    "prompt_echo": (KIMI, kimi([163601, THINK] + REASONING + [END] + ANSWER + [EOS]), None),
    "id_out_of_range": (KIMI, kimi(REASONING + [163840, END] + ANSWER + [EOS]), None),
    "no_eos": (KIMI, kimi(REASONING + [END] + ANSWER), None),
    "think_start_in_output": (KIMI, kimi(REASONING + [THINK, END] + ANSWER + [EOS]), None),
    "think_token_in_instant": (
        KIMI,
        row(KIMI_PROMPT + [END], REASONING + [END] + ANSWER + [EOS], mode="instant"),
        None,
    ),
    "missing_think_start": (QWEN, qwen(REASONING + [Q_END] + ANSWER + [Q_EOS]), None),
    "multiple_think_start": (QWEN, qwen([Q_THINK] + REASONING + [Q_THINK, Q_END] + ANSWER + [Q_EOS]), None),
    "missing_think_end": (KIMI, kimi(REASONING + ANSWER + [EOS]), None),
    "multiple_think_end": (KIMI, kimi(REASONING + [END] + ANSWER + [END, 5, EOS]), None),
    "think_end_before_start": (QWEN, qwen(REASONING + [Q_END, Q_THINK] + ANSWER + [Q_EOS]), None),
    "empty_answer": (KIMI, kimi(REASONING + [END, EOS]), None),
    "runaway_thinking": (KIMI, kimi(), ValidationLimits(max_reasoning_tokens=len(REASONING) - 1)),
    "repetition_loop": (KIMI, kimi(LOOP), None),
    "logprobs_missing": (KIMI, with_logprobs(none=True), None),
    "logprobs_shape": (KIMI, with_logprobs(short=True), None),
    "logprobs_invalid": (KIMI, with_logprobs(invalid=True), None),
    "logprob_mismatch": (KIMI, with_logprobs(mismatch=True), None),
}


def test_every_reason_has_a_case():
    assert set(CASES) == set(REASONS)
    assert list(CASES) == list(REASONS)  # the cases follow the check order


@pytest.mark.parametrize("reason", list(CASES))
def test_each_reason(reason):
    profile, sample, limits = CASES[reason]
    result = validate_sample(sample, profile, limits or ValidationLimits())
    assert result is not None and result[0] == reason, result
    assert result[1] and "\n" not in result[1]


def test_generated_thinking_missing_and_multiple_think_end():
    assert validate_sample(qwen([Q_THINK] + REASONING + ANSWER + [Q_EOS]), QWEN)[0] == "missing_think_end"
    assert validate_sample(qwen([Q_THINK] + REASONING + [Q_END, Q_END] + ANSWER + [Q_EOS]), QWEN)[0] == (
        "multiple_think_end"
    )


def test_details_name_the_facts():
    assert validate_sample(CASES["request_error"][1], KIMI) == ("request_error", "HTTP 400: The input is too long")
    assert "163840" in validate_sample(CASES["id_out_of_range"][1], KIMI)[1]
    assert "163607" in validate_sample(CASES["missing_think_end"][1], KIMI)[1]
    assert "repeated 10 times" in validate_sample(CASES["repetition_loop"][1], KIMI)[1]
    assert validate_sample(kimi(finish_reason="error"), KIMI)[0] == "no_eos"  # ends in EOS, but not "stop"
    assert validate_sample(kimi([]), KIMI)[0] == "no_eos"
    assert validate_sample(kimi(prompt_ids=[5, -1, THINK], prompt_tokens=3), KIMI)[0] == "id_out_of_range"
    assert validate_sample(kimi(output_ids=[5, None, EOS], completion_tokens=None), KIMI)[0] == "id_out_of_range"


def test_missing_token_counts_are_not_checked():
    assert validate_sample(kimi(prompt_tokens=None, completion_tokens=None), KIMI) is None


@pytest.mark.parametrize(
    ("sample", "first"),
    [
        # an error row carries no output at all: the error is the reason
        (kimi([], error="boom", finish_reason="abort"), "request_error"),
        # truncated and echoed: the truncation is reported, the sample is quarantined either way
        (kimi([163601, THINK] + REASONING, finish_reason="length"), "finish_length"),
        # the echo bug's signature: extra ids AND the prompt's tail in front: the count check comes first
        (
            kimi([163601, THINK] + REASONING + [END] + ANSWER + [EOS], completion_tokens=14),
            "completion_tokens_mismatch",
        ),
        # echoed <think> also means "<think> in the output": the echo is the more specific cause
        (kimi([THINK] + REASONING + [END] + ANSWER + [EOS]), "prompt_echo"),
        # no EOS and no </think>: the EOS check comes first
        (kimi(REASONING + ANSWER), "no_eos"),
        # an empty answer that also exceeds the reasoning limit
        (kimi(REASONING + [END, EOS], completion_tokens=11), "empty_answer"),
    ],
)
def test_check_order(sample, first):
    assert validate_sample(sample, KIMI, ValidationLimits(max_reasoning_tokens=1))[0] == first


def test_echo_of_one_special_token():
    # Kimi's prompt ends in <think> (a tag): a valid output never starts with it.
    assert validate_sample(kimi([THINK, 5, END, 6, EOS]), KIMI)[0] == "prompt_echo"


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_echo_of_several_ids(k):
    output = KIMI_PROMPT[-k:] + REASONING + [END] + ANSWER + [EOS]
    reason, detail = validate_sample(kimi(output), KIMI)
    assert reason == "prompt_echo" and f"last {k} id(s)" in detail
    output = QWEN_PROMPT[-k:] + [Q_THINK] + REASONING + [Q_END] + ANSWER + [Q_EOS]
    assert validate_sample(qwen(output), QWEN)[0] == "prompt_echo"


def reason(sample, profile=KIMI, limits=None):
    result = validate_sample(sample, profile, limits or ValidationLimits())
    return result and result[0]


def test_echo_rule_does_not_flag_legitimate_outputs():
    # Qwen's prompt ends in an ordinary newline (198): an output that starts with one by chance is valid.
    assert reason(qwen([198, Q_THINK] + REASONING + [Q_END] + ANSWER + [Q_EOS]), QWEN) is None
    # An output that starts with an id of the prompt's tail other than its last one is not an echo.
    assert reason(kimi([163601] + REASONING + [END] + ANSWER + [EOS])) is None
    assert reason(kimi([69702, 163601] + REASONING + [END] + ANSWER + [EOS])) is None
    # The tail's ids later in the output are not an echo (here: <think> in the output, its own reason).
    assert reason(kimi([5, 163601, THINK] + REASONING + [END] + ANSWER + [EOS])) == "think_start_in_output"
    # Only the largest echoed run is reported.
    assert validate_sample(kimi(KIMI_PROMPT[-3:] + REASONING + [END, 5, EOS]), KIMI)[1].startswith(
        "output_ids start with the prompt's last 3 id(s)"
    )
    # Turned off.
    output = [163601, THINK] + REASONING + [END] + ANSWER + [EOS]
    assert reason(kimi(output), KIMI, ValidationLimits(echo_tail=0)) == "think_start_in_output"


def test_reasoning_and_answer_length():
    output = REASONING + [END] + ANSWER + [EOS]
    assert reasoning_length(output, KIMI) == len(REASONING)
    assert answer_length(output, KIMI) == len(ANSWER)
    assert answer_length(np.asarray(REASONING + [END] + ANSWER), KIMI) == len(ANSWER)  # truncated: no EOS
    assert answer_length(REASONING + [END, EOS], KIMI) == 0
    assert reasoning_length(REASONING, KIMI) is None and answer_length(REASONING, KIMI) is None
    assert reasoning_length([], KIMI) is None


def test_runaway_thinking_is_off_by_default():
    long = list(range(1000, 60000))
    assert validate_sample(kimi(long + [END] + ANSWER + [EOS]), KIMI) is None
    limits = ValidationLimits(max_reasoning_tokens=len(long))
    assert validate_sample(kimi(long + [END] + ANSWER + [EOS]), KIMI, limits) is None
    limits = ValidationLimits(max_reasoning_tokens=len(long) - 1)
    assert validate_sample(kimi(long + [END] + ANSWER + [EOS]), KIMI, limits)[0] == "runaway_thinking"


def natural(length, seed):
    """Zipf-distributed ids (like text: a few very common tokens), in the ordinary range."""
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.2, size=length) % 163000).astype(np.int64)


@pytest.mark.parametrize("n", [1, 2, 7, 32])
def test_loop_detector_finds_loops(n):
    rng = np.random.default_rng(n)
    gram = list(rng.integers(1000, 2000, size=n))
    while n > 1 and len(set(gram)) == 1:
        gram = list(rng.integers(1000, 2000, size=n))
    prefix = list(natural(300, n))
    assert find_repetition_loop(prefix + gram * 8) == (n, 8)
    assert find_repetition_loop(prefix + gram * 7) is None
    assert find_repetition_loop(prefix + gram * 20 + gram[: n // 2]) == (n, (20 * n + n // 2) // n)
    output = REASONING + [END] + prefix + gram * (2048 // n) + [EOS]
    reason, detail = validate_sample(kimi(output), KIMI)
    assert reason == "repetition_loop" and f"a {n}-gram" in detail
    # the window caps what is looked at (and counted)
    assert f"repeated {1024 // n} times" in detail


def test_loop_detector_reports_the_smallest_period():
    assert find_repetition_loop([1, 2, 3] + [5] * 64) == (1, 64)
    assert find_repetition_loop([9] + [5, 6] * 16) == (2, 16)


def test_loop_detector_ignores_natural_text():
    for seed in range(50):
        ids = natural(5000, seed)
        assert find_repetition_loop(ids) is None, seed
        assert find_repetition_loop(ids[-100:]) is None
    output = REASONING + [END] + natural(3000, 99).tolist() + [EOS]
    assert validate_sample(kimi(output), KIMI) is None
    # a structured but valid ending: a list whose items repeat a short pattern fewer than 8 times
    assert find_repetition_loop([4, 5] + [10, 11, 12, 13] * 7) is None


def test_loop_detector_short_inputs():
    assert find_repetition_loop([]) is None
    assert find_repetition_loop([5] * 7) is None
    assert find_repetition_loop([5] * 8) == (1, 8)
    assert find_repetition_loop([5, 6] * 8, ngram_max=1) is None


def test_loop_only_counts_at_the_end():
    # A loop in the reasoning that the model got out of is not a degenerate ending.
    output = REASONING + [77] * 50 + [END] + natural(200, 3).tolist() + [EOS]
    assert validate_sample(kimi(output), KIMI) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"loop_min_repeats": 1},
        {"loop_ngram_max": 0},
        {"loop_window": 100},
        {"max_reasoning_tokens": -1},
        {"echo_tail": -1},
    ],
)
def test_bad_limits(kwargs):
    with pytest.raises(ConfigError):
        ValidationLimits(**kwargs)
