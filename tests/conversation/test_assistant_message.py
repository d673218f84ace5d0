"""Output ids back into an assistant message, and K2.5's template semantics on rendered ids."""

from __future__ import annotations

import pytest

from eagle_datagen.conversation.assistant_message import function_name, parse_output

THINK, THINK_END, EOS = 163606, 163607, 163586
SECTION, SECTION_END, CALL, ARGS, CALL_END = 163595, 163596, 163597, 163598, 163599
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def render_ids(tokenizer, messages, tools=None, add_generation_prompt=True) -> list[int]:
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
    )


def tool_call_output(tokenizer, reasoning: str, content: str, calls: list[tuple[str, str]]) -> list[int]:
    ids = encode(tokenizer, reasoning) + [THINK_END] + encode(tokenizer, content) + [SECTION]
    for call_id, arguments in calls:
        ids += [CALL, *encode(tokenizer, call_id), ARGS, *encode(tokenizer, arguments), CALL_END]
    return ids + [SECTION_END, EOS]


def test_plain_answer_splits_at_think_end(tokenizer, kimi_profile):
    output = encode(tokenizer, "Two plus two is four.") + [THINK_END] + encode(tokenizer, "4") + [EOS]
    message = parse_output(tokenizer, output, kimi_profile)
    assert message.to_message() == {"role": "assistant", "reasoning_content": "Two plus two is four.", "content": "4"}
    assert message.problem is None


def test_tool_calls_are_split_at_the_section_tokens(tokenizer, kimi_profile):
    output = tool_call_output(
        tokenizer,
        "I need the weather.",
        "Let me check.",
        [("functions.get_weather:0", '{"city": "Paris"}'), ("functions.get_weather:1", '{"city": "Oslo"}')],
    )
    message = parse_output(tokenizer, output, kimi_profile).to_message()
    assert message["reasoning_content"] == "I need the weather." and message["content"] == "Let me check."
    assert [c["id"] for c in message["tool_calls"]] == ["functions.get_weather:0", "functions.get_weather:1"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather", "get_weather"]
    assert message["tool_calls"][1]["function"]["arguments"] == '{"city": "Oslo"}'


@pytest.mark.parametrize(
    ("output_tail", "problem"),
    [
        ([SECTION, CALL, 17, ARGS, 18], "a tool-call section without its end"),
        ([SECTION, CALL, 17, SECTION_END], "a tool call without its argument or end token"),
        ([SECTION, 17, SECTION_END], "unexpected id 17 in the tool-call section"),
    ],
)
def test_broken_sections_are_named(tokenizer, kimi_profile, output_tail, problem):
    output = encode(tokenizer, "hm") + [THINK_END] + output_tail + [EOS]
    assert parse_output(tokenizer, output, kimi_profile).problem == problem


def test_output_without_think_end_is_a_problem(tokenizer, kimi_profile):
    message = parse_output(tokenizer, encode(tokenizer, "no end") + [EOS], kimi_profile)
    assert message.problem == "no think-end token" and message.reasoning_content == ""


def test_function_name_of_kimi_call_ids():
    assert function_name("functions.get_weather:0") == "get_weather"
    assert function_name("search_web:12") == "search_web"
    assert function_name("lookup") == "lookup"


def test_tool_loop_keeps_the_reasoning_token_for_token(tokenizer, kimi_profile):
    """Inside the current tool loop the template keeps the model's reasoning: the next prompt is exactly
    the previous prompt + the model's output + the tool result."""
    history = [{"role": "user", "content": "Weather in Paris?"}]
    prompt = render_ids(tokenizer, history, [WEATHER_TOOL])
    assert prompt[-1] == THINK
    output = tool_call_output(
        tokenizer, "I should call the tool.", "", [("functions.get_weather:0", '{"city":"Paris"}')]
    )
    message = parse_output(tokenizer, output, kimi_profile).to_message()
    result = {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18C, sunny"}
    following = render_ids(tokenizer, [*history, message, result], [WEATHER_TOOL])
    assert following[: len(prompt) + len(output)] == prompt + output


def test_reasoning_is_dropped_for_turns_before_the_last_user_message(tokenizer, kimi_profile):
    history = [{"role": "user", "content": "What is 2+2?"}]
    prompt = render_ids(tokenizer, history)
    output = encode(tokenizer, "Adding two and two.") + [THINK_END] + encode(tokenizer, "4") + [EOS]
    message = parse_output(tokenizer, output, kimi_profile).to_message()
    following = render_ids(tokenizer, [*history, message, {"role": "user", "content": "And 3+3?"}])
    # the previous prompt ends in <think>; the re-rendered turn closes it at once: no reasoning ids
    assert following[: len(prompt)] == prompt
    assert following[len(prompt) : len(prompt) + 3] == [THINK_END, *encode(tokenizer, "4"), EOS][:3]
    # as in K2.5 (`hist_msgs = messages[:last_non_tool_call_assistant + 1]`) the last plain answer is history too
    ended = render_ids(tokenizer, [*history, message], add_generation_prompt=False)
    assert ended[len(prompt) :] == [THINK_END, *encode(tokenizer, "4"), EOS]


def test_reasoning_of_an_earlier_tool_loop_is_dropped_after_a_new_user_message(tokenizer, kimi_profile):
    call = tool_call_output(tokenizer, "Call it.", "", [("functions.get_weather:0", '{"city":"Paris"}')])
    answer = encode(tokenizer, "Report it.") + [THINK_END] + encode(tokenizer, "Sunny.") + [EOS]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        parse_output(tokenizer, call, kimi_profile).to_message(),
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18C"},
        parse_output(tokenizer, answer, kimi_profile).to_message(),
        {"role": "user", "content": "Thanks. And Oslo?"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=[WEATHER_TOOL], add_generation_prompt=True, tokenize=False)
    assert "Call it." not in text and "Report it." not in text
    assert text.count("<think></think>") == 2 and text.endswith("<|im_assistant|>assistant<|im_middle|><think>")


def test_an_instant_answer_is_all_reply_and_its_tool_loop_extends_token_for_token(tokenizer, kimi_profile):
    """Instant mode: no reasoning and no </think> in the output; its tool calls parse, and the template
    (thinking=False) renders the answer back so that the next step's prompt extends prompt + output exactly."""
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    prompt = tokenizer.apply_chat_template(
        messages, tools=[WEATHER_TOOL], add_generation_prompt=True, tokenize=True, return_dict=False, thinking=False
    )
    assert prompt[-2:] == [THINK, THINK_END]
    output = tool_call_output(tokenizer, "", "Let me check.", [("functions.get_weather:0", '{"city":"Oslo"}')])
    output.remove(THINK_END)  # an instant answer: the reply and its calls alone
    message = parse_output(tokenizer, output, kimi_profile, "instant")
    assert (message.reasoning_content, message.content, message.problem) == ("", "Let me check.", None)
    assert [c.name for c in message.tool_calls] == ["get_weather"]
    assert parse_output(tokenizer, output, kimi_profile).problem == "no think-end token"  # read as thinking
    result = {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "-3 C, snow"}
    following = tokenizer.apply_chat_template(
        [*messages, message.to_message(), result],
        tools=[WEATHER_TOOL],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
        thinking=False,
    )
    assert following[: len(prompt) + len(output)] == prompt + output
    assert following[-2:] == [THINK, THINK_END]
