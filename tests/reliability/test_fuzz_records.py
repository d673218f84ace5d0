"""Property-based tests of record reading and validation: any JSON value, any line of bytes, any file ends as
either a valid record or a reject with a known reason (or, for a whole unreadable file, a SourceError), never
an exception. Budgets and reproducibility: the hypothesis profile in tests/conftest.py."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from eagle_datagen.errors import SourceError
from eagle_datagen.records import (
    CATEGORY_PATTERN,
    LAST_ROLES,
    REJECT_REASONS,
    PromptRecord,
    Reject,
    canonical_prompt_json,
    validate_record,
)
from eagle_datagen.sources.locations import SourceFile
from eagle_datagen.sources.readers import RawRow, read_rows
from fuzz_strategies import one_value_changed

from conftest import REPO

# Any text, lone surrogates and NUL included (what a JSON escape can deliver), and the values a Parquet
# column can hold that JSON cannot (bytes, dates).
ANY_TEXT = st.text(st.characters(codec=None, categories=None), max_size=40)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT | st.binary(max_size=4) | st.dates()
ANY_JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4), max_leaves=30
)
ROLE = st.sampled_from(["system", "user", "assistant", "tool", "User", "", None, 3])
CONTENT = st.one_of(st.text(max_size=30), st.just("  "), st.none(), st.integers(), ANY_JSON)
CALL = st.fixed_dictionaries(
    {"id": st.sampled_from(["c1", "c2", "", None]), "function": st.fixed_dictionaries({"name": ANY_TEXT})},
    optional={"type": st.just("function")},
)
MESSAGE = st.fixed_dictionaries(
    {"role": ROLE},
    optional={
        "content": CONTENT,
        "name": st.text(max_size=8) | st.integers(),
        "tool_calls": st.lists(CALL, max_size=2) | ANY_JSON,
        "tool_call_id": st.sampled_from(["c1", "c2", "", 5]),
        "reasoning_content": st.text(max_size=8),
    },
)
TOOL = st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "retrieval", None])},
    optional={"function": st.fixed_dictionaries({"name": ANY_TEXT}, optional={"parameters": ANY_JSON})},
)
# Records shaped like the contract, with every field sometimes wrong: reaches the deeper checks.
RECORD_LIKE = st.fixed_dictionaries(
    {},
    optional={
        "id": ANY_TEXT | st.integers() | st.none(),
        "category": st.sampled_from(["chat", "math", "../x", "Chat", "", "a" * 65]) | ANY_TEXT,
        "messages": st.lists(MESSAGE, max_size=4) | ANY_JSON,
        "tools": st.lists(TOOL, max_size=2) | ANY_JSON,
        "source": ANY_TEXT | st.integers(),
    },
)


VALID = {
    "id": "r1",
    "category": "chat",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "name": "ann", "content": "look it up"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"q": "x"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
    ],
    "tools": [{"type": "function", "function": {
        "name": "f", "description": "d", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
}  # fmt: skip


def check_outcome(outcome: PromptRecord | Reject) -> None:
    """The invariants of either outcome."""
    if isinstance(outcome, Reject):
        assert outcome.reason in REJECT_REASONS, outcome.reason
        assert outcome.detail
        json.dumps(outcome.to_json()).encode("utf-8")  # a reject can always be written to rejects.jsonl
        return
    assert CATEGORY_PATTERN.fullmatch(outcome.category)
    assert outcome.messages and outcome.messages[-1]["role"] in LAST_ROLES
    canonical = canonical_prompt_json(outcome.messages, outcome.tools)
    canonical.decode("utf-8")  # encodable: no lone surrogate slipped through
    assert outcome.prompt_id == hashlib.sha256(canonical).hexdigest()
    json.loads(canonical)  # strict JSON: no NaN or Infinity in the prompt


@given(ANY_JSON)
def test_any_json_value_is_a_record_or_a_reject(value):
    check_outcome(validate_record(value, "fuzz:1"))


def test_the_valid_record_is_valid():
    assert isinstance(validate_record(VALID, "fuzz:1"), PromptRecord)


@given(one_value_changed(VALID, ANY_JSON))
def test_a_valid_record_with_any_one_value_changed_is_a_record_or_a_reject(value):
    check_outcome(validate_record(value, "fuzz:1"))


@given(RECORD_LIKE, st.none() | st.just("mapped"))
def test_any_record_shaped_value_is_a_record_or_a_reject(value, hint):
    check_outcome(validate_record(value, "fuzz:1", category_hint=hint))


def read_file(suffix: str, data: bytes) -> list[RawRow | Reject]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"prompts{suffix}"
        path.write_bytes(data)
        return list(read_rows(SourceFile(str(path))))


def check_rows(rows: list[RawRow | Reject]) -> None:
    for row in rows:
        if isinstance(row, Reject):
            assert row.reason in REJECT_REASONS and row.stage == "read"
            json.dumps(row.to_json())
        else:
            check_outcome(validate_record(row.value, row.origin))


LINE_PARTS = st.sampled_from(
    [b"{", b"}", b"[", b"]", b'"', b":", b",", b"NaN", b"Infinity", b"1e999", b"\\ud800", b"\\u0000", b"\xff",
     b"\xef\xbb\xbf", b"\r", b'"category"', b'"chat"', b'"messages"', b'"role"', b'"user"', b'"content"', b"null"]
)  # fmt: skip
JSONISH_BYTES = st.lists(LINE_PARTS | st.binary(max_size=4), max_size=30).map(b"".join)


@given(st.lists(st.binary(max_size=60) | JSONISH_BYTES, max_size=6))
def test_any_jsonl_bytes_are_records_or_rejects(lines):
    check_rows(read_file(".jsonl", b"\n".join(lines)))


def valid_line(text: str) -> bytes:
    return json.dumps({"category": "chat", "messages": [{"role": "user", "content": text}]}).encode()


@given(st.lists(st.text(min_size=1, max_size=20).filter(str.strip), min_size=1, max_size=4), st.booleans())
def test_valid_lines_survive_bom_and_crlf(texts, crlf):
    data = b"\xef\xbb\xbf" + (b"\r\n" if crlf else b"\n").join(valid_line(t) for t in texts)
    rows = read_file(".jsonl", data)
    assert [r.value["messages"][0]["content"] for r in rows] == texts


@given(st.binary(max_size=200) | JSONISH_BYTES)
def test_any_csv_bytes_are_rows_rejects_or_one_source_error(data):
    try:
        rows = read_file(".csv", b"id,category,messages\n" + data)
    except SourceError as exc:
        assert str(exc)  # the whole file is unreadable: one clear error
        return
    check_rows(rows)


@given(st.binary(max_size=200), st.booleans())
def test_any_gz_bytes_are_rows_rejects_or_one_source_error(data, compress):
    payload = gzip.compress(data, mtime=0) if compress else data
    if compress:
        payload = payload[: len(payload) - len(data) % 7]  # sometimes truncated
    try:
        rows = read_file(".jsonl.gz", payload)
    except SourceError as exc:
        assert "prompt source" in str(exc)
        return
    check_rows(rows)


def test_every_reason_the_code_can_give_is_listed():
    """REJECT_REASONS is the list docs/data-contract.md and docs/internals/security.md show: the code gives no other."""
    files = [REPO / "include/eagle_datagen/records.py", *REPO.glob("include/eagle_datagen/sources/*.py")]
    files.append(REPO / "include/eagle_datagen/tokenization/tokenize.py")
    pattern = re.compile(r'(?:_Invalid|_Unmappable|Reject|_reject)\(\s*(?:record,\s*)?"([a-z_0-9]+)"')
    used = {reason for f in files for reason in pattern.findall(f.read_text())}
    assert used and used <= set(REJECT_REASONS), used - set(REJECT_REASONS)
    assert {"duplicate_key", "special_token_text", "bad_field_type"} <= used
