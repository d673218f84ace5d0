"""Source formats: rows as users have them (OpenAI `messages`, ShareGPT, Alpaca, one prompt column) turned
into contract-v1 records before validation.

A source names its format (recipe `format:`, `--prompts-format`) or leaves it to detection, per record: a
record with the keys of a benchmark's published format (sources/benchmark_formats.py: `mt_bench`,
`speed_bench`, `bfcl`, `gsm8k`, `math500`, `ceval`, `humaneval`) is read in that format, with the benchmark's
own category; a record with `messages` is read as the data contract; otherwise a record with exactly one of
the other key fields (`conversations`, `instruction`, `prompt`) is read in that format, and one with several is
rejected as `ambiguous_format`. `columns:` maps a format's fields onto the source's own column names
(`{prompt: question, id: uid}`); a benchmark's format reads its published columns.

The original assistant replies are never training data: trailing replies (the answer to the last user
turn) are cut, and earlier ones are kept as history (`history: keep`, the default) or dropped with
everything after the first user turn (`history: drop`). A `messages` record without a `history` setting
is taken as it is (the data contract: it must end with a user or tool message).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from eagle_datagen.records import Reject, excerpt_of
from eagle_datagen.sources.benchmark_formats import BENCHMARK_FORMAT_NAMES, FORMATS, NotInFormat, detect_benchmark
from eagle_datagen.sources.strict_json import loads_strict

FormatName = Literal[
    "messages", "sharegpt", "alpaca", "prompt", "mt_bench", "speed_bench", "bfcl", "gsm8k", "math500", "ceval",
    "humaneval",
]  # fmt: skip
FORMAT_NAMES: tuple[str, ...] = ("messages", "sharegpt", "alpaca", "prompt", *BENCHMARK_FORMAT_NAMES)
HistoryPolicy = Literal["keep", "drop"]
HISTORY_POLICIES: tuple[str, ...] = ("keep", "drop")

# The field that identifies each format, and every field a format reads.
KEY_FIELDS = {"messages": "messages", "sharegpt": "conversations", "alpaca": "instruction", "prompt": "prompt"}
COMMON_FIELDS = ("id", "category", "source")
FORMAT_FIELDS = {
    "messages": ("messages", "tools"),
    "sharegpt": ("conversations", "system", "tools"),
    "alpaca": ("instruction", "input", "output", "system"),
    "prompt": ("prompt", "system"),
}
MAPPABLE_FIELDS: tuple[str, ...] = tuple(
    dict.fromkeys(COMMON_FIELDS + tuple(f for fields in FORMAT_FIELDS.values() for f in fields))
)
# Tabular sources hold nested values as JSON text.
JSON_FIELDS = ("messages", "conversations", "tools")

# ShareGPT speakers (`from`) and the roles they become. `function_call` is an assistant turn calling a tool
# (its value: JSON {"name", "arguments"}, or a list of them); `observation` and `function` are tool results.
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
    "function_call": "assistant",
}
ID_TYPES = (str, int)


class _Unmappable(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class SourceFormat:
    name: str | None = None  # None: detected per record
    columns: Mapping[str, str] = field(default_factory=dict)  # format field -> the source's column
    history: str | None = None  # keep | drop; None: keep, except that `messages` records are taken as they are

    def column(self, name: str) -> str:
        return self.columns.get(name, name)

    def json_columns(self) -> tuple[str, ...]:
        return tuple(self.column(f) for f in JSON_FIELDS)

    def key_columns(self) -> tuple[str, ...]:
        """The columns a tabular source needs one of (CSV headers are checked against them)."""
        if self.name in FORMATS:
            return FORMATS[self.name].key_columns
        names = [self.name] if self.name else list(KEY_FIELDS)
        own = tuple(self.column(KEY_FIELDS[n]) for n in names)
        benchmarks = tuple(k for f in FORMATS.values() for k in f.key_columns)
        return own if self.name else tuple(dict.fromkeys(own + benchmarks))

    def detect(self, raw: dict[str, Any]) -> str:
        if self.name:
            return self.name
        benchmark = detect_benchmark(raw)
        if benchmark is not None:
            return benchmark
        present = [n for n, key in KEY_FIELDS.items() if raw.get(self.column(key)) is not None]
        if "messages" in present:
            return "messages"  # the data contract first: a contract record with a `prompt` field stays valid
        if len(present) > 1:
            fields = ", ".join(self.column(KEY_FIELDS[n]) for n in present)
            raise _Unmappable(
                "ambiguous_format",
                f"the record has the fields of several formats ({fields}): name the source's format "
                f"({', '.join(present)}) with format: in the recipe or --prompts-format",
            )
        # None: the data contract's own checks name what is missing (a category first, then messages).
        return present[0] if present else "messages"

    def convert(self, raw: Any, origin: str) -> Any:
        """The contract-v1 record for `raw` (validated next, by `validate_record`), or a `Reject`."""
        if not isinstance(raw, dict):
            return raw  # validation names it: not_an_object
        try:
            fmt = self.detect(raw)
            if fmt == "messages" and not self.columns and self.history is None:
                return raw  # the contract as it is: nothing to map (the common case)
            if fmt in FORMATS:
                return _benchmark_record(fmt, raw, origin)
            fields = {f: raw.get(self.column(f)) for f in COMMON_FIELDS + FORMAT_FIELDS[fmt]}
            key = KEY_FIELDS[fmt]
            if fields[key] is None:
                column = self.column(key)
                reason = "missing_messages" if fmt == "messages" else "missing_field"
                mapped = f" (mapped from column {column!r})" if column != key else ""
                raise _Unmappable(reason, f"the {fmt} record has no {key!r} field{mapped}")
            for name in JSON_FIELDS:  # ShareGPT dumps (LLaMA-Factory's) hold tools as JSON text, even in JSON
                if isinstance(fields.get(name), str):
                    fields[name] = _json_text(fields[name], name)
            if isinstance(fields.get("tools"), list):
                fields["tools"] = [_wrapped_tool(t) for t in fields["tools"]]
            if isinstance(fields["id"], int) and not isinstance(fields["id"], bool):
                fields["id"] = str(fields["id"])  # Hugging Face datasets often number their rows
            messages = _CONVERTERS[fmt](fields)
            if fmt != "messages" or self.history is not None:
                messages = _apply_history(messages, self.history or "keep")
        except _Unmappable as bad:
            record_id = raw.get(self.column("id"))
            return Reject(
                bad.reason,
                bad.detail,
                origin,
                record_id=str(record_id)
                if isinstance(record_id, ID_TYPES) and not isinstance(record_id, bool)
                else None,
                excerpt=excerpt_of(raw),
            )
        record = {k: fields[k] for k in COMMON_FIELDS if fields[k] is not None}
        record["messages"] = messages
        if fields.get("tools") is not None:
            record["tools"] = fields["tools"]
        return record


def _benchmark_record(fmt: str, raw: dict[str, Any], origin: str) -> dict[str, Any] | Reject:
    """A benchmark row as a contract record (its first user turn, its own category), or the reason it is not one."""
    where = origin.rpartition(":")[2]
    try:
        return FORMATS[fmt].row(raw, origin).record(where if where.startswith("row") else f"line{where}")
    except NotInFormat as bad:
        record_id = next((raw[k] for k in ("question_id", "id", "task_id", "unique_id") if k in raw), None)
        return Reject(
            bad.reason,
            f"{fmt}: {bad.detail}",
            origin,
            record_id=str(record_id) if isinstance(record_id, ID_TYPES) and not isinstance(record_id, bool) else None,
            excerpt=excerpt_of(raw),
        )


def _json_text(text: str, name: str) -> Any:
    try:
        return loads_strict(text)
    except (ValueError, RecursionError) as exc:
        raise _Unmappable("invalid_json", f"{name} is text that is not valid JSON: {exc}") from None


def _wrapped_tool(tool: Any) -> Any:
    """A bare function spec ({"name", "description", "parameters"}, as ShareGPT dumps give them) as an OpenAI
    tool ({"type": "function", "function": {...}})."""
    if isinstance(tool, dict) and "function" not in tool and isinstance(tool.get("name"), str):
        return {"type": "function", "function": tool}
    return tool


def _messages(fields: dict[str, Any]) -> Any:
    return fields["messages"]


def _system(fields: dict[str, Any]) -> list[dict[str, Any]]:
    system = fields.get("system")
    if system is None or system == "":
        return []
    return [{"role": "system", "content": system}]


def _prompt(fields: dict[str, Any]) -> list[dict[str, Any]]:
    return [*_system(fields), {"role": "user", "content": fields["prompt"]}]


def _alpaca(fields: dict[str, Any]) -> list[dict[str, Any]]:
    instruction, extra = fields["instruction"], fields.get("input")
    if not isinstance(instruction, str):
        raise _Unmappable("content_not_string", f"instruction must be a string, got {type(instruction).__name__}")
    if extra is not None and not isinstance(extra, str):
        raise _Unmappable("content_not_string", f"input must be a string, got {type(extra).__name__}")
    # The Alpaca convention: the input, when there is one, follows the instruction after a blank line.
    content = f"{instruction}\n\n{extra}" if extra and extra.strip() else instruction
    return [*_system(fields), {"role": "user", "content": content}]  # `output` is the original reply: dropped


def _columnar_turns(conversation: dict[str, Any]) -> Any:
    """A `datasets` Sequence of structs comes back as a dict of lists: turn it into a list of dicts."""
    columns = list(conversation.values())
    if not columns or not all(isinstance(c, list) and len(c) == len(columns[0]) for c in columns):
        return conversation
    return [dict(zip(conversation, values, strict=True)) for values in zip(*columns, strict=True)]


def _tool_calls(value: Any, where: str, first_id: int) -> list[dict[str, Any]]:
    try:
        parsed = loads_strict(value) if isinstance(value, str) else value
    except ValueError as exc:
        raise _Unmappable("bad_tool_calls", f"{where} (function_call) is not JSON: {exc}") from None
    calls = parsed if isinstance(parsed, list) else [parsed]
    result = []
    for j, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise _Unmappable("bad_tool_calls", f"{where} (function_call) must hold {{name, arguments}}")
        arguments = call.get("arguments", {})
        result.append(
            {
                "id": f"call_{first_id + j}",
                "type": "function",
                "function": {"name": call["name"], "arguments": arguments},
            }
        )
    return result


def _sharegpt(fields: dict[str, Any]) -> list[dict[str, Any]]:
    turns = fields["conversations"]
    if isinstance(turns, dict):
        turns = _columnar_turns(turns)
    if not isinstance(turns, list):
        raise _Unmappable("messages_not_list", f"conversations must be a list, got {type(turns).__name__}")
    messages = _system(fields)
    unanswered: list[str] = []  # call ids of function_call turns that no observation answered yet
    calls_made = 0
    for i, turn in enumerate(turns):
        where = f"conversations[{i}]"
        if not isinstance(turn, dict):
            raise _Unmappable("message_not_object", f"{where} must be an object, got {type(turn).__name__}")
        speaker = turn.get("from", turn.get("role"))
        text = turn.get("value", turn.get("content"))
        role = SHAREGPT_ROLES.get(speaker.lower()) if isinstance(speaker, str) else None
        if role is None:
            raise _Unmappable(
                "unknown_role",
                f"{where}.from is {excerpt_of(speaker, 40)}; expected one of {', '.join(SHAREGPT_ROLES)}",
            )
        if speaker.lower() == "function_call":
            calls = _tool_calls(text, where, calls_made)
            calls_made += len(calls)
            unanswered.extend(c["id"] for c in calls)
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        elif role == "tool":
            message = {"role": "tool", "content": text}
            if unanswered:
                message["tool_call_id"] = unanswered.pop(0)
            messages.append(message)  # without a call to answer, validation rejects it
        else:
            messages.append({"role": role, "content": text})
    return messages


_CONVERTERS = {"messages": _messages, "sharegpt": _sharegpt, "alpaca": _alpaca, "prompt": _prompt}


def _apply_history(messages: Any, history: str) -> Any:
    """Cut the trailing assistant replies; with `drop`, keep only the leading system messages and the first
    user turn. Anything that is not a list of messages is left for validation to name."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return messages
    end = len(messages)
    while end and messages[end - 1].get("role") == "assistant":
        end -= 1
    messages = messages[:end]
    if history == "drop":
        lead = 0
        while lead < len(messages) and messages[lead].get("role") == "system":
            lead += 1
        first_user = next((m for m in messages[lead:] if m.get("role") == "user"), None)
        messages = messages[:lead] + ([first_user] if first_user is not None else [])
    return messages
