"""Incremental runs that plan at the same time under one output root split the new samples between them:
the plan lock serializes planning, and the claims of runs in flight count as existing until their activity
is older than the TTL. Locally and on a real S3 server; planning only (no SGLang needed) except where a run
is published first."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from eagle_datagen.generation.claims import (
    HolderVerdict,
    claim_key,
    claimed_sample_ids,
    heartbeat_interval_s,
    heartbeat_key,
    read_claim,
    withdraw_claim,
)
from eagle_datagen.generation.heartbeat import write_heartbeat
from eagle_datagen.generation.incremental import NothingToDo
from eagle_datagen.generation.plan import RunPlan, shard_requests
from eagle_datagen.generation.stage import RunOptions, SamplingOverrides, prepare_plan
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.generation.takeover import ClaimWithdrawn, check_claim_stands, takeover_key
from eagle_datagen.storage.output_root import LocalOutputRoot, OutputRoot, open_output_root
from eagle_datagen.tokenization.stage import setup_tokenize
from generation_runs import run_options

HOUR = 3600.0


@pytest.fixture
def output(output_uri) -> str:
    return output_uri


def options(tmp_path: Path, output: str, run_id: str, prompts: int = 12, **changes) -> RunOptions:
    changes = {"incremental": True, "shard_size": 4, **changes}
    return run_options(tmp_path, ["http://127.0.0.1:9"], run_id=run_id, prompts=prompts, output=output, **changes)


def plan_run(
    opts: RunOptions, weight_version: str = "w1", start: threading.Barrier | None = None, holders=None
) -> set[str]:
    """Plan as a run's plan step does; the sample ids it planned (none when nothing was new). `holders`: an
    orchestrator's word on whether the runs holding claims still run (takeover.HolderCheck)."""
    setup = setup_tokenize(opts.prompts)  # tokenizer and sources: before the barrier, so planners meet at the lock
    root = open_output_root(opts.prompts.output)
    if start is not None:
        start.wait(timeout=60)
    provenance = {"servers": [{"weight_version": weight_version}]}
    try:
        plan = prepare_plan(setup, root, opts.run_id, opts, provenance, weight_version, holders=holders)
    except NothingToDo:
        return set()
    return plan_sample_ids(root, plan)


def plan_sample_ids(root: OutputRoot, plan: RunPlan) -> set[str]:
    ids = [r.sample_id for info in plan.shards for r in shard_requests(root, plan, info.index)]
    assert len(ids) == len(set(ids))
    return set(ids)


def every_sample(tmp_path: Path, prompts: int = 12) -> set[str]:
    """What a run planned alone, on a root of its own, would generate."""
    return plan_run(options(tmp_path, str(tmp_path / "alone"), "alone", prompts, incremental=False))


def plan_concurrently(tmp_path: Path, output: str, runs: int = 3) -> dict[str, set[str]]:
    start = threading.Barrier(runs)
    planned: dict[str, set[str]] = {}
    errors: list[BaseException] = []

    def planner(opts: RunOptions) -> None:
        try:
            planned[opts.run_id] = plan_run(opts, start=start)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    # the options (and the prompt file they write) first, one after the other
    runs_options = [options(tmp_path, output, f"run{i}") for i in range(runs)]
    threads = [threading.Thread(target=planner, args=(opts,)) for opts in runs_options]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    return planned


def assert_split(planned: dict[str, set[str]], expected: set[str]) -> None:
    """Each expected sample in exactly one plan, and nothing else."""
    assert sum(len(ids) for ids in planned.values()) == len(expected), {r: len(i) for r, i in planned.items()}
    assert set().union(*planned.values()) == expected


def test_runs_planning_at_once_plan_each_new_sample_exactly_once(tmp_path, output):
    expected = every_sample(tmp_path)
    assert len(expected) == 12
    planned = plan_concurrently(tmp_path, output)
    assert_split(planned, expected)
    root = open_output_root(output)
    assert root.list("locks/") == []  # every planner released the lock
    for run_id, ids in planned.items():  # each claim is what its plan holds; a run with nothing new claims nothing
        if ids:
            assert set(read_claim(root, run_id).sample_ids) == ids
        else:
            assert claim_key(run_id) not in root.list("claims/")


def test_prompts_added_later_are_all_a_later_runs_own(tmp_path, output):
    first = plan_run(options(tmp_path, output, "first", prompts=8))
    grown = plan_run(options(tmp_path, output, "grown", prompts=12))
    assert len(first) == 8 and len(grown) == 4 and not first & grown
    assert first | grown == every_sample(tmp_path)


def age(root: LocalOutputRoot, run_id: str, seconds: float) -> None:
    """Make every object of a run look `seconds` old: a run whose tasks died that long ago."""
    stamp = time.time() - seconds
    for key in root.list():
        if f"run={run_id}" in key:
            os.utime(root.location(key), (stamp, stamp))


def test_a_run_silent_for_longer_than_the_ttl_no_longer_holds_its_samples(tmp_path):
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    dead = plan_run(options(tmp_path, output, "dead"))
    age(root, "dead", 2 * HOUR)
    assert plan_run(options(tmp_path, output, "later", claim_ttl_s=HOUR)) == dead  # generated again
    # taken over: noted and withdrawn, so that "dead", resumed, generates none of them
    assert not root.list(claim_key("dead"))
    note = json.loads(root.read_bytes(takeover_key("dead")))
    assert note["by"] == "later" and note["why"] == "no sign of life for more than 3600 s, the claim TTL"
    with pytest.raises(ClaimWithdrawn, match="run dead generates nothing: run later took its samples over"):
        check_claim_stands(root, "dead")


def verdicts(**by_run: HolderVerdict):
    """A HolderCheck with fixed answers (None for runs it does not know), and the runs it was asked about."""
    asked: list[str] = []

    def check(root, run_id, now, live_window_s):
        asked.append(run_id)
        return by_run.get(run_id)

    return check, asked


def test_a_holder_its_orchestrator_says_still_runs_keeps_its_samples_however_long_it_has_been_quiet(tmp_path):
    """Shards waiting in a pool: no sign of life for twice the TTL, but the DAG run is alive."""
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    queued = plan_run(options(tmp_path, output, "queued", prompts=8))
    age(root, "queued", 2 * HOUR)
    check, asked = verdicts(queued=HolderVerdict(True, "its task generate_shard_1 is scheduled"))
    later = plan_run(options(tmp_path, output, "later", claim_ttl_s=HOUR), holders=check)
    assert asked == ["queued"] and len(later) == 4 and not later & queued  # only the 4 prompts it does not hold
    assert root.list(claim_key("queued")) and not root.list(takeover_key("queued"))
    opts = options(tmp_path, output, "third", prompts=8, claim_ttl_s=HOUR)
    with pytest.raises(NothingToDo) as held:
        prepare_plan(setup_tokenize(opts.prompts), root, "third", opts, {}, "w1", holders=check)
    assert "run queued holds 8 samples (last showed life" in str(held.value)
    assert "still running: its task generate_shard_1 is scheduled" in str(held.value)
    assert "rerun once the holding run has published or ended" in str(held.value)
    assert held.value.holders["queued"]["expires"] is None and held.value.holders["queued"]["live"] is True


def test_a_holder_that_ended_is_taken_over_at_once_while_the_rest_of_the_new_run_is_planned(tmp_path):
    """Its claim a moment old, but its orchestrator says it has ended: the new run plans its samples and its own
    new ones in one plan; a holder of other samples, ended too, is left alone; a dry run takes nothing over."""
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    dead = plan_run(options(tmp_path, output, "dead", prompts=8))
    sampling = SamplingOverrides(max_new_tokens=77)  # other samples of the same prompts
    other = plan_run(options(tmp_path / "other", output, "other", prompts=3, incremental=False, sampling=sampling))
    ended = HolderVerdict(False, "its DAG run d1 of eagle_datagen__chat had ended: failed")
    check, _ = verdicts(dead=ended, other=ended)
    assert plan_run(options(tmp_path, output, "dry", dry_run=True), holders=check) == every_sample(tmp_path)
    assert root.list(claim_key("dead")) and not root.list(takeover_key("dead"))  # the dry run took nothing
    taker = plan_run(options(tmp_path, output, "taker"), holders=check)
    assert taker == every_sample(tmp_path) and dead < taker  # its 8 and the 4 new ones
    assert set(read_claim(root, "taker").sample_ids) == taker
    assert not root.list(claim_key("dead"))
    assert json.loads(root.read_bytes(takeover_key("dead")))["why"] == ended.why
    assert root.list(claim_key("other")) and not root.list(takeover_key("other"))  # none of its samples planned
    assert other.isdisjoint(taker)


def test_a_run_that_keeps_checkpointing_holds_its_samples_however_old_its_plan(tmp_path):
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    plan_run(options(tmp_path, output, "busy"))
    age(root, "busy", 2 * HOUR)
    root.write_bytes("checkpoints/run=busy/shard=00002/chunk-1-x.jsonl", b"{}\n")  # a sample just finished
    assert plan_run(options(tmp_path, output, "later", claim_ttl_s=HOUR)) == set()
    age(root, "busy", 2 * HOUR)  # ... and once it has been silent for two hours, it holds nothing
    assert len(plan_run(options(tmp_path, output, "later2", claim_ttl_s=HOUR))) == 12


def test_the_ttl_is_judged_by_the_stores_clock(tmp_path):
    """`now` is the lock's modification time: the same claims are in flight or free depending on it alone."""
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    ids = plan_run(options(tmp_path, output, "a"))
    now = root.list_modified(claim_key("a"))[claim_key("a")]
    in_flight = claimed_sample_ids(root, now + 60, HOUR, "moonshotai/Kimi-K2.5", None, set(), "b")
    assert set(in_flight) == ids
    assert not claimed_sample_ids(root, now + 2 * HOUR, HOUR, "moonshotai/Kimi-K2.5", None, set(), "b")
    assert not claimed_sample_ids(root, now, HOUR, "moonshotai/Kimi-K2.5", None, {"a"}, "b")  # published
    assert not claimed_sample_ids(root, now, HOUR, "moonshotai/Kimi-K2.5", None, set(), "a")  # its own
    assert not claimed_sample_ids(root, now, HOUR, "another/model", None, set(), "b")


def test_claims_of_other_weights_do_not_count_for_a_per_weight_version_run(tmp_path):
    output = str(tmp_path / "out")
    plan_run(options(tmp_path, output, "old-weights", per_weight_version=True), weight_version="w1")
    fresh = plan_run(options(tmp_path, output, "new-weights", per_weight_version=True), weight_version="w2")
    assert len(fresh) == 12
    assert plan_run(options(tmp_path, output, "any-weights"), weight_version="w3") == set()


def test_a_forced_run_in_flight_holds_its_samples_for_incremental_runs(tmp_path):
    output = str(tmp_path / "out")
    assert len(plan_run(options(tmp_path, output, "forced", incremental=False))) == 12
    assert plan_run(options(tmp_path, output, "nightly")) == set()


@pytest.mark.slow
def test_runs_planning_at_once_skip_what_is_published_and_split_the_rest(tmp_path, output):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        published = run_generation(
            run_options(tmp_path, [sim.url], run_id="published", prompts=5, output=output, incremental=True)
        )
    assert published.published["data"] + published.published["quarantine"] == 5
    expected = every_sample(tmp_path)
    planned = plan_concurrently(tmp_path, output)
    assert_split(planned, expected - every_sample(tmp_path / "five", prompts=5))


def test_a_dry_run_claims_nothing(tmp_path):
    output = str(tmp_path / "out")
    assert len(plan_run(options(tmp_path, output, "dry", dry_run=True))) == 12
    assert LocalOutputRoot(output).list("claims/") == []
    assert len(plan_run(options(tmp_path, output, "real"))) == 12


def test_a_run_finding_its_samples_claimed_names_the_run_its_last_life_and_the_expiry(tmp_path):
    """Not "every sample is already published": which run holds them, when it last showed life, when its
    claim expires (the Airflow plan task logs this as a warning)."""
    output = str(tmp_path / "out")
    first = plan_run(options(tmp_path, output, "first"))
    assert first
    opts = options(tmp_path, output, "second")
    setup = setup_tokenize(opts.prompts)
    with pytest.raises(NothingToDo) as info:
        prepare_plan(setup, open_output_root(output), "second", opts, {"servers": [{"weight_version": "w1"}]}, "w1")
    message = str(info.value)
    assert f"{len(first)} of its {len(first)} samples are not published" in message
    assert "run first holds" in message and "last showed life" in message and "its claim expires" in message
    assert ", live; its claim expires" in message and "rerun after" in message
    assert info.value.published == 0 and set(info.value.holders) == {"first"}
    held = info.value.holders["first"]
    assert held["samples"] == len(first) and held["expires"] - held["last_active"] == opts.claim_ttl_s
    assert held["live"] is True  # it claimed a moment ago


def holders_of(root: OutputRoot, now: float, ttl_s: float = HOUR) -> dict[str, dict]:
    holders: dict[str, dict] = {}
    claimed_sample_ids(root, now, ttl_s, "moonshotai/Kimi-K2.5", None, set(), "other", holders)
    return holders


def test_a_heartbeating_run_holds_its_samples_however_old_its_claim_and_checkpoints(tmp_path):
    """A run killed mid-way (its claim and a heartbeat that stopped): it holds its samples until the TTL of its
    last heartbeat, no longer; while it beats, it holds them however long it goes without a checkpoint."""
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    plan_run(options(tmp_path, output, "long"))
    age(root, "long", 2 * HOUR)
    write_heartbeat(root, "long", "p1")  # generating a 32k-token answer: no checkpoint for hours, but it beats
    assert heartbeat_key("long", "p1") in root.list("claims/")
    assert plan_run(options(tmp_path, output, "later", claim_ttl_s=HOUR)) == set()
    age(root, "long", HOUR + 60)  # killed: its last heartbeat is a minute past the TTL
    assert len(plan_run(options(tmp_path, output, "later2", claim_ttl_s=HOUR))) == 12


def test_a_holder_is_live_within_a_few_heartbeats_and_silent_after(tmp_path):
    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    plan_run(options(tmp_path, output, "held"))
    write_heartbeat(root, "held", "p1")
    beat = root.list_modified(heartbeat_key("held", "p1"))[heartbeat_key("held", "p1")]
    interval = heartbeat_interval_s(HOUR)
    assert interval == 60.0 and heartbeat_interval_s(120.0) == 30.0
    live = holders_of(root, beat + 2 * interval)["held"]
    assert live["live"] is True and live["last_active"] == beat and live["expires"] == beat + HOUR
    silent = holders_of(root, beat + 5 * interval)["held"]
    assert silent["live"] is False and silent["expires"] == beat + HOUR  # silent, but not yet free
    assert holders_of(root, beat + HOUR + 1) == {}  # provably gone: free
    withdraw_claim(root, "held")  # a withdrawn run leaves neither its claim nor its heartbeat
    assert [k for k in root.list("claims/") if "held" in k] == []


def test_the_heartbeat_beats_at_once_then_at_its_interval_and_is_marked_stopped_when_the_block_ends(tmp_path):
    from eagle_datagen.generation.heartbeat import live_processes, process_heartbeat

    root = LocalOutputRoot(str(tmp_path / "out"))
    seen: list[int] = []
    with pytest.raises(RuntimeError), process_heartbeat(root, "r", 0.2, by="shard 3"):
        [key] = root.list(heartbeat_key("r") + ".")  # one key per process
        for _ in range(6):
            seen.append(os.stat(root.location(key)).st_mtime_ns)
            now = root.list_modified(key)[key]
            [live] = live_processes(root, "r", now, 1.0)
            assert live["by"] == "shard 3" and live["pid"] == os.getpid()
            time.sleep(0.1)
        raise RuntimeError("the step failed")  # however the block ends, the beat says it stopped
    assert len(set(seen)) >= 2  # refreshed while the block ran
    stopped = os.stat(root.location(key)).st_mtime_ns
    assert live_processes(root, "r", root.list_modified(key)[key], 1.0) == []
    time.sleep(0.4)
    assert os.stat(root.location(key)).st_mtime_ns == stopped  # and nothing beats after it


@pytest.mark.slow
def test_a_generating_run_heartbeats_and_a_run_whose_samples_it_holds_fails_naming_it(tmp_path, capsys):
    """The run's generation writes its heartbeat; an incremental run all of whose samples another run holds
    exits 3 with one line naming the holder (not a success that published nothing); a run finding everything
    published succeeds."""
    from eagle_datagen.cli import main
    from eagle_datagen.generation.incremental import ClaimedElsewhere
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    output = str(tmp_path / "out")
    root = LocalOutputRoot(output)
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        done = run_generation(run_options(tmp_path, [sim.url], run_id="done", prompts=3, output=output))
        assert done.published["data"] + done.published["quarantine"] == 3
        assert [k for k in root.list("claims/") if k.startswith(heartbeat_key("done"))]  # it beat
        again = run_generation(
            run_options(tmp_path, [sim.url], run_id="again", prompts=3, output=output, incremental=True)
        )
        assert again.samples == 0 and again.published is None  # all published: a success with nothing to do

        plan_run(options(tmp_path, output, "holder", prompts=6))  # claims the 3 new samples, never generates
        blocked = run_options(tmp_path, [sim.url], run_id="blocked", prompts=6, output=output, incremental=True)
        with pytest.raises(ClaimedElsewhere, match="run holder holds 3 samples"):
            run_generation(blocked)
        src = blocked.prompts.prompts[0]
        argv = ["run", "--prompts", src, "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code"]
        argv += ["--sglang-url", sim.url, "--output", output, "--incremental", "--run-id", "cli", "--no-canary"]
        argv += ["--max-new-tokens", "1000"]  # the sampling of run_options: the same sample ids
        assert main(argv) == 3  # not published, nothing to fix: rerun once the holder has published or ended
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("eagle-datagen: error:")]
    assert "run cli: nothing to generate, but 3 of its 3 samples are not published" in line  # the published skipped
    assert "run holder holds 3 samples (last showed life" in line and "rerun after" in line
