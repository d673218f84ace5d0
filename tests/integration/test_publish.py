"""Publishing: the contract layout on a real S3 server, crash before the manifest, idempotent reruns."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.generation import publish
from eagle_datagen.generation.publish import PublishOptions
from eagle_datagen.generation.stage import RunOptions, SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.storage.manifest import read_manifest, verify_manifest
from eagle_datagen.storage.output_root import LocalOutputRoot, S3OutputRoot
from eagle_datagen.storage.parquet import QUARANTINE_SCHEMA, SAMPLE_SCHEMA
from eagle_datagen.tokenization.stage import TokenizeOptions

from conftest import REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow


def test_run_to_s3_produces_the_contract_layout(tmp_path, s3_env):
    records = [user_record(f"math question {i}", category="math", id=f"m{i}") for i in range(12)]
    records += [user_record(f"chat {i}", id=f"c{i}") for i in range(8)] + [b"{not json"]
    src = write_jsonl(tmp_path / "p.jsonl", records)
    config = SimConfig(faults={"no_think_end": 0.2}, fault_seed=5).with_profile("instant")
    with SimServerThread(config) as sim:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "eagle_datagen.cli",
                "run",
                "--prompts",
                str(src),
                "--tokenizer",
                "standin:kimi-k2.5",
                "--trust-remote-code",
                "--sglang-url",
                sim.url,
                "--output",
                "s3://eagle/runs",
                "--run-id",
                "s3run",
                "--samples-per-prompt",
                "2",
                "--shard-size",
                "5",
                "--draft-vocab-size",
                "64",
                "--no-canary",
                "--max-reject-rate",
                "0.1",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, **s3_env.env},
            timeout=300,
        )
    assert result.returncode == 0, result.stderr
    root = S3OutputRoot("s3://eagle/runs")
    keys = root.list()
    manifest = read_manifest(root, "s3run")
    assert manifest is not None and verify_manifest(root, manifest) == []
    assert manifest["contract"] == 1 and manifest["model"] == "moonshotai/Kimi-K2.5"
    assert manifest["provenance"]["servers"][0]["sglang_version"] == "0.5.9"
    assert manifest["provenance"]["servers"][0]["sampling_seed"].startswith("not reproducible")
    assert len(manifest["provenance"]["chat_template_sha256"]) == 64
    assert manifest["counts"]["samples"] == 40 == manifest["counts"]["data"] + manifest["counts"]["quarantine"]
    kinds = {f["kind"] for f in manifest["files"]}
    assert kinds == {"data", "quarantine", "rejects", "statistics", "draft_vocab", "report", "summary"}
    listed = {f["key"] for f in manifest["files"]}
    for key in listed:
        assert key in keys
    assert "manifests/run=s3run.json" in keys
    for entry in manifest["files"]:
        if entry["kind"] not in ("data", "quarantine"):
            continue
        kind, category, run, part = entry["key"].split("/")
        assert (category, run) == (f"category={entry['category']}", "run=s3run") and part.startswith("part-")
        table = pq.read_table(io.BytesIO(root.read_bytes(entry["key"])))
        expected = SAMPLE_SCHEMA if kind == "data" else QUARANTINE_SCHEMA
        assert table.schema.remove_metadata() == expected.remove_metadata()
        assert table.num_rows == entry["rows"]
        for row in table.to_pylist():
            assert row["category"] == entry["category"] and row["run_id"] == "s3run"
            assert row["record_id"].startswith(entry["category"][0])
            assert row["prompt_ids"][-1] == 163606 and row["prompt_tokens"] == len(row["prompt_ids"])
            assert row["completion_tokens"] == len(row["output_ids"]) and row["finish_reason"] == "stop"
            assert row["model"] == "moonshotai/Kimi-K2.5" and row["weight_version"] == "default"
            assert json.loads(row["sampling"])["sampling_seed"] >= 0 and row["sample_index"] in (0, 1)
            if kind == "data":
                assert row["output_ids"][-1] == 163586
                assert row["reasoning_tokens"] == row["output_ids"].index(163607)
            else:
                assert row["reject_reason"] == "missing_think_end" and row["reject_detail"]
    rejects = [json.loads(x) for x in root.read_bytes("rejects/run=s3run/rejects.jsonl").splitlines()]
    assert [r["reason"] for r in rejects] == ["invalid_json"]

    out = tmp_path / "export.jsonl"
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "eagle_datagen.cli",
            "export",
            "--output",
            "s3://eagle/runs",
            "--run-id",
            "s3run",
            "--to",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **s3_env.env},
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == manifest["counts"]["data"]
    for line in lines:
        mask = line["loss_mask"]
        assert len(mask) == len(line["input_ids"]) and mask[0] == 0 and mask[-1] == 1
        first_trained = mask.index(1)
        assert line["input_ids"][first_trained - 1] == 163606  # the prompt's <think> is not trained on
        assert line["input_ids"][-1] == 163586


def options(tmp_path, url: str) -> RunOptions:
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"q{i}") for i in range(25)])
    return RunOptions(
        prompts=TokenizeOptions(
            output=str(tmp_path / "out"), tokenizer="standin:kimi-k2.5", trust_remote_code=True, prompts=[str(src)]
        ),
        sglang_urls=[url],
        run_id="r",
        shard_size=10,
        canary=False,
        sampling=SamplingOverrides(max_new_tokens=500),
        publish=PublishOptions(draft_vocab_size=64),
    )


def snapshot(root: LocalOutputRoot) -> dict[str, bytes]:
    return {
        k: root.read_bytes(k) for k in root.list() if k.startswith(("data/", "quarantine/", "manifests/run=r.json"))
    }


def test_crash_before_the_manifest_then_a_rerun_completes_it(tmp_path, monkeypatch):
    calls = []
    real = publish.write_manifest

    def crash_once(root, manifest):
        calls.append(1)
        if len(calls) == 1:
            raise DataGenError("simulated crash between the shards and the manifest")
        return real(root, manifest)

    monkeypatch.setattr(publish, "write_manifest", crash_once)
    root = LocalOutputRoot(str(tmp_path / "out"))
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        with pytest.raises(DataGenError, match="simulated crash"):
            run_generation(options(tmp_path, sim.url))
        assert read_manifest(root, "r") is None and root.list("data/")  # shards stored, no manifest
        before = snapshot(root)
        served = sim.stats()["generations"]
        summary = run_generation(options(tmp_path, sim.url))
        assert sim.stats()["generations"] == served  # nothing generated again
    assert summary.published["already_published"] is False and summary.resumed == 25
    manifest = read_manifest(root, "r")
    assert manifest is not None and verify_manifest(root, manifest) == []
    after = snapshot(root)
    assert {k: v for k, v in after.items() if not k.startswith("manifests")} == before  # shards untouched


def test_rerunning_a_published_run_is_a_no_op(tmp_path):
    root = LocalOutputRoot(str(tmp_path / "out"))
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        first = run_generation(options(tmp_path, sim.url))
        before = snapshot(root)
        second = run_generation(options(tmp_path, sim.url))
    assert not first.published["already_published"] and second.published["already_published"]
    assert second.generated == 0 and snapshot(root) == before
    # known from the manifest at once: no checkpoint is read (they may be gone: eagle-datagen gc)
    for key in root.list("checkpoints/"):
        root.write_bytes(key, b"unreadable")
    third = run_generation(options(tmp_path, sim.url))
    assert third.published["already_published"] and third.resumed == first.samples and third.generated == 0


def test_incremental_run_generates_only_new_prompts(tmp_path):
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        run_generation(options(tmp_path, sim.url))
        grown = write_jsonl(tmp_path / "grown.jsonl", [user_record(f"q{i}") for i in range(30)])
        nightly = RunOptions(**{**options(tmp_path, sim.url).__dict__, "run_id": "nightly", "incremental": True})
        nightly = RunOptions(
            **{
                **nightly.__dict__,
                "prompts": TokenizeOptions(
                    output=str(tmp_path / "out"),
                    tokenizer="standin:kimi-k2.5",
                    trust_remote_code=True,
                    prompts=[str(grown)],
                ),
            }
        )
        summary = run_generation(nightly)
        nothing = run_generation(RunOptions(**{**nightly.__dict__, "run_id": "nightly2"}))
    assert summary.samples == 5 and summary.published["data"] == 5
    assert nothing.samples == 0 and nothing.published is None


def test_draft_vocabulary_larger_than_the_run_is_skipped_by_default_and_an_error_when_asked(tmp_path):
    root = LocalOutputRoot(str(tmp_path / "out"))
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        base = options(tmp_path, sim.url)
        asked = RunOptions(
            **{**base.__dict__, "publish": PublishOptions(draft_vocab_size=50_000, draft_vocab_required=True)}
        )
        with pytest.raises(ConfigError, match="draft vocabulary of 50000 asked, but only"):
            run_generation(asked)
        assert read_manifest(root, "r") is None
        default = run_generation(RunOptions(**{**base.__dict__, "publish": PublishOptions()}))
    assert default.published["draft_vocab_size"] is None
    kinds = {f["kind"] for f in read_manifest(root, "r")["files"]}
    assert "draft_vocab" not in kinds and "report" in kinds


def test_prompt_rejects_per_source_reach_the_statistics_and_the_report(tmp_path):
    """ShareGPT records (the format detected), one of them a near-duplicate and one a benchmark item."""
    text = "Describe the water cycle for a ten year old, with evaporation, clouds, rain and rivers in order, "
    rows = [
        {"category": "chat", "conversations": [{"from": "human", "value": f"{text} question {i}."}]} for i in range(3)
    ]
    rows.append({"category": "chat", "conversations": [{"from": "human", "value": "What is 6 times 7?"}]})
    src = write_jsonl(tmp_path / "sharegpt.jsonl", rows)
    bench = write_jsonl(tmp_path / "bench.jsonl", [{"question": "what is 6 times 7"}])
    root = LocalOutputRoot(str(tmp_path / "out"))
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        run = options(tmp_path, sim.url)
        prompts = TokenizeOptions(
            output=str(tmp_path / "out"),
            tokenizer="standin:kimi-k2.5",
            trust_remote_code=True,
            prompts=[str(src)],
            benchmarks=[f"arith={bench}"],
            near_duplicate_threshold=0.7,
        )
        summary = run_generation(RunOptions(**{**run.__dict__, "prompts": prompts}))
    assert summary.samples == 1  # question 0; 1 and 2 are its near-duplicates, the last one a benchmark item
    stats = json.loads(root.read_bytes("manifests/run=r.statistics.json"))
    assert stats["prompt_rejects"]["by_source"] == {
        str(src): {"reasons": {"near_duplicate": 2, "benchmark_overlap": 1}, "benchmark_overlaps": {"arith": 1}}
    }
    assert "Prompt rejects by source" in root.read_bytes("manifests/run=r.report.html").decode()
