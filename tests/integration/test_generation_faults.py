"""How the client reacts to each fault of the stand-in: retried, recorded or stored for validation.

Nothing is lost and nothing is stored twice: every planned sample appears exactly once in the output.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_datagen.generation.publish import PublishOptions
from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.inference.endpoints import BreakerPolicy
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.validation.diagnosis import DiagnosisThresholds, ValidationFailed
from generation_runs import after_generations
from generation_runs import run_options as options

pytestmark = pytest.mark.slow
PROMPTS = 30


def rows(tmp_path: Path, run_id: str = "r") -> list[dict]:
    """Every stored sample, data and quarantine, each with the kind of file it is in."""
    found = []
    for kind in ("data", "quarantine"):
        for part in sorted((tmp_path / "out").glob(f"{kind}/category=*/run={run_id}/part-*.parquet")):
            found.extend(r | {"kind": kind} for r in pq.read_table(part).to_pylist())
    return found


def assert_each_sample_once(tmp_path: Path, expected: int = PROMPTS) -> list[dict]:
    found = rows(tmp_path)
    assert len(found) == expected and len({r["sample_id"] for r in found}) == expected
    return found


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ("error_503", "http_503"),
        ("error_429", "http_429"),
        ("error_408", "http_408"),
        ("abort", "abort"),
        ("drop", "disconnect"),
    ],
)
def test_transient_faults_are_retried_until_every_sample_is_done(tmp_path, fault, kind):
    with SimServerThread(SimConfig(faults={fault: 0.4}, fault_seed=3).with_profile("instant")) as sim:
        summary = run_generation(options(tmp_path, [sim.url]))
        assert sim.stats()["faults"].get(fault, 0) > 0
    assert summary.pending == 0 and summary.finish == {"stop": PROMPTS}
    assert summary.failures.get(kind, 0) > 0 and summary.retries >= summary.failures[kind]
    found = assert_each_sample_once(tmp_path)
    assert all(r["output_ids"][-1] == 163586 and r["kind"] == "data" for r in found)


def test_slow_answers_are_waited_for(tmp_path):
    config = SimConfig(faults={"slow": 0.3}, slow_seconds=0.3).with_profile("instant")
    with SimServerThread(config) as sim:
        summary = run_generation(options(tmp_path, [sim.url]))
        assert sim.stats()["faults"]["slow"] > 0
    assert summary.pending == 0 and summary.retries == 0
    assert_each_sample_once(tmp_path)


def test_requests_that_time_out_are_retried(tmp_path):
    config = SimConfig(faults={"slow": 0.3}, slow_seconds=2.0, fault_seed=2).with_profile("instant")
    with SimServerThread(config) as sim:
        retry = RetryPolicy(max_attempts=10, base_delay_s=0.01, max_delay_s=0.05, request_timeout_s=0.5)
        summary = run_generation(options(tmp_path, [sim.url], retry=retry))
    assert summary.pending == 0 and summary.failures.get("timeout", 0) > 0
    assert_each_sample_once(tmp_path)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("no_think_end", "missing_think_end"), ("strip_think", "missing_think_end")],
)
def test_wrong_outputs_are_quarantined_with_their_reason(tmp_path, fault, reason):
    with SimServerThread(SimConfig(faults={fault: 0.3}, fault_seed=1).with_profile("instant")) as sim:
        summary = run_generation(options(tmp_path, [sim.url]))
    assert summary.pending == 0 and summary.retries == 0
    found = assert_each_sample_once(tmp_path)
    quarantined = [r for r in found if r["kind"] == "quarantine"]
    assert 0 < len(quarantined) < PROMPTS
    assert {r["reject_reason"] for r in quarantined} == {reason}
    assert all(163607 not in r["output_ids"] for r in quarantined)  # stored exactly as the server sent them
    assert all(163607 in r["output_ids"] for r in found if r["kind"] == "data")
    assert summary.published["quarantine"] == len(quarantined)


@pytest.mark.parametrize(
    ("fault", "rate", "diagnosis"),
    [
        ("strip_think", 0.9, "not through a proxy that rewrites answers"),
        ("echo", 0.3, "upgrade SGLang"),
    ],
)
def test_a_broken_server_fails_the_run_with_a_diagnosis_and_no_manifest(tmp_path, fault, rate, diagnosis):
    with SimServerThread(SimConfig(faults={fault: rate}, fault_seed=1).with_profile("instant")) as sim:
        with pytest.raises(ValidationFailed, match=re.escape(diagnosis)) as info:
            run_generation(options(tmp_path, [sim.url]))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out" / "manifests").exists()  # no manifest: readers see no dataset


def test_permanent_400s_are_recorded_once_and_not_retried(tmp_path):
    # prompt + max_new_tokens (1000) must fit: the longer prompts are refused with a 400
    config = SimConfig(context_length=1030).with_profile("instant")
    tolerant = PublishOptions(thresholds=DiagnosisThresholds(request_error=1.0), draft_vocab_size=10)
    with SimServerThread(config) as sim:
        summary = run_generation(options(tmp_path, [sim.url], publish=tolerant))
        served = sim.stats()["requests"]["total"]
        again = run_generation(options(tmp_path, [sim.url], publish=tolerant))
        assert sim.stats()["requests"]["total"] == served  # recorded failures are not resent
    found = assert_each_sample_once(tmp_path)
    failed = [r for r in found if r["kind"] == "quarantine"]
    assert served == PROMPTS  # one request per sample: the 400s were not retried
    assert failed and all(r["finish_reason"] == "error" and r["reject_reason"] == "request_error" for r in failed)
    assert all("http_400" in r["error"] and "context length" in r["error"] for r in failed)
    assert summary.finish["error"] == len(failed) and summary.pending == 0
    assert again.generated == 0 and again.resumed == PROMPTS and again.published["already_published"]


def test_samples_out_of_retries_are_left_for_a_rerun(tmp_path):
    with SimServerThread(SimConfig(faults={"error_503": 1.0}).with_profile("instant")) as sim:
        retry = RetryPolicy(max_attempts=3, base_delay_s=0.01)
        summary = run_generation(options(tmp_path, [sim.url], retry=retry, breaker=BreakerPolicy(give_up_after_s=0.5)))
        assert summary.pending == PROMPTS and summary.published is None
        sim.set_faults({})
        rerun = run_generation(options(tmp_path, [sim.url]))
    assert rerun.pending == 0 and rerun.generated == PROMPTS and rerun.resumed == 0
    assert_each_sample_once(tmp_path)


def test_two_replicas_share_the_work_and_survive_a_restart(tmp_path):
    slow = SimConfig(decode_s_per_token=0.001, output_tokens_min=20, output_tokens_max=40, max_running_requests=4)
    with SimServerThread(slow) as a, SimServerThread(slow) as b:
        restart = after_generations([b], 10, lambda: b.restart(0.5))  # once b has served some requests
        summary = run_generation(
            options(tmp_path, [a.url, b.url], sampling=SamplingOverrides(max_new_tokens=1000, samples_per_prompt=4))
        )
        restart.join()
        served = (a.stats()["generations"], b.stats()["generations"])
        assert b.stats()["restarts"] == 1
    assert summary.pending == 0
    assert min(served) >= 10  # both replicas served requests
    assert_each_sample_once(tmp_path, PROMPTS * 4)
    assert len({s["url"] for s in summary.servers}) == 2
