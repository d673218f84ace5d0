"""`eagle-datagen run` end to end against the stand-in SGLang server on real loopback sockets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_datagen.inference.preflight import CANARY_TRIES
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread

from conftest import DEMO_RECIPE, REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "eagle_datagen.cli",
            "run",
            "--tokenizer",
            "standin:kimi-k2.5",
            "--trust-remote-code",
            "--draft-vocab-size",
            "16",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
        timeout=timeout,
    )


def generated_rows(root: Path, run_id: str) -> list[dict]:
    """Data and quarantine rows of a run (the demo's stand-in injects no faults: all are data)."""
    rows = []
    for kind in ("data", "quarantine"):
        for part in sorted(root.glob(f"{kind}/category=*/run={run_id}/part-*.parquet")):
            rows.extend(pq.read_table(part).to_pylist())
    return rows


def test_demo_recipe_end_to_end(tmp_path):
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        result = run_cli(
            "--recipe",
            str(DEMO_RECIPE),
            "--sglang-url",
            sim.url,
            "--output",
            str(tmp_path),
            "--run-id",
            "demo1",
            "--shard-size",
            "8",
            "--samples-per-prompt",
            "2",
        )
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "plans" / "run=demo1" / "plan.json").read_text())
    rows = generated_rows(tmp_path, "demo1")
    assert len(rows) == sum(s["samples"] for s in plan["shards"]) == 2 * 119
    assert len({r["sample_id"] for r in rows}) == len(rows)
    assert {r["category"] for r in rows} == set(plan["categories"])
    for row in rows:
        assert row["prompt_ids"][-1] == 163606
        assert row["output_ids"][-1] == 163586 and 163607 in row["output_ids"]
        assert row["finish_reason"] == "stop" and row["completion_tokens"] == len(row["output_ids"])
        assert row["run_id"] == "demo1" and row["model"] == "moonshotai/Kimi-K2.5"
        assert json.loads(row["sampling"])["temperature"] == 1.0
    seeds = {json.loads(r["sampling"])["sampling_seed"] for r in rows}
    assert len(seeds) == len(rows)  # two samples of a prompt differ by seed
    math_rows = [r for r in rows if r["category"] == "math"]
    assert json.loads(math_rows[0]["sampling"])["max_new_tokens"] == 4096  # the recipe's override
    assert "resumed" in result.stdout and "238 generated now" in result.stdout
    # the server's meta_info.cached_tokens per sample (serve-sim's prefix cache: at most all but the last
    # prompt id, and a prompt's second sample finds its prefix cached), and the run's share of them
    assert all(0 <= r["cached_tokens"] < len(r["prompt_ids"]) for r in rows)
    assert sum(r["cached_tokens"] for r in rows) > 0
    statistics = json.loads((tmp_path / "manifests" / "run=demo1.statistics.json").read_text())
    share = sum(r["cached_tokens"] for r in rows) / sum(r["prompt_tokens"] for r in rows)
    assert statistics["all"]["prompt_cache"]["cached_share"] == round(share, 6)
    assert statistics["all"]["prompt_cache"]["samples_reporting"] == len(rows)
    # serve-sim reports enable_deterministic_inference false, as SGLang's default: said once, and in the manifest
    assert result.stderr.count("sampling_seed does not make samples reproducible on this deployment") == 1
    manifest = json.loads((tmp_path / "manifests" / "run=demo1.json").read_text())
    [server] = manifest["provenance"]["servers"]
    assert server["enable_deterministic_inference"] is False and server["sampling_seed"].startswith("not reproducible")


def settled_generations(sim) -> int:
    """The server's generation count once its handlers are done (it counts after answering)."""
    deadline = time.monotonic() + 10
    while (stats := sim.stats())["running"] or stats["queued"]:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    time.sleep(0.05)
    return sim.stats()["generations"]


def test_rerun_of_a_finished_run_generates_nothing(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"q{i}") for i in range(12)])
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        first = run_cli(
            "--prompts", str(src), "--sglang-url", sim.url, "--output", str(tmp_path / "o"), "--run-id", "r"
        )
        served = settled_generations(sim)
        second = run_cli(
            "--prompts", str(src), "--sglang-url", sim.url, "--output", str(tmp_path / "o"), "--run-id", "r"
        )
        assert settled_generations(sim) - served == 0  # not even the canary: the manifest says the run is done
    assert first.returncode == second.returncode == 0, second.stderr
    assert "12 resumed from checkpoints, 0 generated now" in second.stdout
    assert len(generated_rows(tmp_path / "o", "r")) == 12


def test_rerun_with_other_sampling_is_refused(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record("q")])
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        assert (
            run_cli(
                "--prompts", str(src), "--sglang-url", sim.url, "--output", str(tmp_path), "--run-id", "r"
            ).returncode
            == 0
        )
        result = run_cli(
            "--prompts",
            str(src),
            "--sglang-url",
            sim.url,
            "--output",
            str(tmp_path),
            "--run-id",
            "r",
            "--temperature",
            "0.3",
        )
    assert result.returncode == 1
    assert "already exists at this output with other settings" in result.stderr


@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        (
            SimConfig(model_path="Qwen/Qwen3-8B"),
            [],
            "serves 'Qwen/Qwen3-8B', but this run is for 'moonshotai/Kimi-K2.5'",
        ),
        (SimConfig(faults={"strip_think": 1.0}), [], "strips think tokens (a proxy or gateway"),
        (SimConfig(faults={"echo": 1.0}), [], "prompt-echo bug"),
        (SimConfig(faults={"no_think_end": 1.0}), [], "canary without </think> (163607)"),
        # A 400 the client cannot foresee (the canary's 4096 new tokens overflow this server's context); bad
        # sampling values such as --top-k 0 are usage errors before any server is asked.
        (SimConfig(context_length=2048), [], "answered 400 to the canary"),
    ],
)
def test_preflight_stops_a_misconfigured_server_before_any_prompt(tmp_path, config, args, message):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record("q")])
    with SimServerThread(config.with_profile("instant")) as sim:
        result = run_cli("--prompts", str(src), "--sglang-url", sim.url, "--output", str(tmp_path), *args)
        generations = sim.stats()["generations"]
    assert result.returncode == 1, result.stderr
    [line] = [x for x in result.stderr.splitlines() if "error:" in x]
    assert message in line and "Traceback" not in result.stderr
    assert generations <= CANARY_TRIES  # the canary (tried with other seeds when its content is wrong), nothing else
    assert not (tmp_path / "plans").exists()


def test_unreachable_server_is_one_line(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record("q")])
    result = run_cli(
        "--prompts",
        str(src),
        "--sglang-url",
        "http://127.0.0.1:9",
        "--output",
        str(tmp_path),
        "--wait-ready",
        "1",
        timeout=120,
    )
    assert result.returncode == 1
    assert "SGLang at http://127.0.0.1:9 is not ready: cannot connect" in result.stderr
