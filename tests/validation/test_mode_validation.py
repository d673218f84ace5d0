"""Validation per mode: each wrong shape of a thinking or instant sample is quarantined with its reason, a model's
own answer is never taken for a server fault (it would be sent again for ever), and a reason of one mode is judged
as a share of that mode's samples."""

from __future__ import annotations

import pytest

from eagle_datagen.profile import load_profile
from eagle_datagen.validation.diagnosis import DiagnosisThresholds, ValidationFailed, check_run, diagnose
from eagle_datagen.validation.rules import validate_sample
from eagle_datagen.validation.screening import judge_answer

KIMI = load_profile("kimi-k2.5")
QWEN = load_profile("qwen3")
R1 = load_profile("deepseek-r1")
THINK, END, EOS = 163606, 163607, 163586
# "What is 2+2?" as the Kimi template renders it, in each mode
THINKING_PROMPT = [163587, 1, 2, 163601, 220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, THINK]
INSTANT_PROMPT = THINKING_PROMPT + [END]
REASONING, ANSWER = [40, 1184, 311, 912], [19, 13, 220, 17]


def row(prompt: list[int], output: list[int], mode: str | None, **changes) -> dict:
    base = {
        "prompt_ids": prompt,
        "output_ids": output,
        "finish_reason": "stop",
        "completion_tokens": len(output),
        "prompt_tokens": len(prompt),
        "error": None,
        "mode": mode,
    }
    return base | changes


def test_a_valid_sample_of_each_mode_passes():
    assert validate_sample(row(THINKING_PROMPT, REASONING + [END] + ANSWER + [EOS], "thinking"), KIMI) is None
    assert validate_sample(row(INSTANT_PROMPT, ANSWER + [EOS], "instant"), KIMI) is None
    # a row without a mode (a shard of contract v1.0) is a thinking sample
    assert validate_sample(row(THINKING_PROMPT, REASONING + [END] + ANSWER + [EOS], None), KIMI) is None


@pytest.mark.parametrize(
    "output, found",
    [
        (REASONING + [END] + ANSWER + [EOS], "</think> (163607) x1"),  # it reasoned anyway
        ([END] + ANSWER + [EOS], "</think> (163607) x1, the first at 0"),  # closed the block again
        ([THINK] + REASONING + [END] + ANSWER + [EOS], "<think> (163606) x1, </think> (163607) x1"),
        (ANSWER + [THINK, EOS], "<think> (163606) x1, the first at 4"),
    ],
)
def test_a_think_token_in_an_instant_answer_is_quarantined_with_its_reason(output, found):
    reason, detail = validate_sample(row(INSTANT_PROMPT, output, "instant"), KIMI)
    assert reason == "think_token_in_instant"
    assert found in detail


@pytest.mark.parametrize(
    "output",
    [[END] + ANSWER + [EOS], [THINK, END] + ANSWER + [EOS], REASONING + [END] + ANSWER + [EOS]],
)
def test_an_instant_answer_that_starts_like_its_prompt_ends_is_the_model_s_not_a_server_fault(output):
    """The instant prompt ends in <think></think>: an answer that writes those tokens first is what a model
    ignoring the switch does, the same for every resend, so it must be quarantined, not retried as an echo."""
    verdict = judge_answer(INSTANT_PROMPT, output, {"finish_reason": {"type": "stop"}}, KIMI, mode="instant")
    assert verdict.reason == "think_token_in_instant" and not verdict.server_fault


def test_the_echo_bug_is_still_found_in_instant_mode():
    echoed = INSTANT_PROMPT[-3:] + ANSWER + [EOS]  # three prompt ids copied in front: past the think block
    reason, detail = validate_sample(row(INSTANT_PROMPT, echoed, "instant"), KIMI)
    assert reason == "prompt_echo" and "last 3 id(s)" in detail
    # the bug's own signature (completion_tokens counting only the real output) catches a shorter copy
    short = INSTANT_PROMPT[-2:] + ANSWER + [EOS]
    verdict = judge_answer(
        INSTANT_PROMPT,
        short,
        {"finish_reason": {"type": "stop"}, "completion_tokens": len(short) - 2},
        KIMI,
        mode="instant",
    )
    assert verdict.reason == "completion_tokens_mismatch" and verdict.server_fault


def test_a_missing_think_end_in_a_thinking_answer_is_quarantined_with_its_reason():
    reason, detail = validate_sample(row(THINKING_PROMPT, REASONING + ANSWER + [EOS], "thinking"), KIMI)
    assert (reason, detail) == ("missing_think_end", "no </think> (163607) in the output")
    # the same answer is a valid instant answer: the check is the mode's
    assert validate_sample(row(INSTANT_PROMPT, REASONING + ANSWER + [EOS], "instant"), KIMI) is None


@pytest.mark.parametrize(
    "prompt, mode, named",
    [
        (
            THINKING_PROMPT,
            "instant",
            "the prompt is the thinking mode's, the sample instant (rendered in the wrong mode)",
        ),
        (
            INSTANT_PROMPT,
            "thinking",
            "the prompt is the instant mode's, the sample thinking (rendered in the wrong mode)",
        ),
    ],
)
def test_a_prompt_of_the_wrong_mode_is_quarantined_with_its_reason(prompt, mode, named):
    reason, detail = validate_sample(row(prompt, ANSWER + [EOS], mode), KIMI)
    assert reason == "prompt_suffix"
    assert detail.endswith(named)


def test_an_empty_instant_answer_and_a_mode_the_profile_lacks():
    assert validate_sample(row(INSTANT_PROMPT, [EOS], "instant"), KIMI)[0] == "empty_answer"
    prompt = [1, 2, 128804]  # DeepSeek-R1's assistant tag ends its prompt; it has no instant mode
    reason, detail = validate_sample(row(prompt, [5, EOS], "instant"), R1)
    assert reason == "prompt_suffix" and "declares no instant mode" in detail


def test_qwen3_instant_mode():
    """Qwen3's enable_thinking=False closes an empty think block in the prompt; the answer has no think token."""
    prompt = [151644, 872, 198, 3838, 30, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271]
    assert validate_sample(row(prompt, [40, 1184, 151645], "instant"), QWEN) is None
    assert validate_sample(row(prompt, [151667, 40, 151668, 1184, 151645], "instant"), QWEN)[0] == (
        "think_token_in_instant"
    )
    # the thinking prompt (the model writes <think> itself) is the wrong mode here
    assert validate_sample(row(prompt[:-4], [40, 151645], "instant"), QWEN)[0] == "prompt_suffix"


def test_a_reason_of_one_mode_is_a_share_of_that_mode():
    """A mix of 30 thinking and 70 instant samples whose every thinking answer lacks </think> (a server stripping
    think tokens): 30% of the run, under the 50% threshold, but all of the thinking samples."""
    counts, totals = {"missing_think_end": 30}, {"thinking": 30, "instant": 70}
    assert diagnose(counts, 100, profile=KIMI) == []
    with pytest.raises(ValidationFailed, match=r"^100% \(30/30\) of samples have no </think>"):
        check_run(counts, 100, DiagnosisThresholds(), KIMI, mode_totals=totals)
    lines = diagnose({"think_token_in_instant": 15}, 100, profile=KIMI, mode_totals={"thinking": 80, "instant": 20})
    assert len(lines) == 1 and lines[0].startswith("75% (15/20) of instant answers hold <think> (163606)")
    assert "thinking" in lines[0] and "--tokenizer" in lines[0]
