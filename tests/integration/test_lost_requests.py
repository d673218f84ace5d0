"""Requests a server accepts and never answers (serve-sim's lose fault: the connection stays open, /health
stays 200, /v1/loads does not count them) are found by the liveness monitor within its bound (lost_after)
and sent again elsewhere; the first answer is stored, once."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_datagen.generation.screen import LOST_TO_EJECT, RunStopped
from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.inference.liveness import LivenessPolicy
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from generation_runs import run_options

pytestmark = pytest.mark.slow
PROMPTS, PER_PROMPT = 30, 4
SAMPLES = PROMPTS * PER_PROMPT
# the bound under test: a lost request is sent again within LOST_AFTER + a poll or two of its loss
WATCH = LivenessPolicy(lost_after_s=2.0, poll_s=0.5, grace_s=1.0)


def replica(**changes) -> SimServerThread:
    config = SimConfig(fault_seed=3).with_profile("instant")  # seed 3: 2% loses 2-3 of the ~60 requests it gets
    return SimServerThread(dataclasses.replace(config, **({"decode_s_per_token": 0.001} | changes)))


def options(tmp_path: Path, urls: list[str], **changes):
    sampling = SamplingOverrides(max_new_tokens=1000, samples_per_prompt=PER_PROMPT)
    changes = {"liveness": WATCH} | changes
    return run_options(tmp_path, urls, prompts=PROMPTS, sampling=sampling, concurrency=4, **changes)


def stored_ids(tmp_path: Path) -> list[str]:
    ids = []
    for kind in ("data", "quarantine"):
        for part in sorted((tmp_path / "out").glob(f"{kind}/category=*/run=r/part-*.parquet")):
            ids += pq.read_table(part, columns=["sample_id"]).column(0).to_pylist()
    return ids


def manifest(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "manifests" / "run=r.json").read_text())


def test_two_percent_lost_on_one_replica_every_sample_published_once_within_the_bound(tmp_path):
    with replica() as good, replica(faults={"lose": 0.02}) as losing:
        started = time.monotonic()
        summary = run_generation(options(tmp_path, [good.url, losing.url]))
        elapsed = time.monotonic() - started
        lost = losing.stats()["faults"].get("lose", 0)
        aborts = losing.stats()["polls"].get("POST /abort_request", 0)
    assert lost >= 1 and summary.pending == 0 and summary.published is not None
    ids = stored_ids(tmp_path)
    assert len(ids) == SAMPLES == len(set(ids))  # every sample once: the lost copy never answered, no double
    counts = manifest(tmp_path)["counts"]["endpoints"]
    assert counts[losing.url]["lost_requests"] == lost
    assert counts[good.url]["hedges"]["hedges_won"] + counts[losing.url]["hedges"]["hedges_won"] >= lost
    assert aborts >= lost  # each lost copy was aborted by rid once its hedge answered
    # without the monitor the run would wait for the request timeout (an hour); with it, the bound per loss
    assert elapsed < 60 + lost * (WATCH.lost_after_s + 3 * WATCH.poll_s)


def test_a_replica_losing_every_request_after_its_50th_is_taken_out_and_the_run_completes(tmp_path):
    """With 120 samples over two replicas of 4 slots, a replica that kept receiving work after its 50th
    request would lose about 10; it is ejected after LOST_TO_EJECT lost in a row, like any sick replica."""
    with replica() as good, replica(lose_after=50) as losing:
        summary = run_generation(options(tmp_path, [good.url, losing.url]))
        lost = losing.stats()["faults"].get("lose", 0)
    assert summary.pending == 0 and summary.published is not None
    ids = stored_ids(tmp_path)
    assert len(ids) == SAMPLES == len(set(ids))
    # each lost request answered by the other replica; none sent there after its ejection (the 4 in flight
    # when it started losing may all be lost)
    assert LOST_TO_EJECT <= lost <= 4 and summary.failures["lost"] == lost
    assert "lost_requests" in summary.endpoints[losing.url]["ejected"]
    assert manifest(tmp_path)["counts"]["endpoints"][losing.url]["ejected"][0]["reason"] == "lost_requests"
    assert manifest(tmp_path)["counts"]["endpoints"][losing.url]["lost_requests"] == lost


def test_every_replica_losing_everything_stops_the_run_naming_them(tmp_path):
    with replica(faults={"lose": 1.0}) as one, replica(faults={"lose": 1.0}) as two:
        with pytest.raises(RunStopped) as info:
            run_generation(options(tmp_path, [one.url, two.url]))
    [message] = info.value.diagnoses
    assert "every endpoint was taken out" in message and one.url in message and two.url in message
    assert "lost_requests" in message and "\n" not in message


# /v1/loads polls and probes time out fast here, so that a hanging /v1/loads is found within seconds; requests
# take about a second (SLOW), so that some are past their grace at every poll
PROBED = dataclasses.replace(WATCH, request_timeout_s=1.0, poll_s=0.3, grace_s=0.3)
SLOW = {"decode_s_per_token": 0.01}


def endpoint_report_of(tmp_path: Path) -> dict:
    from eagle_datagen.generation.endpoint_journal import endpoint_report
    from eagle_datagen.storage.output_root import LocalOutputRoot

    return endpoint_report(LocalOutputRoot(str(tmp_path / "out")), "r")["endpoints"]


def test_a_replica_whose_v1_loads_errors_is_watched_by_probes_with_a_warning_and_the_report_says_so(tmp_path, caplog):
    with replica(**SLOW) as good, replica(loads_fault="error", **SLOW) as erring, caplog.at_level("WARNING"):
        summary = run_generation(options(tmp_path, [good.url, erring.url], liveness=PROBED))
    assert summary.pending == 0 and summary.published is not None
    assert len(stored_ids(tmp_path)) == SAMPLES
    [warning] = [r.getMessage() for r in caplog.records if "failed /v1/loads" in r.getMessage()]
    assert erring.url in warning and "HTTP 500" in warning and "watched by /health_generate probes" in warning
    report = endpoint_report_of(tmp_path)
    assert report[erring.url]["watched_by"] == ["health_generate"]
    assert report[erring.url]["liveness"]["loads_failed"] >= PROBED.failures_to_probe
    assert report[good.url]["watched_by"] == ["v1/loads"] and report[good.url]["liveness"]["loads_failed"] == 0
    counts = manifest(tmp_path)["counts"]["endpoints"]
    assert counts[erring.url]["watched_by"] == ["health_generate"] and counts[good.url]["watched_by"] == ["v1/loads"]


def test_a_stuck_scheduler_whose_v1_loads_hangs_is_found_by_probes_and_its_requests_hedged(tmp_path, caplog):
    """After its 20th request the scheduler stops: requests are held unanswered, /v1/loads hangs, /health_generate
    gets no scheduler output (503 after 20 s) while /health stays 200. Without the probes the run would wait
    for the request timeout (an hour); with them it finishes, each sample stored once."""
    with replica() as good, replica(stuck_after=20) as stuck, caplog.at_level("WARNING"):
        started = time.monotonic()
        summary = run_generation(options(tmp_path, [good.url, stuck.url], liveness=PROBED))
        elapsed = time.monotonic() - started
        held = stuck.stats()["faults"].get("lose", 0)
    assert held >= 1 and summary.pending == 0 and summary.published is not None
    ids = stored_ids(tmp_path)
    assert len(ids) == SAMPLES == len(set(ids))
    messages = [r.getMessage() for r in caplog.records]
    assert any("failed /v1/loads 3 times in a row" in m and stuck.url in m for m in messages)
    assert any("scheduler seems stuck" in m and stuck.url in m for m in messages)
    report = endpoint_report_of(tmp_path)[stuck.url]
    assert "health_generate" in report["watched_by"] and report["liveness"]["probes_failed"] >= PROBED.probe_failures
    assert report["liveness"]["lost_detected"] == held  # every held request found, and hedged
    assert elapsed < 60, elapsed


def test_the_last_requests_on_a_slow_replica_are_drain_hedged_on_the_idle_one_and_stored_once(tmp_path):
    """A replica much slower than the other (answers of 20 s) still works: nothing is lost, so only the
    drain hedge helps. When the run hands out its last request, the slow replica's requests in flight get a copy
    on the fast one, which answers first; each sample is stored once, the slow copies are aborted, the slow
    replica is neither blamed nor ejected, and the manifest counts the drain hedges."""
    slow_s = 20.0
    fixed = {"output_tokens_min": 100, "output_tokens_max": 100}
    watch = dataclasses.replace(WATCH, lost_after_s=60.0, drain_hedge_min_s=1.0)
    with replica(**fixed) as fast, replica(decode_s_per_token=slow_s / 100, **fixed) as slow:
        started = time.monotonic()
        summary = run_generation(options(tmp_path, [fast.url, slow.url], liveness=watch))
        elapsed = time.monotonic() - started
        aborts = slow.stats()["polls"].get("POST /abort_request", 0)
    assert summary.pending == 0 and summary.published is not None
    ids = stored_ids(tmp_path)
    assert len(ids) == SAMPLES == len(set(ids))
    counts = manifest(tmp_path)["counts"]["endpoints"]
    won = counts[fast.url]["hedges"]["drain_hedges_won"]
    assert won >= 1 and counts[fast.url]["hedges"]["drain_hedges_sent"] >= won
    assert aborts >= won  # each slow copy that lost the race was aborted by rid
    assert counts[slow.url]["lost_requests"] == 0
    assert not endpoint_report_of(tmp_path)[slow.url]["ejections"]
    # the run's end waits for a poll or two past drain_hedge_min_s, not for the slow answers' 20 s (without the
    # drain hedge this run takes 20-21 s; with it 5-7 s, measured on 2 cores)
    assert elapsed < slow_s * 0.75
