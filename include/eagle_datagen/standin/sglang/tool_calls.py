"""Tool calls in the Kimi format from the stand-in (`tool_calls: true`, with a tokenizer).

A prompt whose chat template declared tools (`<|im_system|>tool_declare<|im_middle|>{tools}<|im_end|>`, the tools
as TypeScript, as Kimi-K2.5's remote code renders them, or as JSON from a fast tokenizer) gets,
for as long as some declared tool has not been called in the conversation, an answer that calls the next
one in declaration order: its reasoning, `</think>`, then
`<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:{n}<|tool_call_argument_begin|>{json}
<|tool_call_end|><|tool_calls_section_end|><|im_end|>`. Once every tool was called, it answers plainly. So a
record that recorded its calls in declaration order is continued to the end, and one that did not ends
with `no_recorded_result`: tool loops run end to end against the stand-in.
"""

from __future__ import annotations

import json
import re
from typing import Any

from eagle_datagen.standin.sglang.text import TextCodec

DECLARE = "<|im_system|>tool_declare<|im_middle|>"
CALL_BEGIN = "<|tool_call_begin|>"


TS_FUNCTION = re.compile(r"^type (\w+) = \((?:_: \{)?")
TS_PROPERTY = re.compile(r"^  (\w+)\??: ")


def typescript_tools(body: str) -> list[dict[str, Any]]:
    """`type NAME = (_: { prop: T, ... }) => any;` declarations: each function's name and top-level properties."""
    tools: list[dict[str, Any]] = []
    for line in body.splitlines():
        function = TS_FUNCTION.match(line)
        if function:
            tools.append(
                {"type": "function", "function": {"name": function.group(1), "parameters": {"properties": {}}}}
            )
            continue
        prop = TS_PROPERTY.match(line)
        if prop and tools:
            tools[-1]["function"]["parameters"]["properties"][prop.group(1)] = {}
    return tools


def declared_tools(prompt_text: str) -> list[dict[str, Any]]:
    start = prompt_text.find(DECLARE)
    if start < 0:
        return []
    body = prompt_text[start + len(DECLARE) :].split("<|im_end|>", 1)[0]
    try:
        tools = json.loads(body)
    except ValueError:
        return typescript_tools(body)
    return (
        [t for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        if isinstance(tools, list)
        else []
    )


def arguments_for(function: dict[str, Any]) -> str:
    """Plausible arguments: every declared property of the schema, with a string value."""
    properties = (function.get("parameters") or {}).get("properties") or {}
    return json.dumps({name: "demo" for name in sorted(properties)}, separators=(",", ":"))


def tool_call_tail(codec: TextCodec, prompt_ids: list[int], eos_id: int) -> list[int] | None:
    """The answer part (after `</think>`) that calls the next uncalled tool, or None for a plain answer."""
    text = codec.decode(prompt_ids, skip_special_tokens=False)
    tools = declared_tools(text)
    if not tools:
        return None
    called = text.count(CALL_BEGIN)  # the template keeps earlier calls in the history
    if called >= len(tools):
        return None
    function = tools[called]["function"]
    section = (
        f"<|tool_calls_section_begin|>{CALL_BEGIN}functions.{function.get('name')}:{called}"
        f"<|tool_call_argument_begin|>{arguments_for(function)}<|tool_call_end|><|tool_calls_section_end|>"
    )
    return codec.encode(section) + [eos_id]
