"""Preflight judges each endpoint: one that fails its canary or its checks is left out with a warning naming it
and the reason, the run publishes from the others, and the manifest and report list it; `min_endpoints`
(flag, recipe, trigger form) is how many must pass. The run's own failures stop it whatever the endpoints."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.inference.preflight import RunLevelError
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen_stack.processes import free_port
from generation_runs import run_options

pytestmark = pytest.mark.slow
PROMPTS = 6

BROKEN = {
    "echo bug": ({"faults": {"echo": 1.0}}, "prompt-echo bug"),
    "think tokens stripped": ({"faults": {"strip_think": 1.0}}, "strips think tokens"),
    "auto-truncating": ({"server_args": {"allow_auto_truncate": True}}, "--allow-auto-truncate"),
    "wrong model": ({"model_path": "Qwen/Qwen3-8B"}, "serves 'Qwen/Qwen3-8B'"),
    "watermark": ({"enable_watermark": True}, "--enable-watermark"),
    # a 400 to the canary that the other replica accepts: this replica's context length, not the run's sampling
    "shorter context": ({"context_length": 2048}, "exceeds the model's maximum context length of 2048 tokens"),
}


def server(**changes) -> SimServerThread:
    return SimServerThread(dataclasses.replace(SimConfig().with_profile("instant"), **changes))


def manifest(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "manifests" / "run=r.json").read_text())


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_a_replica_failing_preflight_is_left_out_and_the_run_publishes_from_the_other(tmp_path, caplog, fault):
    changes, reason = BROKEN[fault]
    with server() as good, server(**changes) as broken:
        with caplog.at_level("WARNING", logger="eagle_datagen.inference.preflight"):
            summary = run_generation(run_options(tmp_path, [good.url, broken.url], prompts=PROMPTS, canary=True))
        assert broken.stats()["generations"] <= 3  # its canaries only (one per seed tried): no sample went there
    assert summary.pending == 0 and summary.published is not None and summary.samples == PROMPTS
    assert [s["url"] for s in summary.servers] == [good.url]
    [warning] = [r.getMessage() for r in caplog.records if "left out of this run" in r.getMessage()]
    assert broken.url in warning and reason in warning and "\n" not in warning
    [left] = manifest(tmp_path)["validation"]["endpoints_left_out"]
    assert left["url"] == broken.url and reason in left["reason"]
    report = (tmp_path / "out" / "manifests" / "run=r.report.html").read_text()
    assert "Left out in preflight" in report and broken.url in report


def test_min_endpoints_two_stops_in_preflight_naming_the_one_left_out(tmp_path):
    with server() as good, server(faults={"echo": 1.0}) as broken:
        options = run_options(tmp_path, [good.url, broken.url], prompts=PROMPTS, canary=True, min_endpoints=2)
        with pytest.raises(ConfigError) as info:
            run_generation(options)
        assert good.stats()["generations"] <= 1  # its canary, no sample
    message = str(info.value)
    assert "1 of 2 SGLang endpoints passed preflight, fewer than the 2 required (--min-endpoints)" in message
    assert broken.url in message and "prompt-echo bug" in message and "\n" not in message
    assert not (tmp_path / "out" / "plans").exists()


def test_every_endpoint_failing_stops_the_run_naming_each(tmp_path):
    with server(faults={"echo": 1.0}) as one, server(model_path="Qwen/Qwen3-8B") as two:
        with pytest.raises(ConfigError) as info:
            run_generation(run_options(tmp_path, [one.url, two.url], prompts=PROMPTS, canary=True))
    message = str(info.value)
    assert "0 of 2 SGLang endpoints passed preflight" in message
    assert f"{one.url}: " in message and f"{two.url}: " in message and "\n" not in message


def test_an_unreachable_endpoint_among_healthy_ones_is_left_out_and_the_run_publishes(tmp_path, caplog):
    unreachable = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with server() as one, server() as two:
        with caplog.at_level("WARNING", logger="eagle_datagen.inference.preflight"):
            options = run_options(tmp_path, [one.url, unreachable, two.url], prompts=PROMPTS, canary=True)
            summary = run_generation(options)
    assert summary.pending == 0 and summary.published is not None
    assert [s["url"] for s in summary.servers] == [one.url, two.url]
    [warning] = [r.getMessage() for r in caplog.records if "left out of this run" in r.getMessage()]
    assert unreachable in warning and "(2 of 3 go on)" in warning and "cannot connect" in warning
    [left] = manifest(tmp_path)["validation"]["endpoints_left_out"]
    assert left["url"] == unreachable and "is not ready" in left["reason"]


def test_a_failure_of_the_runs_own_stops_it_even_beside_a_reachable_healthy_deployment(tmp_path):
    """Every replica that answers refuses the run's canary (its max_new_tokens does not fit their context): no
    endpoint passed what failed, so it is the run's own failure, said as such (not "0 of 3 passed"), whatever
    else is wrong (one endpoint is unreachable besides)."""
    unreachable = f"http://127.0.0.1:{free_port()}"
    with server(context_length=2048) as one, server(context_length=2048) as two:
        options = run_options(tmp_path, [one.url, unreachable, two.url], prompts=PROMPTS, canary=True)
        with pytest.raises(RunLevelError) as info:
            run_generation(options)
        assert one.stats()["generations"] == two.stats()["generations"] == 0
    message = str(info.value)
    assert "answered 400 to the canary generation" in message and "check the sampling parameters" in message
    assert "exceeds the model's maximum context length of 2048 tokens" in message and "\n" not in message
    assert not (tmp_path / "out" / "plans").exists()


def test_min_endpoints_as_a_share_of_the_endpoints_given(tmp_path):
    """100% of two with one broken stops in preflight; 50% of them goes on with the healthy one."""
    with server() as good, server(faults={"echo": 1.0}) as broken:
        urls = [good.url, broken.url]
        with pytest.raises(ConfigError) as info:
            run_generation(run_options(tmp_path, urls, prompts=PROMPTS, canary=True, min_endpoints="100%"))
        assert "1 of 2 SGLang endpoints passed preflight, fewer than the 2 required" in str(info.value)
        summary = run_generation(run_options(tmp_path, urls, prompts=PROMPTS, canary=True, min_endpoints="50%"))
    assert summary.published is not None and [s["url"] for s in summary.servers] == [good.url]


def test_the_flag_and_the_recipe_take_a_count_or_a_share(tmp_path, capsys):
    from eagle_datagen.cli import build_parser
    from eagle_datagen.sources.recipe import parse_recipe

    base = ["run", "--sglang-url", "http://a:1", "--output", "o", "--tokenizer", "t"]
    assert build_parser().parse_args([*base, "--min-endpoints", "50%"]).min_endpoints == "50%"
    assert build_parser().parse_args([*base, "--min-endpoints", "2"]).min_endpoints == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args([*base, "--min-endpoints", "half"])
    assert "'half' is neither a number of endpoints (2) nor a share (50%)" in capsys.readouterr().err
    categories = {"categories": {"math": {"sources": ["m.jsonl"]}}}
    assert parse_recipe({"min_endpoints": "75%"} | categories).min_endpoints == "75%"
    assert parse_recipe({"min_endpoints": 3} | categories).min_endpoints == 3
    with pytest.raises(ConfigError) as info:
        parse_recipe({"min_endpoints": "most"} | categories)
    assert "min_endpoints 'most' is neither a number of endpoints" in str(info.value)
