"""`turns: each` end to end against the stand-in server (with the stand-in tokenizer and its Kimi-format
tool calls): per-step samples, prompts as the template renders them, tool loops, and SIGKILL + resume."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conversation_records import multi_turn_record, tool_loop_record
from eagle_datagen.generation.plan import load_plan
from eagle_datagen.generation.publish import data_key, quarantine_key
from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.generation.steps import (
    RunConfig,
    finalize_step,
    generate_shard_step,
    plan_step,
    preflight_step,
    run_generation,
)
from eagle_datagen.profile import load_profile
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.storage.output_root import LocalOutputRoot
from eagle_datagen.tokenization.stage import TokenizeOptions
from eagle_datagen.validation.rules import ValidationLimits
from generation_runs import checkpointed_samples, run_cli, run_options
from old_publish import old_shard_bytes

from conftest import REPO, write_jsonl

pytestmark = pytest.mark.slow
THINK_END, EOS = 163607, 163586


@pytest.fixture(scope="module")
def sim():
    config = SimConfig(tokenizer_path="standin:kimi-k2.5", tool_calls=True).with_profile("instant")
    with SimServerThread(config) as server:
        yield server


def each_run(tmp_path: Path, url: str, records: list[dict], run_id: str = "r"):
    src = write_jsonl(tmp_path / f"{run_id}.jsonl", records)
    options = dataclasses.replace(
        run_options(tmp_path, [url], run_id=run_id, prompts=1),
        prompts=TokenizeOptions(
            output=str(tmp_path / "out"), tokenizer="standin:kimi-k2.5", trust_remote_code=True, prompts=[str(src)]
        ),
        sampling=SamplingOverrides(max_new_tokens=1000, turns="each"),
    )
    return run_generation(options)


def stored_rows(root: Path, run_id: str) -> list[dict]:
    rows = []
    for kind in ("data", "quarantine"):
        for part in sorted(root.glob(f"{kind}/category=*/run={run_id}/part-*.parquet")):
            rows.extend(pq.read_table(part).to_pylist())
    return sorted(rows, key=lambda r: (r["conversation_id"], r["turn_index"]))


def own_answer(tokenizer, output_ids: list[int]) -> dict:
    """The model's answer as a message, split here by hand (not with the pipeline's parser)."""
    split = output_ids.index(THINK_END)
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    return {
        "role": "assistant",
        "reasoning_content": decode(output_ids[:split]),
        "content": decode(output_ids[split + 1 : -1]),
    }


def test_three_turns_give_three_samples_rendered_with_the_models_own_answers(tmp_path, sim, tokenizer):
    record = multi_turn_record(3)
    summary = each_run(tmp_path, sim.url, [record])
    assert summary.published and summary.pending == 0
    rows = stored_rows(tmp_path / "out", "r")
    assert [r["turn_index"] for r in rows] == [0, 1, 2]
    assert [r["trajectory_end"] for r in rows] == [None, None, "complete"]
    assert len({r["conversation_id"] for r in rows}) == 1 and rows[0]["parent_sample_id"] is None
    users = [m for m in record["messages"] if m["role"] == "user"]
    history = [record["messages"][0]]
    for k, row in enumerate(rows):
        history.append(users[k])
        expected = tokenizer.apply_chat_template(history, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert row["prompt_ids"] == list(expected), f"step {k}"
        history.append(own_answer(tokenizer, row["output_ids"]))
    assert "The source's answer" not in tokenizer.decode(rows[2]["prompt_ids"])


def test_tool_loop_of_three_recorded_calls_is_continued_three_times(tmp_path, sim):
    each_run(tmp_path, sim.url, [tool_loop_record(["search", "book", "pay"])])
    rows = stored_rows(tmp_path / "out", "r")
    assert [r["step_kind"] for r in rows] == ["user_turn", "tool_result", "tool_result", "tool_result"]
    assert [r["trajectory_end"] for r in rows] == [None, None, None, "complete"]
    assert [r["parent_sample_id"] for r in rows[1:]] == [r["sample_id"] for r in rows[:-1]]
    statistics = json.loads((tmp_path / "out" / "manifests" / "run=r.statistics.json").read_text())
    assert statistics["conversations"]["trajectory_end"] == {"complete": 1}
    assert sum(statistics["conversations"]["prompt_drift"]["tool_result"].values()) == 3
    assert "<h2>Conversations</h2>" in (tmp_path / "out" / "manifests" / "run=r.report.html").read_text()


def test_mismatching_call_ends_the_trajectory_with_its_reason(tmp_path, sim):
    # the stand-in calls the declared tools in order: "weather" first, which the source never recorded
    each_run(tmp_path, sim.url, [tool_loop_record(["hotels"], declared=["weather", "hotels"])])
    rows = stored_rows(tmp_path / "out", "r")
    assert [(r["turn_index"], r["trajectory_end"]) for r in rows] == [(0, "no_recorded_result")]


def test_sigkill_mid_conversation_then_rerun_generates_every_step_exactly_once(tmp_path, sim):
    records = [multi_turn_record(4, tag=f"c{i} ") for i in range(6)] + [tool_loop_record(["a", "b", "c"])]
    each_run(tmp_path / "reference", sim.url, records)
    reference = stored_rows(tmp_path / "reference" / "out", "r")
    assert len(reference) == 6 * 4 + 4
    src = write_jsonl(tmp_path / "c.jsonl", records)
    out = tmp_path / "out"
    args = ["--prompts", str(src), "--sglang-url", sim.url, "--output", str(out), "--run-id", "r", "--turns", "each"]
    args += ["--max-new-tokens", "1000", "--no-canary", "--checkpoint-every", "1", "--concurrency", "2"]
    args += ["--draft-vocab-size", "16"]
    first = run_cli(args, kill_when=lambda: checkpointed_samples(out, "r") >= 9)
    assert first.killed, first.stderr[-2000:]
    assert checkpointed_samples(out, "r") < len(reference)
    second = run_cli(args)
    assert second.returncode == 0, second.stderr[-2000:]
    rows = stored_rows(out, "r")
    assert len(rows) == len({r["sample_id"] for r in rows}) == len(reference)
    assert [(r["sample_id"], r["prompt_ids"], r["output_ids"]) for r in rows] == [
        (r["sample_id"], r["prompt_ids"], r["output_ids"]) for r in reference
    ]
    # the bounded publisher wrote main's bytes for these conversation shards (steps out of order after the kill)
    root = LocalOutputRoot(str(out))
    plan = load_plan(root, "r")
    for info in plan.shards:
        expected = old_shard_bytes(root, plan, info.index, load_profile("kimi-k2.5"), ValidationLimits())
        for key, want in zip((data_key, quarantine_key), expected, strict=True):
            path = out / key("r", info.category, info.index)
            assert (path.read_bytes() if path.exists() else None) == want


def test_demo_multiturn_recipe_through_the_orchestrator_steps(tmp_path, sim):
    """The Airflow path (generation/steps.py): each shard is one task that renders its own steps."""
    config = RunConfig(
        output=str(tmp_path / "out"),
        tokenizer="standin:kimi-k2.5",
        trust_remote_code=True,
        sglang_urls=[sim.url],
        run_id="demo",
        recipe=str(REPO / "include" / "recipes" / "demo_multiturn.yaml"),
        shard_size=3,
        canary=False,
        draft_vocab_size=16,
    ).to_dict()
    servers = preflight_step(config)
    plan = plan_step(config, servers)
    for shard in plan["shards"]:
        generate_shard_step(config, servers, shard)
    assert finalize_step(config)["published"]
    rows = stored_rows(tmp_path / "out", "demo")
    by_category: dict[str, list[dict]] = {}
    for row in rows:
        by_category.setdefault(row["category"], []).append(row)
    sources = [json.loads(line) for line in (REPO / "include" / "data" / "demo_prompts" / "multi_turn.jsonl").open()]
    user_turns = sum(1 for r in sources for m in r["messages"] if m["role"] == "user")
    assert len(by_category["multi_turn"]) == user_turns  # every user turn answered once
    ends = Counter(r["trajectory_end"] for r in by_category["agentic"] if r["trajectory_end"])
    assert ends == {"complete": 4, "no_recorded_result": 1}  # the currency call is never made first
    assert max(r["turn_index"] for r in by_category["agentic"]) == 3  # three recorded calls in a row
