"""Source conversations for the multi-turn tests: several user turns, and tool loops with recorded results."""

from __future__ import annotations

from typing import Any


def tool(name: str, *properties: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {p: {"type": "string"} for p in properties}}
    return {"type": "function", "function": {"name": name, "description": f"The {name} tool", "parameters": schema}}


def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def multi_turn_record(turns: int, category: str = "chat", tag: str = "") -> dict[str, Any]:
    """`turns` user messages, each followed (but the last) by the source's own assistant answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant."}]
    for k in range(turns):
        messages.append({"role": "user", "content": f"{tag}Question number {k}: what comes after {k}?"})
        if k < turns - 1:
            messages.append({"role": "assistant", "content": f"The source's answer {k + 1}."})
    return {"category": category, "messages": messages}


def tool_loop_record(names: list[str], declared: list[str] | None = None, category: str = "tool_use") -> dict[str, Any]:
    """One user turn whose recorded tool loop calls `names` in order, each with its recorded result."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Plan my trip: check everything you can."}]
    for i, name in enumerate(names):
        messages.append({"role": "assistant", "content": "", "tool_calls": [call(f"src_{i}", name, '{"q":"x"}')]})
        messages.append({"role": "tool", "tool_call_id": f"src_{i}", "content": f"recorded result of {name}"})
    return {"category": category, "tools": [tool(n, "q") for n in (declared or names)], "messages": messages}
