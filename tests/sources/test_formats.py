"""Source formats: messages, ShareGPT, Alpaca, a prompt column and Hugging Face datasets give the same prompts."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.sources.collect import collect_prompts, plans_from_recipe, plans_from_sources
from eagle_datagen.sources.recipe import parse_recipe

from conftest import write_jsonl

SYSTEM = "You are a careful assistant."
QUESTIONS = [
    ("q1", "What is the derivative of x^3?", ""),
    ("q2", "Translate the sentence into French.", "The cat sleeps on the warm windowsill."),
    ("q3", "Name three prime numbers larger than 100.", ""),
]


def user_text(instruction: str, extra: str) -> str:
    return f"{instruction}\n\n{extra}" if extra else instruction


def as_messages() -> list[dict]:
    return [
        {
            "id": qid,
            "category": "chat",
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user_text(q, x)}],
        }
        for qid, q, x in QUESTIONS
    ]


def as_sharegpt() -> list[dict]:
    return [
        {
            "id": qid,
            "category": "chat",
            "conversations": [
                {"from": "system", "value": SYSTEM},
                {"from": "human", "value": user_text(q, x)},
                {"from": "gpt", "value": "the original answer, never training data"},
            ],
        }
        for qid, q, x in QUESTIONS
    ]


def as_alpaca() -> list[dict]:
    return [
        {"id": qid, "category": "chat", "system": SYSTEM, "instruction": q, "input": x, "output": "original answer"}
        for qid, q, x in QUESTIONS
    ]


def collect(path, **settings):
    return collect_prompts(plans_from_sources([str(path)], **settings))


def ids(result) -> list[tuple[str, str]]:
    return [(p.record_id, p.prompt_id) for p in result.prompts]


def test_messages_sharegpt_alpaca_and_a_saved_dataset_give_the_same_prompt_ids(tmp_path):
    datasets = pytest.importorskip("datasets")
    expected = ids(collect(write_jsonl(tmp_path / "messages.jsonl", as_messages())))
    assert [rid for rid, _ in expected] == ["q1", "q2", "q3"]
    assert ids(collect(write_jsonl(tmp_path / "sharegpt.jsonl", as_sharegpt()))) == expected  # detected
    assert ids(collect(write_jsonl(tmp_path / "alpaca.jsonl", as_alpaca()), format="alpaca")) == expected
    datasets.Dataset.from_list(as_sharegpt()).save_to_disk(str(tmp_path / "saved"))
    assert ids(collect(tmp_path / "saved")) == expected
    datasets.DatasetDict(train=datasets.Dataset.from_list(as_alpaca())).save_to_disk(str(tmp_path / "dict"))
    assert ids(collect(tmp_path / "dict")) == expected
    pq.write_table(pa.Table.from_pylist(as_sharegpt()), tmp_path / "sharegpt.parquet")
    assert ids(collect(tmp_path / "sharegpt.parquet")) == expected


def test_prompt_column_and_column_mapping_from_csv(tmp_path):
    path = tmp_path / "questions.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["uid", "question", "sys"])
        for qid, q, x in QUESTIONS:
            writer.writerow([qid, user_text(q, x), SYSTEM])
    expected = ids(collect(write_jsonl(tmp_path / "m.jsonl", as_messages())))
    result = collect_prompts(
        plans_from_recipe(
            parse_recipe(
                {
                    "categories": {
                        "chat": {
                            "sources": [
                                {
                                    "path": str(path),
                                    "format": "prompt",
                                    "columns": {"prompt": "question", "id": "uid", "system": "sys"},
                                }
                            ]
                        }
                    }
                }
            )
        )
    )
    assert ids(result) == expected and not result.rejects


def test_history_is_kept_or_dropped_and_trailing_replies_are_cut(tmp_path):
    conversation = {
        "id": "c1",
        "category": "chat",
        "conversations": [
            {"from": "human", "value": "Write a haiku about rain."},
            {"from": "gpt", "value": "Soft rain on the roof"},
            {"from": "human", "value": "Now one about snow."},
            {"from": "gpt", "value": "the original reply"},
        ],
    }
    path = write_jsonl(tmp_path / "c.jsonl", [conversation])
    [kept] = collect(path).prompts
    assert [m["role"] for m in kept.messages] == ["user", "assistant", "user"]
    assert "the original reply" not in json.dumps(kept.messages)
    [dropped] = collect(path, history="drop").prompts
    assert dropped.messages == [{"role": "user", "content": "Write a haiku about rain."}]
    # a messages record (UltraChat dumps) ending in the original reply: cut when the source sets history
    ultrachat = {
        "category": "chat",
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
    }
    path = write_jsonl(tmp_path / "u.jsonl", [ultrachat])
    assert collect(path).rejects[0].reason == "last_message_role"  # the contract, as it is
    assert collect(path, history="keep").prompts[0].messages == [{"role": "user", "content": "Hi"}]


def test_sharegpt_tool_turns_and_roles(tmp_path):
    record = {
        "category": "tool_use",
        "tools": json.dumps([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]),
        "conversations": [
            {"from": "human", "value": "Weather in Paris?"},
            {"from": "function_call", "value": json.dumps({"name": "weather", "arguments": {"city": "Paris"}})},
            {"from": "observation", "value": "sunny"},
            {"from": "gpt", "value": "It is sunny."},
        ],
    }
    pq.write_table(pa.Table.from_pylist([record]), tmp_path / "tools.parquet")
    [prompt] = collect(tmp_path / "tools.parquet").prompts
    assert [m["role"] for m in prompt.messages] == ["user", "assistant", "tool"]
    assert prompt.messages[2]["tool_call_id"] == prompt.messages[1]["tool_calls"][0]["id"]
    assert prompt.tools[0]["function"]["name"] == "weather"


@pytest.mark.parametrize(
    ("record", "settings", "reason", "detail"),
    [
        ({"category": "c", "prompt": "a", "instruction": "b"}, {}, "ambiguous_format", "instruction, prompt"),
        (  # UltraChat: prompt and messages, the contract first, ending in the dataset's reply
            {
                "category": "c",
                "prompt": "Hi",
                "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
            },
            {},
            "last_message_role",
            "history: keep",
        ),
        ({"category": "c", "text": "hello"}, {}, "missing_messages", "format"),
        ({"category": "c", "question": "hello"}, {"format": "alpaca"}, "missing_field", "'instruction'"),
        ({"category": "c", "conversations": [{"from": "robot", "value": "x"}]}, {}, "unknown_role", "robot"),
        ({"category": "c", "conversations": 5}, {}, "messages_not_list", "conversations"),
        ({"category": "c", "conversations": "hi"}, {}, "invalid_json", "conversations is text"),
        ({"category": "c", "conversations": [{"from": "gpt", "value": "only a reply"}]}, {}, "empty_messages", ""),
        ({"category": "c", "instruction": 7}, {}, "content_not_string", "instruction"),
        ({"id": 12, "category": "c", "prompt": ""}, {}, "empty_content", ""),
    ],
)
def test_unmappable_records_are_rejected_with_their_reason(tmp_path, record, settings, reason, detail):
    result = collect(write_jsonl(tmp_path / "r.jsonl", [record]), **settings)
    [reject] = result.rejects
    assert reject.reason == reason and detail in reject.detail
    assert result.sources[str(tmp_path / "r.jsonl")].rejects == {reason: 1}


def test_llama_factory_tools_as_json_text_with_bare_function_specs(tmp_path):
    record = {
        "category": "tool_use",
        "tools": json.dumps([{"name": "weather", "description": "d", "parameters": {"type": "object"}}]),
        "conversations": [{"from": "human", "value": "Weather?"}, {"from": "gpt", "value": "Sunny."}],
    }
    [prompt] = collect(write_jsonl(tmp_path / "t.jsonl", [record])).prompts
    assert prompt.tools == [{"type": "function", "function": json.loads(record["tools"])[0]}]


def test_numeric_ids_become_record_ids(tmp_path):
    [prompt] = collect(write_jsonl(tmp_path / "n.jsonl", [{"id": 7, "category": "c", "prompt": "hi"}])).prompts
    assert prompt.record_id == "7"


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="unknown field"):
        parse_recipe({"categories": {"c": {"sources": [{"path": "x", "columns": {"question": "q"}}]}}})
    with pytest.raises(ConfigError, match="format"):
        parse_recipe({"categories": {"c": {"sources": [{"path": "x", "format": "yaml"}]}}})
    with pytest.raises(ConfigError, match="only split"):
        plans_from_sources(["hf://datasets/a/b?revision=x"])
    [spec] = plans_from_sources(["hf://datasets/a/b?config=main&split=test"])[0].sources
    assert (spec.path, spec.config, spec.split) == ("hf://datasets/a/b", "main", "test")
