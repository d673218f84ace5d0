"""The stand-in Kimi-K2.5 tokenizer: real ids where the pipeline relies on them, K2.5 template shape, the real
folder's shape (remote code over tiktoken), and the fast variant with the same ids."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from eagle_datagen.standin.kimi_tokenizer import (
    MODEL_VOCAB_SIZE,
    NAMED_TOKENS,
    TOKENIZER_SIZE,
    build_tokenizer_object,
    build_vocab,
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
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=True, return_dict=False
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
    assert [t for t, _, _ in special_token_table()] == list(range(163584, 163842))
    assert tokenizer.convert_tokens_to_ids("<|reserved_token_163589|>") == 163589  # named by id, as the real one
    assert tokenizer.convert_tokens_to_ids("assistant") == 69702
    assert tokenizer.encode("assistant", add_special_tokens=False) == [69702]


def test_the_tokenizer_has_258_special_ids_and_two_more_ids_than_the_model(tokenizer, standin_dir):
    """tokenization_kimi.py numbers 256 + 2 special/reserved ids from 163584: 163,842 ids for 163,840 rows."""
    assert (TOKENIZER_SIZE, MODEL_VOCAB_SIZE) == (163842, 163840)
    assert max(tokenizer.get_vocab().values()) == 163841  # ids are sparse below 163584: len() is smaller
    reserved = ["<|reserved_token_163840|>", "<|reserved_token_163841|>"]
    assert tokenizer.convert_ids_to_tokens([163840, 163841]) == reserved
    assert tokenizer.encode("<|reserved_token_163841|>", add_special_tokens=False) == [163841]
    decoder = json.loads((standin_dir / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    added = [decoder[key] | {"id": int(key)} for key in decoder]
    assert [t["id"] for t in added] == list(range(163584, 163842))
    assert {t["content"] for t in added if not t["special"]} == {
        "<think>",
        "</think>",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
    }


def test_ordinary_text_ids_are_those_of_every_earlier_build(standin_dir):
    """Tests and benchmarks rely on the ordinary-text ids: the BPE vocabulary (ids below 163584) is the one
    builds 1 and 2 made (their tokenizer.json vocab hashed the same); build 3 made it tiktoken ranks."""
    vocab = sorted(((t, i) for t, i in build_vocab_from_ranks(standin_dir).items()), key=lambda kv: kv[1])
    assert hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest() == (
        "c494e8d7134c91888b14c75d9e56546f52d67022c2c636afe667675248d00cee"
    )


def build_vocab_from_ranks(folder) -> dict[str, int]:
    """tiktoken.model read back as token (GPT-2 byte characters) -> rank."""
    byte_char = gpt2_byte_to_char()
    vocab = {}
    for line in (folder / "tiktoken.model").read_text().splitlines():
        token, rank = line.split()
        vocab["".join(byte_char[b] for b in base64.b64decode(token))] = int(rank)
    return vocab


def test_the_folder_has_the_real_shape(standin_dir):
    """tiktoken.model, the remote code and its relatively imported tool encoder, auto_map, config.json."""
    names = {p.name for p in standin_dir.iterdir()}
    assert {"tiktoken.model", "tokenization_kimi.py", "tool_declaration_ts.py", "tokenizer_config.json"} <= names
    assert {"chat_template.jinja", "config.json"} <= names and "tokenizer.json" not in names
    config = json.loads((standin_dir / "tokenizer_config.json").read_text())
    assert config["auto_map"]["AutoTokenizer"][0] == "tokenization_kimi.TikTokenTokenizer"
    assert json.loads((standin_dir / "config.json").read_text())["model_type"] == "kimi_k25"
    code = (standin_dir / "tokenization_kimi.py").read_text()
    assert "class TikTokenTokenizer(PreTrainedTokenizer)" in code and "from .tool_declaration_ts import" in code
    assert build_vocab_from_ranks(standin_dir) == build_vocab(_corpus())


def _corpus() -> str:
    from importlib import resources

    return resources.files("eagle_datagen.standin").joinpath("corpus.txt").read_text(encoding="utf-8")


def test_loaded_through_its_own_remote_code(tokenizer):
    assert type(tokenizer).__name__ == "TikTokenTokenizer" and not tokenizer.is_fast
    assert type(tokenizer).__module__.startswith("transformers_modules.")
    assert tokenizer.encode("<|im_end|>") == [163586]  # encode() without keywords allows every special token


def test_remote_code_and_fast_variant_give_the_same_ids(tokenizer, fast_tokenizer):
    """Same ranks, same ids: ordinary text, special-token text, the rendered templates (tools aside); the remote
    code's call (transformers' generic slow path: added-token split, _tokenize, one id at a time) equals its
    encode() without keywords (tiktoken on the whole text)."""
    texts = _corpus().split("\n\n") + [
        "The assistant explains reasoning step by step. 中文 Ünïcode 😀 x^2 + y^2",
        "<think>hi</think><|im_end|>  trailing   spaces\n\n\tand tabs 12345678 ＡＢＣ",
        "<|reserved_token_163700|> and [BOS] inline",
    ]
    remote = tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert remote == fast_tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert remote == [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]
    assert [tokenizer.encode(t) for t in texts] == remote
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "多少 is 2+2?"}]
    assert tokenizer.apply_chat_template(messages) == fast_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )


def test_encoding_has_the_real_files_call_structure_and_no_shortcut(tokenizer):
    """Calls take transformers' generic path (the real file overrides none of its steps); encode() without keywords
    cuts runs of more than 25,000 characters before tiktoken, as the real file does; with keywords it is
    transformers' encode."""
    from transformers import PreTrainedTokenizer

    cls = type(tokenizer)
    assert all(getattr(cls, name) is getattr(PreTrainedTokenizer, name) for name in ("__call__", "_encode_plus"))
    run = "the" * 9000  # 27,000 characters, no whitespace
    assert tokenizer.encode(run) != tokenizer.model.encode(run, allowed_special="all")
    assert tokenizer.encode(run) == tokenizer.model.encode(run[:25_000]) + tokenizer.model.encode(run[25_000:])
    assert tokenizer(run, add_special_tokens=False)["input_ids"] == tokenizer.encode(run)
    assert tokenizer.encode("<|im_end|>", allow_special_tokens=False) != [163586]
    assert tokenizer.encode("<|im_end|>", add_special_tokens=False) == [163586]  # transformers' encode: trie split


def test_apply_chat_template_defaults_like_the_real_one(tokenizer):
    """tokenize=False and add_generation_prompt=True unless asked otherwise."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|><think>"


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


def test_numbers_split_in_groups_of_three_like_kimi(tokenizer, fast_tokenizer):
    pieces = fast_tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("12345 abc")
    assert [p for p, _ in pieces][:2] == ["123", "45"]
    assert tokenizer.encode("12345") == tokenizer.encode("123") + tokenizer.encode("45")


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


def test_tools_are_declared_first_as_typescript(tokenizer):
    """The remote code hands the template the tools as TypeScript (`tools_ts_str`), as the real K2.5 does."""
    text = render(tokenizer, [{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL])
    assert text.startswith(
        "<|im_system|>tool_declare<|im_middle|># Tools\n\n## functions\nnamespace functions {\n"
        "// Current weather for a city\ntype get_weather = (_: {\n  city: string,\n}) => any;\n}\n"
        "<|im_end|><|im_user|>user"
    )


def test_fast_variant_declares_tools_as_json(fast_tokenizer):
    text = render(fast_tokenizer, [{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL])
    declared = json.dumps([WEATHER_TOOL], separators=(",", ":"), sort_keys=True)
    assert text.startswith(f"<|im_system|>tool_declare<|im_middle|>{declared}<|im_end|><|im_user|>user")


def deep_sort(value):
    """tokenization_kimi.py's deep_sort_dict: every mapping's keys sorted, at every depth."""
    if isinstance(value, dict):
        return {k: deep_sort(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [deep_sort(v) for v in value]
    return value


def test_tool_schemas_are_deep_sorted_before_rendering(tokenizer, fast_tokenizer):
    """The real apply_chat_template deep-sorts the tools: the key order of a spec does not change the prompt."""
    tool = {
        "type": "function",
        "function": {
            "parameters": {
                "type": "object",
                "required": ["unit", "city"],
                "properties": {"unit": {"enum": ["C", "F"], "type": "string"}, "city": {"type": "string"}},
            },
            "name": "get_weather",
            "description": "Current weather",
        },
    }
    reordered = json.loads(json.dumps(deep_sort(tool)))
    messages = [{"role": "user", "content": "Weather?"}]
    text = render(tokenizer, messages, tools=[tool])
    assert text == render(tokenizer, messages, tools=[reordered])
    assert '  city: string,\n  unit: "C" | "F",\n' in text  # properties in sorted order
    text = render(fast_tokenizer, messages, tools=[tool])
    assert text == render(fast_tokenizer, messages, tools=[reordered])
    declared = json.dumps([deep_sort(tool)], separators=(",", ":"), ensure_ascii=False)
    assert f"<|im_system|>tool_declare<|im_middle|>{declared}<|im_end|>" in text
    assert '"required":["unit","city"]' in declared  # lists keep their order; only mapping keys are sorted


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
        tokenize=True,
        return_dict=False,
    )
    assert ids[-4:] == [163588, 69702, 163601, 163606]
