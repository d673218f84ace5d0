"""Turn a model's `output_ids` back into the assistant message the chat template expects.

The split is done on token ids, never on decoded text (decoded text can carry spaces around added tokens,
and a reasoning parser would move them): reasoning is everything before the profile's think-end id, the
tool-call section starts at the Kimi template's section token, and each call inside it is
`<|tool_call_begin|>{id}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>`. Each part is decoded on
its own, so re-rendering the message through the template can give back the same ids.

Which parts the template keeps for which turns (K2.5 drops the reasoning of turns before the last plain
answer) is the template's business: the message always carries `reasoning_content`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eagle_datagen.modes import INSTANT, THINKING
from eagle_datagen.profile import ModelProfile

TOOL_TOKENS = ("tool_calls_begin", "tool_calls_end", "tool_call_begin", "tool_call_argument_begin", "tool_call_end")


@dataclass(frozen=True)
class ToolCall:
    id: str  # as the model wrote it, e.g. "functions.get_weather:0"
    name: str
    arguments: str  # the model's text, kept verbatim (re-rendering a re-serialised JSON would drift)

    def to_message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class AssistantMessage:
    reasoning_content: str
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    problem: str | None = None  # why the output does not parse cleanly (no think-end, a broken call section)

    def to_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.content,
            "reasoning_content": self.reasoning_content,
        }
        if self.tool_calls:
            message["tool_calls"] = [call.to_message() for call in self.tool_calls]
        return message


def function_name(call_id: str) -> str:
    """The function a Kimi call id names: `functions.get_weather:0` -> `get_weather`."""
    name = call_id.strip().removeprefix("functions.")
    return name.rsplit(":", 1)[0] if ":" in name else name


def tool_token_ids(profile: ModelProfile) -> dict[str, int] | None:
    """The profile's tool-call section ids, or None when it declares none (then nothing is a tool call)."""
    if not all(name in profile.tokens for name in TOOL_TOKENS):
        return None
    return {name: profile.tokens[name].id for name in TOOL_TOKENS}


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False) if ids else ""


def _parse_calls(tokenizer: Any, ids: list[int], tool: dict[str, int]) -> tuple[list[ToolCall], str | None]:
    """The calls of one section's inner ids (between section begin and end)."""
    calls: list[ToolCall] = []
    position = 0
    while position < len(ids):
        if ids[position] != tool["tool_call_begin"]:
            return calls, f"unexpected id {ids[position]} in the tool-call section"
        try:
            argument_at = ids.index(tool["tool_call_argument_begin"], position + 1)
            end_at = ids.index(tool["tool_call_end"], argument_at + 1)
        except ValueError:
            return calls, "a tool call without its argument or end token"
        call_id = _decode(tokenizer, ids[position + 1 : argument_at])
        arguments = _decode(tokenizer, ids[argument_at + 1 : end_at])
        calls.append(ToolCall(call_id, function_name(call_id), arguments))
        position = end_at + 1
    return calls, None


def parse_output(
    tokenizer: Any, output_ids: list[int], profile: ModelProfile, mode: str = THINKING
) -> AssistantMessage:
    """The assistant message of one generation (a prompt that prefills the think-start token); in instant mode the
    whole output is the answer (the prompt closed the think block), with no reasoning."""
    ids = list(output_ids)
    if ids and ids[-1] == profile.eos.id:
        ids = ids[:-1]
    think_end = profile.think_end.id
    if mode == INSTANT:
        reasoning, answer = [], ids
    elif think_end not in ids:
        return AssistantMessage("", _decode(tokenizer, ids), problem="no think-end token")
    else:
        split = ids.index(think_end)
        reasoning, answer = ids[:split], ids[split + 1 :]
    tool = tool_token_ids(profile)
    if tool is None or tool["tool_calls_begin"] not in answer:
        return AssistantMessage(_decode(tokenizer, reasoning), _decode(tokenizer, answer))
    begin = answer.index(tool["tool_calls_begin"])
    content = _decode(tokenizer, answer[:begin])
    try:
        end = answer.index(tool["tool_calls_end"], begin + 1)
    except ValueError:
        return AssistantMessage(_decode(tokenizer, reasoning), content, problem="a tool-call section without its end")
    calls, problem = _parse_calls(tokenizer, answer[begin + 1 : end], tool)
    if problem is None and answer[end + 1 :]:
        problem = "text after the tool-call section"
    return AssistantMessage(_decode(tokenizer, reasoning), content, calls, problem)
