"""The stand-in Kimi-K2.5 tokenizer: real ids where the pipeline relies on them, K2.5 template shape."""

from __future__ import annotations

import json

import pytest

from eagle_datagen.standin.kimi_tokenizer import (
    NAMED_TOKENS,
    build_tokenizer_object,
    gpt2_byte_order,
    gpt2_byte_to_char,
    special_token_table,
)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def render(tokenizer, messages, tools=None, add_generation_prompt=True) -> str:
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
    )


def test_ten_id_example_from_the_real_tokenizer(tokenizer):
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, return_dict=False
    )
    assert ids[-10:] == [220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]


def test_byte_tokens_are_ids_0_to_255_in_gpt2_order(tokenizer):
    order = gpt2_byte_order()
    assert sorted(order) == list(range(256))
    byte_char = gpt2_byte_to_char()
    assert tokenizer.convert_ids_to_tokens(list(range(256))) == [byte_char[b] for b in order]
    assert order[:3] == [ord("!"), ord('"'), ord("#")] and order[188:190] == [0, 1]
    assert tokenizer.encode("!", add_special_tokens=False) == [0]
    assert tokenizer.encode(" ", add_special_tokens=False) == [220]
    assert tokenizer.encode("\n", add_special_tokens=False) == [198]


def test_special_ids_sit_at_their_real_positions(tokenizer):
    for token_id, (text, _) in NAMED_TOKENS.items():
        assert tokenizer.convert_tokens_to_ids(text) == token_id, text
    assert [t for t, _, _ in special_token_table()] == list(range(163584, 163840))
    assert tokenizer.convert_tokens_to_ids("<|reserved_token_5|>") == 163589
    assert tokenizer.convert_tokens_to_ids("assistant") == 69702
    assert tokenizer.encode("assistant", add_special_tokens=False) == [69702]


def test_think_and_tool_tokens_are_added_but_not_special(tokenizer):
    text = tokenizer.decode([163606, 163607, 163597, 163586], skip_special_tokens=True)
    assert text == "<think></think><|tool_call_begin|>"


def test_special_token_text_in_a_string_becomes_one_id(tokenizer):
    assert tokenizer.encode("<think>hi</think><|im_end|>", add_special_tokens=False)[:1] == [163606]
    assert tokenizer.encode("<think>hi</think><|im_end|>", add_special_tokens=False)[-2:] == [163607, 163586]


def test_ordinary_text_round_trips_and_bpe_merges_words(tokenizer):
    text = "The assistant explains reasoning step by step. 中文 Ünïcode 😀 x^2 + y^2"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8")) / 2  # learned merges, not bytes
    assert max(ids) < 163584


def test_numbers_split_in_groups_of_three_like_kimi(tokenizer):
    pieces = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("12345 abc")
    assert [p for p, _ in pieces][:2] == ["123", "45"]


def test_build_is_deterministic():
    corpus = "the assistant answered the user's question about 2+2 and reasoning\n\n" * 20
    assert build_tokenizer_object(corpus).to_str() == build_tokenizer_object(corpus).to_str()


def test_system_turn_and_role_layout(tokenizer):
    text = render(tokenizer, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert text == (
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
        "<|im_user|>user<|im_middle|>Hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think>"
    )


def test_history_assistant_turns_get_empty_think(tokenizer):
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "greet back"},
        {"role": "user", "content": "Bye"},
    ]
    text = render(tokenizer, messages)
    assert "<|im_assistant|>assistant<|im_middle|><think></think>Hello!<|im_end|>" in text
    assert "greet back" not in text
    assert text.endswith("<|im_user|>user<|im_middle|>Bye<|im_end|><|im_assistant|>assistant<|im_middle|><think>")


def test_tools_are_declared_first_as_tool_declare_turn(tokenizer):
    text = render(tokenizer, [{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL])
    declared = json.dumps([WEATHER_TOOL], separators=(",", ":"))
    assert text.startswith(f"<|im_system|>tool_declare<|im_middle|>{declared}<|im_end|><|im_user|>user")


def test_tool_calls_and_results(tokenizer):
    messages = [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "two cities, two calls",
            "tool_calls": [
                {
                    "id": "functions.get_weather:0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "functions.get_weather:1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18C"},
        {"role": "tool", "tool_call_id": "functions.get_weather:1", "content": "9C"},
    ]
    text = render(tokenizer, messages, tools=[WEATHER_TOOL])
    assert (
        "<|im_assistant|>assistant<|im_middle|><think>two cities, two calls</think>"
        "<|tool_calls_section_begin|>"
        '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        '<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|>'
        "<|tool_calls_section_end|><|im_end|>"
    ) in text
    assert "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n18C<|im_end|>" in text
    assert text.endswith(
        "## Return of functions.get_weather:1\n9C<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids.count(163597) == 2 and ids.count(163595) == 1 and ids[-1] == 163606


def test_named_tool_result_uses_the_name_as_role_label(tokenizer):
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "ok"},
    ]
    assert "<|im_system|>f<|im_middle|>## Return of c1\nok<|im_end|>" in render(tokenizer, messages)


def test_without_generation_prompt_the_prompt_does_not_open_a_turn(tokenizer):
    text = render(tokenizer, [{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert text == "<|im_user|>user<|im_middle|>Hi<|im_end|>"


@pytest.mark.parametrize("content", ["", "   ", "line1\nline2", "emoji 😀 and 中文"])
def test_generation_prompt_always_ends_in_think(tokenizer, content):
    ids = tokenizer.apply_chat_template(
        [{"role": "system", "content": content}, {"role": "user", "content": content or "x"}],
        add_generation_prompt=True,
        return_dict=False,
    )
    assert ids[-4:] == [163588, 69702, 163601, 163606]
