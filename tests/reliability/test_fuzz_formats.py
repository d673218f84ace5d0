"""Fuzzing the source formats: any value, in any format, maps to a valid record or a named reject, never an
exception (hypothesis; budgets in tests/conftest.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from test_fuzz_records import ANY_JSON, check_outcome

from eagle_datagen.records import Reject, validate_record
from eagle_datagen.sources.formats import FORMAT_NAMES, HISTORY_POLICIES, SourceFormat
from fuzz_strategies import one_value_changed

SHAREGPT = {
    "id": 3,
    "category": "chat",
    "system": "be brief",
    "tools": '[{"type": "function", "function": {"name": "f"}}]',
    "conversations": [
        {"from": "human", "value": "look it up"},
        {"from": "function_call", "value": '{"name": "f", "arguments": {"q": "x"}}'},
        {"from": "observation", "value": "found"},
        {"from": "gpt", "value": "it is found"},
        {"from": "human", "value": "thanks"},
    ],
}
ALPACA = {"id": "a", "category": "chat", "instruction": "add", "input": "2 and 3", "output": "5"}
FORMATS = st.builds(
    SourceFormat,
    st.none() | st.sampled_from(FORMAT_NAMES),
    st.just({}) | st.just({"prompt": "instruction"}),
    st.none() | st.sampled_from(HISTORY_POLICIES),
)


def outcome(raw, fmt: SourceFormat):
    mapped = fmt.convert(raw, "fuzz:1")
    return mapped if isinstance(mapped, Reject) else validate_record(mapped, "fuzz:1")


def test_the_examples_map_to_records():
    assert not isinstance(outcome(SHAREGPT, SourceFormat()), Reject)
    assert not isinstance(outcome(ALPACA, SourceFormat()), Reject)


@given(one_value_changed(SHAREGPT, ANY_JSON), FORMATS)
def test_a_sharegpt_record_with_any_one_value_changed(value, fmt):
    check_outcome(outcome(value, fmt))


@given(one_value_changed(ALPACA, ANY_JSON), FORMATS)
def test_an_alpaca_record_with_any_one_value_changed(value, fmt):
    check_outcome(outcome(value, fmt))


@given(ANY_JSON, FORMATS)
def test_any_json_value_in_any_format(value, fmt):
    check_outcome(outcome(value, fmt))
