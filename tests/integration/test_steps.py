"""The run as separate JSON-in, JSON-out steps (what Airflow tasks call), each from a fresh start."""

from __future__ import annotations

import json

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.steps import (
    RunConfig,
    finalize_step,
    generate_shard_step,
    plan_step,
    preflight_step,
)
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.storage.manifest import read_manifest
from eagle_datagen.storage.output_root import LocalOutputRoot

from conftest import DEMO_RECIPE

pytestmark = pytest.mark.slow


def test_steps_run_a_category_end_to_end_through_json(tmp_path):
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        config = RunConfig(
            output=str(tmp_path),
            tokenizer="standin:kimi-k2.5",
            trust_remote_code=True,
            sglang_urls=[sim.url],
            run_id="steps1",
            recipe=str(DEMO_RECIPE),
            categories=["math"],
            shard_size=5,
            draft_vocab_size=64,
        ).to_dict()
        config = json.loads(json.dumps(config))  # what an orchestrator passes around
        servers = json.loads(json.dumps(preflight_step(config)))
        plan = json.loads(json.dumps(plan_step(config, servers)))
        assert plan["categories"] == ["math"] and len(plan["shards"]) == 4 and plan["samples"] == 18
        results = [generate_shard_step(config, servers, shard) for shard in reversed(plan["shards"])]
        assert sum(r["rows"] for r in results) == 18
        again = generate_shard_step(config, servers, plan["shards"][0])  # a task retry: nothing to redo
        assert again["generated"] == 0 and again["resumed"] == again["rows"]
        final = finalize_step(config)
    assert final["published"] and final["data"] == 18
    assert read_manifest(LocalOutputRoot(str(tmp_path)), "steps1")["counts"]["samples"] == 18


def test_unknown_settings_are_refused():
    with pytest.raises(ConfigError, match=r"unknown run setting\(s\) \['temprature'\]"):
        RunConfig.from_dict({"output": "o", "tokenizer": "t", "sglang_urls": [], "run_id": "r", "temprature": 1})
