"""The tokenize stage: identical ids to apply_chat_template, in order, across processes, with rejects."""

from __future__ import annotations

import shutil

import pytest

from eagle_datagen.records import validate_record
from eagle_datagen.sources.collect import collect_prompts, plans_from_recipe
from eagle_datagen.sources.recipe import load_recipe
from eagle_datagen.tokenization.loader import load_tokenizer
from eagle_datagen.tokenization.tokenize import tokenize_prompts

from conftest import DEMO_RECIPE, user_record


@pytest.fixture(scope="module")
def demo_records():
    recipe = load_recipe(DEMO_RECIPE)
    return collect_prompts(plans_from_recipe(recipe), base_dir=recipe.base_dir).prompts


def reference_ids(tokenizer, record):
    return tokenizer.apply_chat_template(
        record.messages, tools=record.tools, add_generation_prompt=True, tokenize=True, return_dict=False
    )


def test_ids_equal_apply_chat_template_for_every_demo_prompt(loaded_tokenizer, demo_records):
    result = tokenize_prompts(loaded_tokenizer, demo_records, max_prompt_tokens=100_000, processes=1, batch_size=7)
    assert not result.rejects
    assert [t.record for t in result.prompts] == demo_records
    for item in result.prompts:
        assert item.prompt_ids == reference_ids(loaded_tokenizer.tokenizer, item.record)
        assert item.prompt_ids[-1] == 163606


def test_processes_give_the_same_result_in_the_same_order(loaded_tokenizer, demo_records):
    records = demo_records * 3  # repeated records are fine here: order must still hold
    one = tokenize_prompts(loaded_tokenizer, records, 100_000, processes=1, batch_size=16)
    two = tokenize_prompts(loaded_tokenizer, records, 100_000, processes=2, batch_size=16)
    assert [t.prompt_ids for t in one.prompts] == [t.prompt_ids for t in two.prompts]
    assert [t.record.prompt_id for t in two.prompts] == [r.prompt_id for r in records]


@pytest.mark.timeout(120)
def test_processes_do_not_hang_with_tokenizers_parallelism_on(loaded_tokenizer, demo_records, monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    loaded_tokenizer.tokenizer(["warm up the Rust thread pool in the parent"] * 64)
    result = tokenize_prompts(loaded_tokenizer, demo_records * 2, 100_000, processes=2, batch_size=32)
    assert len(result.prompts) == 2 * len(demo_records)


def test_prompts_over_the_limit_are_rejected_with_the_reason(loaded_tokenizer):
    records = [
        validate_record(user_record("short", id="s"), "o:1"),
        validate_record(user_record("word " * 500, id="long", category="math"), "o:2"),
    ]
    result = tokenize_prompts(loaded_tokenizer, records, {"*": 100, "chat": 100}, processes=1)
    assert [t.record.record_id for t in result.prompts] == ["s"]
    [reject] = result.rejects
    assert (reject.reason, reject.record_id, reject.stage) == ("prompt_too_long", "long", "tokenize")
    assert reject.category == "math"
    assert "limit 100" in reject.detail
    per_category = tokenize_prompts(loaded_tokenizer, records, {"*": 100, "math": 10_000}, processes=1)
    assert len(per_category.prompts) == 2


def test_context_length_bounds_the_limit(loaded_tokenizer):
    from dataclasses import replace

    tiny = replace(loaded_tokenizer, profile=replace(loaded_tokenizer.profile, context_length=20))
    record = validate_record(user_record("a fairly long sentence with quite a few words in it"), "o")
    assert tokenize_prompts(tiny, [record], 100_000, processes=1).rejects[0].reason == "prompt_too_long"


def test_template_errors_reject_one_record_and_the_rest_go_on(standin_dir, tmp_path, kimi_profile):
    target = tmp_path / "tok"
    shutil.copytree(standin_dir, target)
    template = (target / "chat_template.jinja").read_text()
    (target / "chat_template.jinja").write_text(
        "{%- if 'forbidden' in messages[-1]['content'] -%}{{ raise_exception('forbidden word') }}{%- endif -%}"
        + template
    )
    loaded = load_tokenizer(str(target), kimi_profile, trust_remote_code=True)
    records = [validate_record(user_record(t), f"o:{i}") for i, t in enumerate(["fine", "forbidden", "also fine"])]
    result = tokenize_prompts(loaded, records, 1000, processes=1)
    assert [t.record.messages[0]["content"] for t in result.prompts] == ["fine", "also fine"]
    assert result.rejects[0].reason == "template_error" and "forbidden word" in result.rejects[0].detail


def test_a_prompt_with_an_id_beyond_the_model_vocabulary_is_rejected_and_the_rest_go_on(standin_dir, kimi_profile):
    """[UNK] (163838) lies beyond a 163,700-id model: typed text is refused as special_token_text anyway;
    allowed, it reaches the ids and is refused as id_beyond_model_vocab, with the id and its text."""
    from eagle_datagen.profile import parse_profile

    small = parse_profile(
        {
            "name": "small",
            "model": "x/small",
            "vocab_size": 163700,
            "context_length": 1000,
            "thinking": "prefilled",
            "tokens": {k: {"text": v.text, "id": v.id} for k, v in kimi_profile.tokens.items()},
            "prompt_suffix": ["think_start"],
        }
    )
    loaded = load_tokenizer(str(standin_dir), small, trust_remote_code=True)
    records = [validate_record(user_record(t), f"o:{i}") for i, t in enumerate(["fine", "a [UNK] b", "also fine"])]
    guarded = tokenize_prompts(loaded, records, 1000, processes=1)
    assert [r.reason for r in guarded.rejects] == ["special_token_text"]
    allowed = tokenize_prompts(loaded, records, 1000, processes=1, allow_special_token_text=True)
    assert [t.record.messages[0]["content"] for t in allowed.prompts] == ["fine", "also fine"]
    [reject] = allowed.rejects
    assert reject.reason == "id_beyond_model_vocab" and reject.stage == "tokenize"
    assert "holds id 163838 ('[UNK]') at position" in reject.detail and "vocabulary of 163,700 ids" in reject.detail
    assert all(max(t.prompt_ids) < 163700 for t in allowed.prompts)


def test_the_reserved_ids_beyond_kimis_vocabulary_never_enter_a_prompt(loaded_tokenizer):
    """The stand-in has the real tokenizer's shape: 163840 and 163841 exist only in the tokenizer."""
    assert loaded_tokenizer.ids_beyond_vocab == 2
    records = [validate_record(user_record(t), f"o:{i}") for i, t in enumerate(["x <|reserved_token_163840|>", "ok"])]
    result = tokenize_prompts(loaded_tokenizer, records, 1000, processes=1, allow_special_token_text=True)
    assert [p.record.messages[0]["content"] for p in result.prompts] == ["ok"]
    [reject] = result.rejects
    assert reject.reason == "id_beyond_model_vocab" and "id 163840 ('<|reserved_token_163840|>')" in reject.detail
