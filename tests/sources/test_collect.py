"""Reading JSONL, Parquet and CSV sources, globs and folders; dedup; caps; the reject-rate threshold."""

from __future__ import annotations

import csv
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_datagen.errors import ConfigError, RejectRateExceeded, SourceError
from eagle_datagen.sources.collect import (
    cap_prompts,
    check_reject_rate,
    collect_prompts,
    plans_from_recipe,
    plans_from_sources,
)
from eagle_datagen.sources.recipe import load_recipe, parse_recipe

from conftest import DEMO_RECIPE, user_record, write_jsonl

TOOL_PROMPT = {
    "id": "t1",
    "category": "tool_use",
    "messages": [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ],
    "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}],
}


def collect(*specs, **kwargs):
    return collect_prompts(plans_from_sources([str(s) for s in specs]), **kwargs)


def test_parquet_with_nested_columns(tmp_path):
    rows = [TOOL_PROMPT, user_record("a", id="p1")]  # from_pylist takes its columns from the first row
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    result = collect(tmp_path / "p.parquet")
    assert [p.record_id for p in result.prompts] == ["t1", "p1"]
    assert result.prompts[1].tools is None
    tool = result.prompts[0]
    assert tool.messages[1] == TOOL_PROMPT["messages"][1]  # struct nulls did not leak in
    assert tool.tools == TOOL_PROMPT["tools"]


def test_parquet_with_json_text_columns(tmp_path):
    table = pa.table(
        {
            "id": ["j1"],
            "category": ["code"],
            "messages": [json.dumps(TOOL_PROMPT["messages"])],
            "tools": [json.dumps(TOOL_PROMPT["tools"])],
        }
    )
    pq.write_table(table, tmp_path / "j.parquet")
    [prompt] = collect(tmp_path / "j.parquet").prompts
    assert prompt.category == "code" and prompt.tools == TOOL_PROMPT["tools"]


def test_csv_with_json_columns_and_a_bad_row(tmp_path):
    path = tmp_path / "p.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "category", "messages", "tools"])
        writer.writerow(["c1", "chat", json.dumps([{"role": "user", "content": 'héllo, "quoted"\nline'}]), ""])
        writer.writerow(["c2", "chat", "[{not json", ""])
        writer.writerow(["c3", "tool_use", json.dumps(TOOL_PROMPT["messages"]), json.dumps(TOOL_PROMPT["tools"])])
    result = collect(path)
    assert [p.record_id for p in result.prompts] == ["c1", "c3"]
    assert result.prompts[0].messages[0]["content"] == 'héllo, "quoted"\nline'
    [reject] = result.rejects
    assert reject.reason == "invalid_json" and reject.record_id == "c2" and reject.origin.endswith(":row2")


def test_csv_without_messages_column_is_a_source_error(tmp_path):
    (tmp_path / "bad.csv").write_text("id,text\n1,hello\n")
    with pytest.raises(SourceError, match="'messages' column"):
        collect(tmp_path / "bad.csv")


def test_globs_folders_and_gzip(tmp_path):
    write_jsonl(tmp_path / "a" / "one.jsonl", [user_record("one")])
    write_jsonl(tmp_path / "a" / "two.jsonl", [user_record("two")])
    (tmp_path / "a" / "notes.txt").write_text("ignored")
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(json.dumps(user_record("three")).encode() + b"\n"))
    assert len(collect(tmp_path / "a").prompts) == 2
    assert len(collect(f"{tmp_path}/a/*.jsonl").prompts) == 2
    assert len(collect(f"{tmp_path}/**/*.jsonl*").prompts) == 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("missing.jsonl", "prompt source not found"),
        ("*.nothing.jsonl", "matches no"),
        ("notes.txt", "unsupported prompt source format"),
        ("empty_dir", "holds no"),
    ],
)
def test_sources_that_name_nothing_are_errors(tmp_path, spec, message):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(SourceError, match=message):
        collect(tmp_path / spec)


def test_unreadable_source_is_a_one_line_error(tmp_path):
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(SourceError, match="cannot read Parquet prompt source .*broken.parquet") as info:
        collect(tmp_path / "broken.parquet")
    assert "\n" not in str(info.value)
    (tmp_path / "bad.csv").write_bytes(b"messages\n\xff\xfe\n")
    with pytest.raises(SourceError, match="is not UTF-8"):
        collect(tmp_path / "bad.csv")


def test_folder_named_like_a_file_is_read_as_a_folder(tmp_path):
    path = tmp_path / "dir.jsonl"
    path.mkdir()
    (path / "inner.csv").write_text("messages\n")
    assert collect(path).prompts == []


def test_dedup_across_two_sources_and_categories(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [user_record("same", id="a1", category="math"), user_record("only a")])
    b = write_jsonl(tmp_path / "b.jsonl", [user_record("same", id="b1", category="chat"), user_record("only b")])
    result = collect(a, b)
    assert [p.record_id for p in result.prompts if p.messages[0]["content"] == "same"] == ["a1"]
    assert len(result.prompts) == 3
    assert result.counts["chat"].duplicates == 1
    assert sum(c.read for c in result.counts.values()) == 4


def test_cap_is_deterministic_seeded_and_stable_when_records_are_added(tmp_path):
    rows = [user_record(f"prompt {i}") for i in range(200)]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    first = [p.prompt_id for p in collect(path, limit_per_category=50, seed=1).prompts]
    again = [p.prompt_id for p in collect(path, limit_per_category=50, seed=1).prompts]
    other_seed = [p.prompt_id for p in collect(path, limit_per_category=50, seed=2).prompts]
    assert first == again and len(first) == 50
    assert set(first) != set(other_seed)
    more = write_jsonl(tmp_path / "more.jsonl", rows + [user_record(f"new {i}") for i in range(20)])
    grown = {p.prompt_id for p in collect(more, limit_per_category=50, seed=1).prompts}
    assert len(set(first) & grown) >= 40  # new records displace only where they rank in


def test_cap_keeps_original_order():
    from eagle_datagen.records import validate_record

    records = [validate_record(user_record(f"p{i}"), f"o:{i}") for i in range(30)]
    kept = cap_prompts(records, 10, seed=3, salt="chat")
    assert [records.index(r) for r in kept] == sorted(records.index(r) for r in kept)


def test_recipe_caps_overrides_and_category_mapping(tmp_path):
    write_jsonl(tmp_path / "data" / "m.jsonl", [user_record(f"m{i}", category="chat") for i in range(30)])
    write_jsonl(tmp_path / "data" / "c.jsonl", [user_record(f"c{i}") for i in range(10)])
    recipe_path = tmp_path / "r.yaml"
    recipe_path.write_text(
        "version: 1\nseed: 7\n"
        "defaults: {sampling: {temperature: 0.7, top_p: 0.9, max_new_tokens: 100}}\n"
        "categories:\n"
        "  math: {sources: [{path: data/m.jsonl, max_prompts: 20}], max_prompts: 12,"
        " sampling: {max_new_tokens: 500}, samples_per_prompt: 3}\n"
        "  chat: {sources: data/c.jsonl}\n"
    )
    recipe = load_recipe(recipe_path)
    result = collect_prompts(plans_from_recipe(recipe), seed=recipe.seed, base_dir=recipe.base_dir)
    groups = result.by_category()
    assert len(groups["math"]) == 12 and len(groups["chat"]) == 10  # the recipe's category wins
    assert result.counts["math"].capped == 18
    assert recipe.sampling_for("math").model_dump() == {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": None,
        "min_p": None,
        "max_new_tokens": 500,
    }
    assert recipe.sampling_for("chat").max_new_tokens == 100
    assert recipe.samples_per_prompt_for("math") == 3 and recipe.samples_per_prompt_for("chat") == 1
    only_chat = collect_prompts(plans_from_recipe(recipe, ["chat"]), base_dir=recipe.base_dir)
    assert set(only_chat.by_category()) == {"chat"}
    with pytest.raises(ConfigError, match="not in the recipe"):
        plans_from_recipe(recipe, ["poetry"])


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"categories": {}}, "categories"),
        ({"categories": {"Math": {"sources": ["x"]}}}, "category name 'Math'"),
        ({"categories": {"math": {"sources": []}}}, "categories.math.sources"),
        ({"categories": {"math": {"sources": ["x"], "max_prompt": 3}}}, "categories.math.max_prompt: unknown key"),
        ({"categories": {"math": {"sources": ["x"], "sampling": {"temperature": 9}}}}, "temperature"),
        ({"categories": {"math": {"sources": ["x"], "sampling": {"seed": 1}}}}, "sampling.seed: unknown key"),
        ({"version": 2, "categories": {"math": {"sources": ["x"]}}}, "version"),
        ({"max_reject_rate": 2, "categories": {"math": {"sources": ["x"]}}}, "max_reject_rate"),
        (
            {"max_rates": {"echo": 0.1}, "categories": {"math": {"sources": ["x"]}}},
            "max_rates: .*unknown reason 'echo'",
        ),
        ({"max_rates": {"prompt_echo": 2}, "categories": {"math": {"sources": ["x"]}}}, "prompt_echo must be a number"),
        ([1, 2], "must be a YAML mapping"),
    ],
)
def test_bad_recipes_are_one_line_errors(raw, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_recipe(raw, "r.yaml")
    assert "\n" not in str(info.value)


def test_recipe_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="recipe not found"):
        load_recipe(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("categories: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_recipe(tmp_path / "bad.yaml")


def test_demo_recipe_loads_and_covers_six_categories():
    recipe = load_recipe(DEMO_RECIPE)
    result = collect_prompts(plans_from_recipe(recipe), seed=recipe.seed, base_dir=recipe.base_dir)
    assert len(recipe.categories) >= 6 and not result.rejects
    assert 100 <= result.records_read <= 200
    prompts = result.prompts
    assert any(p.messages[0]["role"] == "system" for p in prompts)
    assert any(p.tools and any(m["role"] == "tool" for m in p.messages) for p in prompts)
    assert sum(1 for p in prompts if sum(m["role"] == "user" for m in p.messages) > 1) >= 5
    assert any(any(ord(ch) > 0x3000 for m in p.messages for ch in m.get("content", "")) for p in prompts)


def test_reject_rate_threshold(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [user_record("ok"), b"{bad", user_record("ok2"), b"{bad2"])
    result = collect(path)
    assert result.reject_rate == 0.5
    check_reject_rate(result, 0.5, "rejects.jsonl")
    with pytest.raises(RejectRateExceeded, match=r"2 of 4 .*50\.0%.*rejects\.jsonl"):
        check_reject_rate(result, 0.2, "rejects.jsonl")


def test_recipe_max_rates_become_the_runs_thresholds_under_the_users():
    from eagle_datagen.generation.stage import RunOptions, resolve_thresholds
    from eagle_datagen.tokenization.stage import TokenizeOptions

    recipe = parse_recipe({"max_rates": {"prompt_echo": 0.05, "no_eos": 0.1}, "categories": {"m": {"sources": ["x"]}}})
    options = RunOptions(TokenizeOptions(output="o", tokenizer="t"), ["http://a"], max_rates={"no_eos": 0.2})
    thresholds = resolve_thresholds(options, recipe).publish.thresholds
    assert (thresholds.prompt_echo, thresholds.no_eos, thresholds.missing_think_end) == (0.05, 0.2, 0.5)
