"""Splitting a source conversation into turns and their recorded tool results."""

from __future__ import annotations

import pytest

from conversation_records import call, multi_turn_record, tool_loop_record
from eagle_datagen.conversation.assistant_message import AssistantMessage, ToolCall
from eagle_datagen.conversation.trajectory import Trajectory, split_turns
from eagle_datagen.standin.sglang.tool_calls import arguments_for, declared_tools


def test_turns_keep_system_and_user_messages_and_record_tool_results_in_call_order():
    record = tool_loop_record(["a", "b"])
    record["messages"] += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "again"}]
    turns = split_turns([{"role": "system", "content": "s"}, *record["messages"]])
    assert [[m["role"] for m in t.context] for t in turns] == [["system", "user"], ["user"]]
    assert [r.name for r in turns[0].recorded] == ["a", "b"] and turns[1].recorded == []
    assert turns[0].recorded[1].result["content"] == "recorded result of b"


def test_the_source_assistant_answers_never_enter_the_history():
    trajectory = Trajectory.of(multi_turn_record(2)["messages"], max_tool_steps=0)
    first = trajectory.first_step()
    assert [m["role"] for m in first.messages] == ["system", "user"]
    second = trajectory.after_answer(AssistantMessage("why", "mine"))
    assert [m.get("content") for m in second.messages if m["role"] == "assistant"] == ["mine"]
    assert second.messages[-2]["reasoning_content"] == "why"
    assert trajectory.after_answer(AssistantMessage("", "last")) == "complete"


def test_recorded_result_is_spliced_with_the_models_call_id():
    trajectory = Trajectory.of(tool_loop_record(["a"])["messages"], max_tool_steps=4)
    trajectory.first_step()
    following = trajectory.after_answer(AssistantMessage("", "", [ToolCall("functions.a:0", "a", '{"q":"z"}')]))
    assert following.kind == "tool_result"
    assert following.messages[-1] == {
        "role": "tool",
        "tool_call_id": "functions.a:0",
        "content": "recorded result of a",
    }


def test_a_source_without_user_message_is_one_step():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "a")]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    trajectory = Trajectory.of(messages, max_tool_steps=4)
    assert trajectory.first_step().messages == messages
    assert trajectory.after_answer(AssistantMessage("", "answer")) == "complete"


@pytest.mark.parametrize("variant", ["remote code (TypeScript)", "fast (JSON)"])
def test_stand_in_reads_the_declared_tools_back_from_the_prompt(tokenizer, fast_tokenizer, variant):
    record = tool_loop_record(["search", "book"])
    tok = tokenizer if variant.startswith("remote") else fast_tokenizer
    text = tok.apply_chat_template(record["messages"][:1], tools=record["tools"], tokenize=False)
    tools = declared_tools(text)
    assert [t["function"]["name"] for t in tools] == ["search", "book"]
    assert arguments_for(tools[0]["function"]) == arguments_for(record["tools"][0]["function"])
    assert arguments_for(record["tools"][0]["function"]) == '{"q":"demo"}'
