"""Every kind of malformed record is rejected with its own reason, and good records around it go on."""

from __future__ import annotations

import json

import pytest

from eagle_datagen.records import validate_record
from eagle_datagen.sources.collect import collect_prompts, plans_from_sources

from conftest import user_record, write_jsonl

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def msgs(*messages):
    return {"category": "chat", "messages": list(messages)}


U = {"role": "user", "content": "hello"}

# (kind, raw JSONL line as bytes or a record, expected reason)
MALFORMED = [
    ("invalid_json", b'{"category": "chat", "messages": [', "invalid_json"),
    ("trailing_garbage", b'{"category": "chat"} xyz', "invalid_json"),
    ("invalid_utf8", b'{"category": "chat", "messages": [{"role": "user", "content": "\xff\xfe"}]}', "invalid_utf8"),
    ("not_an_object", b"[1, 2, 3]", "not_an_object"),
    ("a_bare_string", b'"just text"', "not_an_object"),
    ("missing_messages", {"category": "chat"}, "missing_messages"),
    ("messages_null", {"category": "chat", "messages": None}, "missing_messages"),
    ("messages_not_list", {"category": "chat", "messages": "hello"}, "messages_not_list"),
    ("empty_messages", {"category": "chat", "messages": []}, "empty_messages"),
    ("message_not_object", msgs("hello"), "message_not_object"),
    ("unknown_role", msgs({"role": "wizard", "content": "x"}), "unknown_role"),
    ("missing_role", msgs({"content": "x"}), "unknown_role"),
    ("non_string_content", msgs({"role": "user", "content": 42}), "content_not_string"),
    ("content_as_parts", msgs({"role": "user", "content": [{"type": "text", "text": "x"}]}), "content_not_string"),
    ("missing_content", msgs({"role": "user"}), "missing_content"),
    ("empty_user_content", msgs({"role": "user", "content": "  "}), "empty_content"),
    ("last_from_assistant", msgs(U, {"role": "assistant", "content": "hi"}), "last_message_role"),
    ("last_is_system", msgs({"role": "system", "content": "be nice"}), "last_message_role"),
    ("category_traversal", user_record("x", category="../etc"), "bad_category"),
    ("category_uppercase", user_record("x", category="Math"), "bad_category"),
    ("category_spaces", user_record("x", category="tool use"), "bad_category"),
    ("category_not_string", user_record("x", category=7), "bad_category"),
    ("category_too_long", user_record("x", category="a" * 65), "bad_category"),
    ("missing_category", {"messages": [U]}, "missing_category"),
    ("content_2mb", user_record("x" * 2_000_000), "record_too_large"),
    ("nul_byte", user_record("a\x00b"), "nul_byte"),
    (
        "lone_surrogate",
        b'{"category": "chat", "messages": [{"role": "user", "content": "a\\ud800b"}]}',
        "lone_surrogate",
    ),
    ("tools_not_list", user_record("x", tools={"name": "f"}), "tools_not_list"),
    ("tool_not_object", user_record("x", tools=["f"]), "bad_tool"),
    ("tool_without_name", user_record("x", tools=[{"type": "function", "function": {}}]), "bad_tool"),
    ("tool_wrong_type", user_record("x", tools=[{"type": "retrieval", "function": {"name": "f"}}]), "bad_tool"),
    ("tool_declared_twice", user_record("x", tools=[{"type": "function", "function": {"name": "f"}}] * 2), "bad_tool"),
    (
        "tool_calls_not_list",
        msgs(
            U,
            {"role": "assistant", "content": "", "tool_calls": {"id": "c1"}},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ),
        "bad_tool_calls",
    ),
    (
        "tool_call_without_id",
        msgs(
            U,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
        ),
        "bad_tool_calls",
    ),
    (
        "tool_call_bad_arguments",
        msgs(
            U,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": 5}}],
            },
        ),
        "bad_tool_calls",
    ),
    ("tool_calls_on_user", msgs({"role": "user", "content": "x", "tool_calls": [CALL]}), "bad_tool_calls"),
    (
        "tool_result_unknown_call",
        msgs(U, {"role": "tool", "tool_call_id": "nope", "content": "r"}),
        "tool_result_without_call",
    ),
    (
        "tool_result_without_id",
        msgs(U, {"role": "assistant", "content": "", "tool_calls": [CALL]}, {"role": "tool", "content": "r"}),
        "tool_result_without_call",
    ),
    ("name_not_string", msgs({"role": "user", "content": "x", "name": ["a"]}), "bad_field_type"),
    (
        "reasoning_not_string",
        msgs(U, {"role": "assistant", "content": "a", "reasoning_content": 1}, U),
        "bad_field_type",
    ),
    ("id_not_string", user_record("x", id=12), "bad_id"),
    ("id_empty", user_record("x", id=""), "bad_id"),
    ("source_not_string", user_record("x", source={"a": 1}), "bad_field_type"),
    (
        "deep_nesting",
        user_record(
            "x", tools=[{"type": "function", "function": {"name": "f", "parameters": json.loads("[" * 40 + "]" * 40)}}]
        ),
        "too_deeply_nested",
    ),
    (
        "parse_bomb_nesting",
        b'{"category": "chat", "messages": ' + b"[" * 100000 + b"]" * 100000 + b"}",
        "too_deeply_nested",
    ),
]


def test_there_are_at_least_25_kinds():
    assert len({kind for kind, _, _ in MALFORMED}) >= 25
    assert len({reason for _, _, reason in MALFORMED}) >= 20


def test_each_malformed_record_is_rejected_with_its_reason_and_good_ones_go_through(tmp_path):
    rows, expected = [], {}
    for i, (kind, raw, reason) in enumerate(MALFORMED):
        rows.append(user_record(f"good prompt {i}", id=f"good-{i}"))
        rows.append(raw)
        expected[2 * i + 2] = (kind, reason)  # JSONL line numbers are 1-based
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)

    collected = collect_prompts(plans_from_sources([str(path)]))

    assert sorted(p.record_id for p in collected.prompts) == sorted(f"good-{i}" for i in range(len(MALFORMED)))
    by_line = {int(r.origin.rsplit(":", 1)[1]): r for r in collected.rejects}
    assert set(by_line) == set(expected)
    for line, (kind, reason) in expected.items():
        reject = by_line[line]
        assert reject.reason == reason, f"{kind}: got {reject.reason} ({reject.detail})"
        assert reject.detail and str(path) in reject.origin
        json.dumps(reject.to_json(), ensure_ascii=False).encode("utf-8")  # always writable


def test_reject_details_say_where_the_problem_is():
    reject = validate_record(msgs(U, {"role": "wizard", "content": "x"}), "f.jsonl:3")
    assert reject.reason == "unknown_role"
    assert "messages[1].role" in reject.detail and "'wizard'" in reject.detail


@pytest.mark.parametrize("limit", [100, 10_000])
def test_record_size_limit_is_configurable(limit):
    from eagle_datagen.records import RecordLimits

    outcome = validate_record(user_record("x" * 5000), "o", limits=RecordLimits(max_record_bytes=limit))
    assert (getattr(outcome, "reason", None) == "record_too_large") == (limit < 5000)


def test_unknown_message_keys_are_dropped_and_do_not_change_the_prompt_id():
    plain = validate_record(user_record("hello"), "o")
    extra = validate_record({"category": "chat", "messages": [{**U, "content": "hello", "weight": 1}]}, "o")
    assert plain.prompt_id == extra.prompt_id
    assert extra.messages == [{"role": "user", "content": "hello"}]


def test_prompt_id_covers_messages_and_tools_but_not_id_category_or_source():
    tool = {"type": "function", "function": {"name": "f"}}
    a = validate_record(user_record("hello", id="a", category="chat", source="s1"), "o")
    b = validate_record(user_record("hello", id="b", category="math", source="s2"), "o")
    c = validate_record(user_record("hello", tools=[tool]), "o")
    d = validate_record(user_record("hello", tools=[]), "o")
    assert a.prompt_id == b.prompt_id == d.prompt_id
    assert c.prompt_id != a.prompt_id
    assert len(a.prompt_id) == 64


def test_assistant_tool_call_without_content_is_valid():
    record = validate_record(
        msgs(
            U,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ),
        "o",
    )
    assert record.messages[1] == {"role": "assistant", "tool_calls": [CALL]}
