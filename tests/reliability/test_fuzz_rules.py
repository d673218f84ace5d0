"""Property-based tests of the token-level validation rules (validation/rules.py): a well-formed sample always
passes, every single mutation of a known kind is caught with its own reason, and arbitrary rows never raise."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from eagle_datagen.profile import load_profile
from eagle_datagen.validation.rules import REASONS, ValidationLimits, find_repetition_loop, validate_sample

KIMI = load_profile("kimi-k2.5")
THINK, END, EOS = KIMI.think_start.id, KIMI.think_end.id, KIMI.eos.id
ORDINARY = st.integers(0, 163583)  # the BPE ranks: never a think or EOS token
TEMPLATE_TAIL = [163586, 163588, 69702, 163601, THINK]  # <|im_end|><|im_assistant|>assistant<|im_middle|><think>


@st.composite
def samples(draw) -> dict:
    """A well-formed Kimi sample: prompt ending in the template's tail, reasoning, </think>, answer, EOS."""
    prompt = [163587, 1, 163601, *draw(st.lists(ORDINARY, max_size=40)), *TEMPLATE_TAIL]
    reasoning = draw(st.lists(ORDINARY, min_size=1, max_size=60))
    answer = draw(st.lists(ORDINARY, min_size=1, max_size=30))
    output = [*reasoning, END, *answer, EOS]
    assume(find_repetition_loop(np.asarray(output[:-1])) is None)  # a random tail can be a loop by chance
    return {
        "prompt_ids": prompt,
        "output_ids": output,
        "finish_reason": "stop",
        "prompt_tokens": len(prompt),
        "completion_tokens": len(output),
        "error": None,
        "_reasoning": len(reasoning),
    }


def row(sample: dict, **changes) -> dict:
    result = {k: v for k, v in sample.items() if not k.startswith("_")} | changes
    if "output_ids" in changes and "completion_tokens" not in changes:
        result["completion_tokens"] = len(result["output_ids"])  # a consistent server: only the ids are wrong
    return result


@given(samples())
def test_a_well_formed_sample_always_passes(sample):
    assert validate_sample(row(sample), KIMI) is None


def insert(ids: list[int], position: int, value: int) -> list[int]:
    return [*ids[:position], value, *ids[position:]]


MUTATIONS = [
    "error",
    "abort",
    "length",
    "suffix",
    "prompt_count",
    "completion_count",
    "echo",
    "too_large_id",
    "negative_id",
    "float_id",
    "drop_eos",
    "not_stop",
    "think_start",
    "drop_think_end",
    "extra_think_end",
    "empty_answer",
    "runaway",
    "loop",
]


@given(samples(), st.sampled_from(MUTATIONS), st.data())
def test_every_mutation_is_caught_with_its_reason(sample, mutation, data):
    output, prompt = sample["output_ids"], sample["prompt_ids"]
    where = data.draw(st.integers(1, len(output) - 1), label="position")  # inside the output, after its first id
    limits = ValidationLimits()
    if mutation == "error":
        mutated, reason = row(sample, error="HTTP 400: bad request", output_ids=[]), "request_error"
    elif mutation == "abort":
        mutated, reason = row(sample, finish_reason={"type": "abort", "message": "x"}), "finish_abort"
    elif mutation == "length":
        mutated, reason = row(sample, finish_reason="length"), "finish_length"
    elif mutation == "suffix":
        cut = data.draw(st.integers(1, len(TEMPLATE_TAIL)), label="cut")
        mutated, reason = row(sample, prompt_ids=prompt[:-cut], prompt_tokens=len(prompt) - cut), "prompt_suffix"
    elif mutation == "prompt_count":
        off = data.draw(st.integers(1, 5) | st.integers(-5, -1), label="off")
        mutated, reason = row(sample, prompt_tokens=len(prompt) + off), "prompt_tokens_mismatch"
    elif mutation == "completion_count":
        off = data.draw(st.integers(1, 5) | st.integers(-5, -1), label="off")
        mutated, reason = row(sample, completion_tokens=len(output) + off), "completion_tokens_mismatch"
    elif mutation == "echo":
        k = data.draw(st.integers(1, 5), label="echoed")
        mutated, reason = row(sample, output_ids=[*prompt[-k:], *output]), "prompt_echo"
    elif mutation == "too_large_id":
        bad = data.draw(st.integers(KIMI.vocab_size, 2**62), label="id")
        mutated, reason = row(sample, output_ids=insert(output, where, bad)), "id_out_of_range"
    elif mutation == "negative_id":
        bad = data.draw(st.integers(-(2**62), -1), label="id")
        mutated, reason = row(sample, output_ids=insert(output, where, bad)), "id_out_of_range"
    elif mutation == "float_id":
        mutated, reason = row(sample, output_ids=insert(output, where, 17.5)), "id_out_of_range"
    elif mutation == "drop_eos":
        mutated, reason = row(sample, output_ids=output[:-1]), "no_eos"
    elif mutation == "not_stop":
        mutated, reason = row(sample, finish_reason="unknown"), "no_eos"
    elif mutation == "think_start":
        mutated, reason = row(sample, output_ids=insert(output, where, THINK)), "think_start_in_output"
    elif mutation == "drop_think_end":
        mutated, reason = row(sample, output_ids=[i for i in output if i != END]), "missing_think_end"
    elif mutation == "extra_think_end":
        mutated, reason = row(sample, output_ids=insert(output, where, END)), "multiple_think_end"
    elif mutation == "empty_answer":
        mutated, reason = row(sample, output_ids=[*output[: sample["_reasoning"] + 1], EOS]), "empty_answer"
    elif mutation == "runaway":
        limits = ValidationLimits(max_reasoning_tokens=sample["_reasoning"] - 1)
        mutated, reason = row(sample), "runaway_thinking"
    else:  # loop: an n-gram repeated 8 times before the EOS
        gram = data.draw(st.lists(ORDINARY, min_size=1, max_size=32), label="gram")
        mutated, reason = row(sample, output_ids=[*output[:-1], *gram * 8, EOS]), "repetition_loop"
    result = validate_sample(mutated, KIMI, limits)
    assert result is not None and result[0] == reason, (mutation, result)
    assert result[1]  # with a detail


ANY_ID = st.integers(-(2**70), 2**70) | st.integers(0, 163900) | st.sampled_from([THINK, END, EOS])
ANY_IDS = (
    st.none()
    | st.lists(ANY_ID, max_size=50)
    | st.lists(st.floats() | st.booleans() | st.text(max_size=2) | st.none(), max_size=5)
    | st.lists(st.lists(ANY_ID, max_size=3), max_size=3)
    | st.text(max_size=5)
    | st.integers()
    | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)
)
ANY_VALUE = st.none() | st.integers() | st.floats() | st.text(max_size=5) | st.booleans()
ANY_FINISH = ANY_VALUE | st.sampled_from(["stop", "length", "abort"]) | st.fixed_dictionaries({"type": ANY_VALUE})


@given(ANY_IDS, ANY_IDS, ANY_FINISH, ANY_VALUE, ANY_VALUE, st.none() | st.text(max_size=5))
def test_arbitrary_rows_never_raise(prompt, output, finish, prompt_tokens, completion_tokens, error):
    row_ = {
        "prompt_ids": prompt,
        "output_ids": output,
        "finish_reason": finish,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "error": error,
    }
    result = validate_sample(row_, KIMI)
    assert result is None or (result[0] in REASONS and isinstance(result[1], str))


@given(st.lists(st.integers(-5, 5), max_size=300), st.integers(1, 40), st.integers(2, 10))
def test_the_loop_finder_never_raises_and_finds_real_loops(ids, ngram_max, repeats):
    found = find_repetition_loop(np.asarray(ids, dtype=np.int64), ngram_max, repeats)
    if found is not None:
        n, count = found
        assert 1 <= n <= ngram_max and count >= repeats
        tail = ids[len(ids) - n * repeats :]
        assert tail == tail[:n] * repeats  # the tail really is that n-gram repeated
