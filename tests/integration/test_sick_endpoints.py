"""Answers are validated as they arrive: a sick replica is taken out early, a broken deployment stops the run.

Stand-in replicas with faults on real loopback sockets; each run is 30 prompts x 4 samples with 4 requests
in flight per replica, so the replicas answer in turns and an ejection lands mid-run.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_datagen.generation.screen import RunStopped
from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from generation_runs import run_options

pytestmark = pytest.mark.slow
PROMPTS, PER_PROMPT = 30, 4
SAMPLES = PROMPTS * PER_PROMPT


def replica(**faults: float) -> SimServerThread:
    """Outputs of 50-150 tokens at 1 ms a token: answers overlap, so the replicas share the work evenly."""
    config = SimConfig(faults=faults, fault_seed=7).with_profile("instant")
    return SimServerThread(dataclasses.replace(config, decode_s_per_token=0.001))


def options(tmp_path: Path, urls: list[str], **changes):
    sampling = SamplingOverrides(max_new_tokens=1000, samples_per_prompt=PER_PROMPT)
    return run_options(tmp_path, urls, prompts=PROMPTS, sampling=sampling, concurrency=4, **changes)


def stored_rows(tmp_path: Path) -> list[dict]:
    found = []
    for kind in ("data", "quarantine"):
        for part in sorted((tmp_path / "out").glob(f"{kind}/category=*/run=r/part-*.parquet")):
            found.extend(r | {"kind": kind} for r in pq.read_table(part).to_pylist())
    return found


def assert_each_sample_once(tmp_path: Path) -> list[dict]:
    found = stored_rows(tmp_path)
    assert len(found) == SAMPLES and len({r["sample_id"] for r in found}) == SAMPLES
    return found


def manifest(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "manifests" / "run=r.json").read_text())


def report(tmp_path: Path) -> str:
    return (tmp_path / "out" / "manifests" / "run=r.report.html").read_text()


def test_a_replica_with_the_echo_bug_is_ejected_and_the_run_publishes(tmp_path):
    with replica() as good, replica(echo=0.2) as sick:
        summary = run_generation(options(tmp_path, [good.url, sick.url]))
        echoes = sick.stats()["faults"].get("echo", 0)
    assert echoes >= 3 and summary.pending == 0 and summary.published is not None
    found = assert_each_sample_once(tmp_path)
    data = [r for r in found if r["kind"] == "data"]
    assert len(data) == SAMPLES  # the echo answers were sent again and answered well elsewhere
    for row in data:  # no echo answer in data
        assert row["completion_tokens"] == len(row["output_ids"])
        assert row["output_ids"][:2] != row["prompt_ids"][-2:] and row["output_ids"][0] != row["prompt_ids"][-1]
    counts = manifest(tmp_path)["counts"]["endpoints"]
    (ejection,) = counts[sick.url]["ejected"]
    assert ejection["kind"] == "server_fault" and ejection["answers"] <= 60
    assert ejection["reason"] in ("completion_tokens_mismatch", "prompt_echo")
    assert counts[good.url]["ejected"] == [] and sum(counts[sick.url]["server_faults_retried"].values()) >= 3
    assert summary.endpoints[sick.url]["ejected"] and not summary.endpoints[good.url]["ejected"]
    html = report(tmp_path)
    assert sick.url in html and "ejected" in html
    assert manifest(tmp_path)["validation"]["max_rates"]["prompt_echo"] == 0.01
    evidence = json.loads((tmp_path / "out" / "manifests" / "run=r.endpoints.json").read_text())["evidence"]
    assert evidence and all(e["endpoint"] == sick.url for e in evidence)


def test_a_replica_stripping_think_tokens_is_ejected_its_answers_quarantined_not_retried(tmp_path):
    with replica() as a, replica() as b, replica(strip_think=1.0) as stripping:
        summary = run_generation(options(tmp_path, [a.url, b.url, stripping.url]))
        stripped = stripping.stats()["generations"]
        served = a.stats()["generations"] + b.stats()["generations"] + stripped
    assert summary.pending == 0 and summary.published is not None and summary.retries == 0
    assert served == SAMPLES  # one answer per sample: nothing was sent again
    found = assert_each_sample_once(tmp_path)
    quarantined = [r for r in found if r["kind"] == "quarantine"]
    assert len(quarantined) == stripped and {r["reject_reason"] for r in quarantined} == {"missing_think_end"}
    (ejection,) = manifest(tmp_path)["counts"]["endpoints"][stripping.url]["ejected"]
    assert ejection["kind"] == "model_behaviour" and ejection["reason"] == "missing_think_end"
    assert stripped < SAMPLES / 3  # taken out before its share of the run


def test_every_replica_with_the_bug_stops_the_run_early_and_a_rerun_after_the_fix_completes(tmp_path):
    with replica(echo=0.2) as a, replica(echo=0.2) as b:
        with pytest.raises(RunStopped) as stopped:
            run_generation(options(tmp_path, [a.url, b.url]))
        answered = a.stats()["generations"] + b.stats()["generations"]
        message = str(stopped.value)
        assert answered <= 100
        assert "\n" not in message and a.url in message and b.url in message and "upgrade SGLang" in message
        assert not (tmp_path / "out" / "manifests").exists()
        a.set_faults({})
        b.set_faults({})
        rerun = run_generation(options(tmp_path, [a.url, b.url]))
    assert rerun.resumed > 0 and rerun.pending == 0 and rerun.published is not None
    assert not any(e["ejected"] for e in rerun.endpoints.values())
    found = assert_each_sample_once(tmp_path)
    assert all(r["kind"] == "data" for r in found)
    assert "Stopped early" in report(tmp_path)


def test_a_wrong_tokenizer_stops_the_run_within_the_first_50_samples(tmp_path):
    with replica(prompt_tokens=1.0) as a, replica(prompt_tokens=1.0) as b:
        with pytest.raises(RunStopped, match=re.escape("prompt_tokens_mismatch")) as stopped:
            run_generation(options(tmp_path, [a.url, b.url]))
        answered = a.stats()["generations"] + b.stats()["generations"]
    assert answered <= 50 and "\n" not in str(stopped.value)
    assert "did not process the input_ids as sent" in str(stopped.value)


def test_a_model_that_often_misses_think_end_publishes_with_those_quarantined_and_nothing_retried(tmp_path):
    with replica(no_think_end=0.2) as a, replica(no_think_end=0.2) as b:
        summary = run_generation(options(tmp_path, [a.url, b.url]))
        served = a.stats()["generations"] + b.stats()["generations"]
    assert summary.pending == 0 and summary.published is not None and summary.retries == 0 and served == SAMPLES
    found = assert_each_sample_once(tmp_path)
    quarantined = [r for r in found if r["kind"] == "quarantine"]
    assert quarantined and {r["reject_reason"] for r in quarantined} == {"missing_think_end"}
    assert not any(e["ejected"] for e in summary.endpoints.values())


def test_a_setup_signature_stops_the_run_once_min_samples_answers_are_in(tmp_path):
    with replica(strip_think=1.0) as a, replica(strip_think=1.0) as b:
        with pytest.raises(RunStopped, match=re.escape("not through a proxy that rewrites answers")) as stopped:
            run_generation(options(tmp_path, [a.url, b.url]))
        answered = a.stats()["generations"] + b.stats()["generations"]
    assert answered <= 20 + 8  # min_samples, plus what was in flight
    assert a.url in str(stopped.value) and b.url in str(stopped.value)


def test_user_thresholds_let_a_run_through(tmp_path):
    with replica(no_think_end=0.9) as a:
        summary = run_generation(options(tmp_path, [a.url], max_rates={"missing_think_end": 1.0}))
    assert summary.published is not None and manifest(tmp_path)["validation"]["max_rates"]["missing_think_end"] == 1.0


def test_a_later_shard_task_learns_of_an_ejection_and_the_report_lists_it(tmp_path):
    """What Airflow's mapped generate_shard tasks do: each applies the screen to its own requests; the
    ejection one of them records under the output root keeps the endpoint out of the next one."""
    from eagle_datagen.generation.steps import RunConfig, finalize_step, generate_shard_step, plan_step, preflight_step

    from conftest import user_record, write_jsonl

    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}: " + "word " * i) for i in range(60)])
    with replica() as good, replica(echo=0.2) as sick:
        config = RunConfig(
            output=str(tmp_path / "out"),
            tokenizer="standin:kimi-k2.5",
            trust_remote_code=True,
            sglang_urls=[good.url, sick.url],
            run_id="r",
            prompts=[str(src)],
            samples_per_prompt=PER_PROMPT,
            max_new_tokens=1000,
            shard_size=30,
            concurrency=4,
            draft_vocab_size=64,
            canary=False,
        ).to_dict()
        servers = preflight_step(config)
        shards = plan_step(config, servers)["shards"]
        first = generate_shard_step(config, servers, shards[0])
        assert first["endpoints"][sick.url]["ejected"]
        served = sick.stats()["requests"]["total"]
        second = generate_shard_step(config, servers, shards[1])
        assert sick.stats()["requests"]["total"] == served  # shard 1 never asked the ejected endpoint
        assert second["endpoints"][sick.url]["answers"] == 0 and second["endpoints"][sick.url]["ejected"]
        final = finalize_step(config)
    assert final["published"] and final["data"] == 2 * SAMPLES and final["ejected"]
    (ejection,) = manifest(tmp_path)["counts"]["endpoints"][sick.url]["ejected"]
    assert ejection["by"] == f"shard {shards[0]}"
    assert sick.url in report(tmp_path)
