"""Prompt records (data contract v1): validation, normalisation and the content-addressed prompt id.

`validate_record` turns one raw row into either a `PromptRecord` or a `Reject` with a named reason.
It never raises on bad data: a bad record is data about the input, not a reason to stop the run.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from eagle_datagen import settings

CATEGORY_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
ROLES = ("system", "user", "assistant", "tool")
LAST_ROLES = ("user", "tool")
MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content")
MAX_RECORD_ID_CHARS = 256
MAX_NESTING = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


# Every reason a prompt record can be rejected for, by stage: code -> what it means.
REJECT_REASONS: dict[str, str] = {
    # read (sources/readers.py)
    "invalid_json": "the line (or a JSON column) is not JSON, NaN and Infinity included",
    "invalid_utf8": "the line is not valid UTF-8",
    "too_deeply_nested": "nested deeper than the parser (or MAX_NESTING) allows",
    "duplicate_key": "an object names a key twice: parsers disagree on which value wins",
    # map (sources/formats.py)
    "ambiguous_format": "the record has the key fields of several source formats: name the source's format",
    "missing_field": "a field the source's format needs is absent (columns: maps it to the source's column)",
    "benchmark_placeholder": "a SPEED-Bench row whose text is a placeholder until its prepare script fills it",
    # validate (this module)
    "not_an_object": "the record is not a JSON object",
    "bad_id": "id is not a non-empty string of at most 256 characters",
    "bad_category": "category is not [a-z0-9][a-z0-9_-]{0,63}",
    "missing_category": "no category, and no recipe maps the source to one",
    "missing_messages": "no messages",
    "messages_not_list": "messages is not a list",
    "empty_messages": "messages is empty",
    "too_many_messages": "more messages than RecordLimits.max_messages",
    "message_not_object": "a message is not an object",
    "unknown_role": "a role other than system, user, assistant, tool",
    "missing_content": "a message without content (only an assistant turn with tool_calls may have none)",
    "content_not_string": "content is not a string",
    "empty_content": "a user message with blank content",
    "bad_field_type": "a field of the wrong type, or a value JSON cannot hold (bytes, NaN, a non-string key)",
    "nul_byte": "a NUL byte in a string",
    "lone_surrogate": "a lone UTF-16 surrogate (not encodable as UTF-8)",
    "last_message_role": "the prompt does not end with a user or tool message",
    "tools_not_list": "tools is not a list",
    "bad_tool": "a tool that is not a function spec with a unique name",
    "bad_tool_calls": "tool_calls that are not a list of calls with id, name and arguments",
    "tool_result_without_call": "a tool message that answers no earlier tool call",
    "record_too_large": "the prompt's JSON is larger than max_record_bytes",
    # tokenize (tokenization/tokenize.py)
    "template_error": "the chat template raised an error",
    "prompt_suffix_mismatch": "the rendered prompt does not end in the profile's prompt suffix",
    "prompt_too_long": "more tokens than max_prompt_tokens or the model's context",
    "special_token_text": "text that would put special tokens into the prompt the template did not place",
    "id_beyond_model_vocab": "the prompt holds a tokenizer id at or above the model's vocab_size",
    # filter (sources/decontamination.py, sources/near_duplicates.py): good records the recipe leaves out;
    # they do not count towards max_reject_rate
    "benchmark_overlap": "the user text shares a long n-gram with a benchmark item, or equals one",
    "near_duplicate": "a near-duplicate (MinHash over word shingles) of a record kept before it",
}
FILTER_STAGE = "filter"


@dataclass(frozen=True)
class RecordLimits:
    # A prompt far beyond any context window only wastes tokenizer time; 1 MB is ~250k tokens of text.
    max_record_bytes: int = settings.MAX_RECORD_BYTES
    max_messages: int = 1024


DEFAULT_LIMITS = RecordLimits()


@dataclass(frozen=True, slots=True)
class PromptRecord:
    prompt_id: str
    record_id: str | None
    category: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    source: str | None
    origin: str  # where the record was read: "<file uri>:<line or row>"
    # the mode it is rendered and generated in (modes.py): given by its category's mode, never by the source
    mode: str = "thinking"


@dataclass(frozen=True, slots=True)
class Reject:
    reason: str  # a short, stable code such as "unknown_role"
    detail: str  # one human sentence: what is wrong and where
    origin: str
    stage: str = "validate"  # read | validate | tokenize | filter
    record_id: str | None = None
    category: str | None = None
    excerpt: str = ""
    source_spec: str | None = None  # the source as the recipe or --prompts names it (counts per source)
    benchmark: str | None = None  # benchmark_overlap: the benchmark the prompt overlaps

    def to_json(self) -> dict[str, Any]:
        fields = {
            "stage": self.stage,
            "reason": self.reason,
            "detail": self.detail,
            "origin": self.origin,
            "record_id": self.record_id,
            "category": self.category,
            "excerpt": self.excerpt,
        }
        if self.source_spec is not None:
            fields["source_spec"] = self.source_spec
        if self.benchmark is not None:
            fields["benchmark"] = self.benchmark
        return {k: _printable(v) if isinstance(v, str) else v for k, v in fields.items()}


@dataclass
class _Invalid(Exception):
    reason: str
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)


def canonical_prompt_json(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bytes:
    return json.dumps(
        {"messages": messages, "tools": tools}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def compute_prompt_id(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """sha256 of the canonical JSON of {"messages", "tools"}: identical prompts share one id."""
    return hashlib.sha256(canonical_prompt_json(messages, tools)).hexdigest()


def _printable(text: str) -> str:
    """Text that encodes as UTF-8 whatever a bad record held (lone surrogates become U+FFFD)."""
    return text.encode("utf-8", errors="replace").decode("utf-8")


def excerpt_of(raw: Any, limit: int = 300) -> str:
    if isinstance(raw, bytes):
        text = raw.decode("utf-8", errors="replace")
    elif isinstance(raw, str):
        text = raw
    else:
        try:
            text = json.dumps(raw, ensure_ascii=True, default=repr)
        except (ValueError, TypeError, RecursionError):
            text = repr(raw)
    text = _printable(text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _check_values(value: Any, where: str, depth: int = 0) -> None:
    """Reject what JSON cannot hold or the tokenizer must not see, anywhere in the prompt: NUL bytes, lone
    surrogates (not encodable as UTF-8), NaN and Infinity, non-JSON values (Parquet bytes, timestamps),
    non-string keys, and absurd nesting."""
    if depth > MAX_NESTING:
        raise _Invalid("too_deeply_nested", f"{where} is nested more than {MAX_NESTING} levels deep")
    if isinstance(value, str):
        if "\x00" in value:
            raise _Invalid("nul_byte", f"{where} contains a NUL byte")
        if _SURROGATE.search(value):
            raise _Invalid("lone_surrogate", f"{where} contains a lone UTF-16 surrogate (not valid UTF-8 text)")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Invalid("bad_field_type", f"{where} has a {type(key).__name__} key (JSON keys are strings)")
            _check_values(key, f"{where} key", depth + 1)
            _check_values(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_values(item, f"{where}[{i}]", depth + 1)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _Invalid("bad_field_type", f"{where} is {value} (JSON has no NaN or Infinity)")
    elif value is not None and not isinstance(value, int):  # bool is an int
        raise _Invalid("bad_field_type", f"{where} holds a {type(value).__name__} value; only JSON values are allowed")


def _validate_tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _Invalid("tools_not_list", f"tools must be a list of function specs, got {type(tools).__name__}")
    names = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _Invalid("bad_tool", f"tools[{i}] must be an object")
        if tool.get("type", "function") != "function":
            raise _Invalid("bad_tool", f"tools[{i}].type must be 'function', got {tool.get('type')!r}")
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise _Invalid("bad_tool", f"tools[{i}].function.name must be a non-empty string")
        if "parameters" in function and not isinstance(function["parameters"], dict | None):
            raise _Invalid("bad_tool", f"tools[{i}].function.parameters must be a JSON schema object")
        if function["name"] in names:
            raise _Invalid("bad_tool", f"tools[{i}] declares {function['name']!r} twice")
        names.add(function["name"])
    return tools or None  # an empty list renders like no tools: one prompt id for both


def _validate_tool_calls(calls: Any, where: str) -> list[str]:
    if not isinstance(calls, list) or not calls:
        raise _Invalid("bad_tool_calls", f"{where}.tool_calls must be a non-empty list")
    ids = []
    for j, call in enumerate(calls):
        spot = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict):
            raise _Invalid("bad_tool_calls", f"{spot} must be an object")
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise _Invalid("bad_tool_calls", f"{spot}.id must be a non-empty string")
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise _Invalid("bad_tool_calls", f"{spot}.function.name must be a non-empty string")
        if not isinstance(function.get("arguments"), str | dict):
            raise _Invalid("bad_tool_calls", f"{spot}.function.arguments must be a JSON string or an object")
        ids.append(call["id"])
    return ids


def _validate_messages(messages: Any, limits: RecordLimits) -> list[dict[str, Any]]:
    if messages is None:
        raise _Invalid(
            "missing_messages",
            "the record has no 'messages' field (nor conversations, instruction or prompt): name the source's format "
            "and columns (format:, columns: in the recipe; --prompts-format, --prompts-column)",
        )
    if not isinstance(messages, list):
        raise _Invalid("messages_not_list", f"messages must be a list, got {type(messages).__name__}")
    if not messages:
        raise _Invalid("empty_messages", "messages is an empty list")
    if len(messages) > limits.max_messages:
        raise _Invalid("too_many_messages", f"{len(messages)} messages (limit {limits.max_messages})")
    normalised: list[dict[str, Any]] = []
    seen_call_ids: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _Invalid("message_not_object", f"{where} must be an object, got {type(message).__name__}")
        role = message.get("role")
        if role not in ROLES:
            raise _Invalid("unknown_role", f"{where}.role is {role!r}; expected one of {', '.join(ROLES)}")
        content = message.get("content")
        has_calls = message.get("tool_calls") is not None
        if content is None and not (role == "assistant" and has_calls):
            raise _Invalid("missing_content", f"{where} ({role}) has no content")
        if content is not None and not isinstance(content, str):
            raise _Invalid("content_not_string", f"{where}.content must be a string, got {type(content).__name__}")
        if role == "user" and not content.strip():
            raise _Invalid("empty_content", f"{where} (user) has empty content")
        for key in ("name", "reasoning_content", "tool_call_id"):
            if message.get(key) is not None and not isinstance(message[key], str):
                raise _Invalid("bad_field_type", f"{where}.{key} must be a string")
        if has_calls:
            if role != "assistant":
                raise _Invalid("bad_tool_calls", f"{where} is a {role} message with tool_calls (only assistant)")
            seen_call_ids.update(_validate_tool_calls(message["tool_calls"], where))
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not call_id:
                raise _Invalid("tool_result_without_call", f"{where} (tool) has no tool_call_id")
            if call_id not in seen_call_ids:
                raise _Invalid(
                    "tool_result_without_call", f"{where}.tool_call_id {call_id!r} matches no earlier tool call"
                )
        normalised.append({k: message[k] for k in MESSAGE_KEYS if message.get(k) is not None})
    if normalised[-1]["role"] not in LAST_ROLES:
        raise _Invalid(
            "last_message_role",
            f"the last message is from {normalised[-1]['role']!r}; a prompt must end with a user or tool message"
            + (
                " (the dataset's own reply? history: keep on the source cuts it)"
                if normalised[-1]["role"] == "assistant"
                else ""
            ),
        )
    return normalised


def _validate_category(raw: dict[str, Any], category_hint: str | None) -> str:
    if category_hint is not None:
        return category_hint  # the recipe maps this source to a category: the record's own (a dataset's topic
        # column, "Weather") is not read at all
    category = raw.get("category")
    if category is not None:
        if not isinstance(category, str) or not CATEGORY_PATTERN.fullmatch(category):
            raise _Invalid(
                "bad_category",
                f"category {excerpt_of(category, 80)} must match [a-z0-9][a-z0-9_-]{{0,63}} "
                "(lowercase letters, digits, '_' and '-')",
            )
    if category is None:
        raise _Invalid("missing_category", "the record has no category (add one, or map its source in a recipe)")
    return category


def validate_record(
    raw: Any, origin: str, category_hint: str | None = None, limits: RecordLimits = DEFAULT_LIMITS
) -> PromptRecord | Reject:
    """Check one raw record against data contract v1."""
    record_id = raw.get("id") if isinstance(raw, dict) else None
    try:
        if not isinstance(raw, dict):
            raise _Invalid("not_an_object", f"a record must be a JSON object, got {type(raw).__name__}")
        if record_id is not None and (
            not isinstance(record_id, str) or not record_id or len(record_id) > MAX_RECORD_ID_CHARS
        ):
            record_id = None
            raise _Invalid("bad_id", f"id must be a non-empty string of at most {MAX_RECORD_ID_CHARS} characters")
        if isinstance(record_id, str):
            _check_values(record_id, "id")
        category = _validate_category(raw, category_hint)
        source = raw.get("source")
        if source is not None and not isinstance(source, str):
            raise _Invalid("bad_field_type", "source must be a string")
        _check_values(raw.get("messages"), "messages")
        _check_values(raw.get("tools"), "tools")
        messages = _validate_messages(raw.get("messages"), limits)
        tools = _validate_tools(raw.get("tools"))
        canonical = canonical_prompt_json(messages, tools)
        if len(canonical) > limits.max_record_bytes:
            raise _Invalid(
                "record_too_large",
                f"the prompt is {len(canonical):,} bytes (limit {limits.max_record_bytes:,}, set max_record_bytes)",
            )
    except _Invalid as bad:
        return Reject(
            reason=bad.reason,
            detail=bad.detail,
            origin=origin,
            record_id=record_id if isinstance(record_id, str) else None,
            category=raw.get("category") if isinstance(raw, dict) and isinstance(raw.get("category"), str) else None,
            excerpt=excerpt_of(raw),
        )
    return PromptRecord(
        prompt_id=hashlib.sha256(canonical).hexdigest(),
        record_id=record_id,
        category=category,
        messages=messages,
        tools=tools,
        source=source,
        origin=origin,
    )
