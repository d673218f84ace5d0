"""The turns setting: declared in the recipe, overridden by --turns, recorded in the plan."""

from __future__ import annotations

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.plan import CategorySettings, RunPlan
from eagle_datagen.generation.stage import SamplingOverrides, category_settings
from eagle_datagen.sources.recipe import parse_recipe

RECIPE = {
    "defaults": {"turns": "each", "max_tool_steps": 3},
    "categories": {"chat": {"sources": ["a.jsonl"], "turns": "last"}, "agentic": {"sources": ["b.jsonl"]}},
}


def test_recipe_turns_per_category_and_the_flag_overrides_them():
    recipe = parse_recipe(RECIPE)
    settings = category_settings(["chat", "agentic"], recipe, None, SamplingOverrides())
    assert (settings["chat"].turns, settings["agentic"].turns) == ("last", "each")
    assert settings["agentic"].max_tool_steps == 3
    forced = category_settings(["chat", "agentic"], recipe, None, SamplingOverrides(turns="each"))
    assert {s.turns for s in forced.values()} == {"each"}
    assert category_settings(["x"], None, None, SamplingOverrides())["x"].turns == "last"


def test_a_bad_turns_value_is_one_line_naming_the_field():
    with pytest.raises(ConfigError, match="turns"):
        parse_recipe({"categories": {"chat": {"sources": ["a.jsonl"], "turns": "all"}}})


def test_a_plan_written_before_the_setting_loads_as_single_turn():
    raw = {
        "run_id": "r",
        "model": "m",
        "profile": "kimi-k2.5",
        "categories": {"chat": {"sampling": {"temperature": 1.0}, "samples_per_prompt": 1}},
        "shards": [],
        "provenance": {},
    }
    plan = RunPlan.from_json(raw)
    assert plan.categories["chat"] == CategorySettings({"temperature": 1.0}, 1, "last", 8)


def test_tool_loop_drift_is_diagnosed_with_its_cause():
    from eagle_datagen.stats.conversations import tool_loop_drift_warning

    assert (
        tool_loop_drift_warning({"prompt_drift": {"tool_result": {"none": 5}, "user_turn": {"reasoning_dropped": 3}}})
        is None
    )
    reencoded = tool_loop_drift_warning({"prompt_drift": {"tool_result": {"none": 2, "reencoded": 1}}})
    assert reencoded.startswith("1 of 3 tool_result steps") and "round-trip" in reencoded
    dropped = tool_loop_drift_warning({"prompt_drift": {"tool_result": {"reasoning_dropped": 4}}})
    assert "the chat template drops or re-renders turns of the current tool loop" in dropped
