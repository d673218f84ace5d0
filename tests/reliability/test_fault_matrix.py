"""The fault matrix: every fault the stand-in SGLang server and the object store can produce, each in a run
that must end with the right outcome, checked by an independent reader of the output store.

The promise: under faults the pipeline keeps going, loses no sample and stores no corrupt sample. Transient
faults are retried until every sample is in data/ exactly once; wrong outputs land in quarantine/ with their
reason; permanent failures are recorded; a sick replica is taken out of the run and the others finish it;
a broken deployment stops the run early with its diagnosis (no manifest), and a rerun after the fix
completes from the checkpoints. `pytest -s` prints the fault x outcome table; it is also written to build/reliability/.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from store_checker import RunCheck, check_run

from eagle_datagen.generation.screen import RunStopped
from eagle_datagen.generation.stage import RunSummary, SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.inference.endpoints import BreakerPolicy
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.objectstore.s3 import s3_client
from eagle_datagen.objectstore.seaweedfs import SeaweedFS
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from generation_runs import after_generations, checkpointed_samples, run_cli, run_options
from s3_fault_proxy import S3FaultProxy

from conftest import REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow
PROMPTS, PER_PROMPT = 30, 2
SAMPLES = PROMPTS * PER_PROMPT
TABLE_FILE = REPO / "build" / "reliability" / "fault_matrix.md"
COLUMNS = ["fault", "injected", "data", "quarantine (reasons)", "retried requests", "outcome"]


@pytest.fixture(scope="module")
def fault_table():
    """Rows collected by the tests of this module, printed and written once they have all run."""
    rows: dict[str, list[str]] = {}
    yield rows
    if not rows:
        return
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for _, cells in sorted(rows.items())]
    text = "\n".join(lines) + "\n"
    TABLE_FILE.parent.mkdir(parents=True, exist_ok=True)
    TABLE_FILE.write_text(text)
    print(f"\nfault matrix ({len(rows)} rows, also in {TABLE_FILE.relative_to(REPO)}):\n{text}")


def record(table: dict, order: str, fault: str, injected: str, check: RunCheck, retried: int, outcome: str) -> None:
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(check.reasons.items()))
    quarantine = f"{len(check.quarantine)}" + (f" ({reasons})" if reasons else "")
    table[order] = [fault, injected, f"{len(check.data)}/{check.planned}", quarantine, str(retried), outcome]


def injected_text(stats: dict, kinds: list[str]) -> str:
    return ", ".join(f"{kind} x{stats['faults'].get(kind, 0)}" for kind in kinds)


def sampling(**changes) -> SamplingOverrides:
    return SamplingOverrides(**({"max_new_tokens": 1000, "samples_per_prompt": PER_PROMPT} | changes))


def published(check: RunCheck, summary: RunSummary | None = None) -> str:
    assert summary is None or (summary.pending == 0 and summary.published is not None)
    assert check.manifest is not None
    return f"published; manifest lists {len(check.manifest['files'])} files, all verified"


# --- faults of the SGLang server --------------------------------------------------------------------------


@dataclass(frozen=True)
class Transient:
    order: str
    fault: str
    config: SimConfig
    kinds: list[str]  # what the server counts as injected
    failure: str | None  # the client's name for the failed attempt; None: nothing fails
    options: dict = field(default_factory=dict)  # RunOptions changes


TRANSIENT = [
    Transient("01", "503 queue full", SimConfig(faults={"error_503": 0.3}, fault_seed=3), ["error_503"], "http_503"),
    Transient("02", "429 from a router", SimConfig(faults={"error_429": 0.3}, fault_seed=3), ["error_429"], "http_429"),
    Transient("03", "408 from a router", SimConfig(faults={"error_408": 0.3}, fault_seed=3), ["error_408"], "http_408"),
    Transient("04", "HTTP-200 abort", SimConfig(faults={"abort": 0.3}, fault_seed=3), ["abort"], "abort"),
    Transient("05", "dropped connection", SimConfig(faults={"drop": 0.3}, fault_seed=3), ["drop"], "disconnect"),
    Transient(
        "06", "slow response (within the timeout)", SimConfig(faults={"slow": 0.3}, slow_seconds=0.3), ["slow"], None
    ),
    Transient(
        "07",
        "slow response (past the request timeout)",
        SimConfig(faults={"slow": 0.3}, slow_seconds=1.5, fault_seed=2),
        ["slow"],
        "timeout",
        {
            "retry": RetryPolicy(max_attempts=10, base_delay_s=0.01, max_delay_s=0.05, request_timeout_s=0.5),
            "breaker": BreakerPolicy(open_s=0.2, max_open_s=1.0),  # timeouts trip it: keep the test short
        },
    ),
]


@pytest.mark.parametrize("case", TRANSIENT, ids=lambda c: c.fault)
def test_transient_server_faults_are_retried_until_every_sample_is_stored(tmp_path, fault_table, case):
    with SimServerThread(case.config.with_profile("instant")) as sim:
        summary = run_generation(run_options(tmp_path, [sim.url], sampling=sampling(), **case.options))
        stats = sim.stats()
    check = check_run(str(tmp_path / "out"), "r").assert_ok()
    assert all(stats["faults"].get(kind, 0) > 0 for kind in case.kinds)
    assert len(check.data) == SAMPLES and not check.quarantine
    if case.failure is not None:
        assert summary.failures.get(case.failure, 0) > 0 and summary.retries >= summary.failures[case.failure]
    record(
        fault_table,
        case.order,
        case.fault,
        injected_text(stats, case.kinds),
        check,
        summary.retries,
        "every sample stored once; " + published(check, summary),
    )


def test_the_preflight_canary_rides_out_transient_faults(tmp_path, fault_table, caplog):
    # seed 9: the canary meets 503s, a dropped connection, an abort and an output without </think> first
    faults = {"error_503": 0.3, "drop": 0.2, "abort": 0.2, "no_think_end": 0.3}
    with SimServerThread(SimConfig(faults=faults, fault_seed=9).with_profile("instant")) as sim:
        with caplog.at_level(logging.WARNING, logger="eagle_datagen.inference.preflight"):
            # about half of all attempts fail: enough attempts that no sample runs out of them
            retry = RetryPolicy(max_attempts=30, base_delay_s=0.01, max_delay_s=0.05)
            summary = run_generation(run_options(tmp_path, [sim.url], sampling=sampling(), canary=True, retry=retry))
        stats = sim.stats()
    retried = [r.getMessage() for r in caplog.records if r.name == "eagle_datagen.inference.preflight"]
    assert any("failed the canary generation" in m for m in retried)  # a transient failure, retried
    assert any("trying another seed" in m for m in retried)  # a bad output, not taken for a misconfiguration
    check = check_run(str(tmp_path / "out"), "r").assert_ok()
    assert set(check.reasons) <= {"missing_think_end"} and len(check.data) + len(check.quarantine) == SAMPLES
    record(
        fault_table,
        "00",
        "faults during the preflight's canary",
        f"{len(retried)} canary attempts failed ({injected_text(stats, list(faults))} over the run)",
        check,
        summary.retries + len(retried),
        "canary retried (transient) and resent with another seed (wrong output); run went on; "
        + published(check, summary),
    )


def test_a_server_restarting_mid_run_is_waited_for(tmp_path, fault_table):
    config = SimConfig(decode_s_per_token=0.001, output_tokens_min=20, output_tokens_max=40, max_running_requests=8)
    with SimServerThread(config) as sim:
        restarter = after_generations([sim], 10, lambda: sim.restart(0.5))
        summary = run_generation(run_options(tmp_path, [sim.url], sampling=sampling()))
        restarter.join()
        stats = sim.stats()
    check = check_run(str(tmp_path / "out"), "r").assert_ok()
    assert stats["restarts"] == 1 and len(check.data) == SAMPLES
    cut = sum(summary.failures.get(k, 0) for k in ("disconnect", "connect_error", "connection_error"))
    assert cut > 0  # requests in flight were cut, new ones refused, and all were retried
    record(
        fault_table,
        "08",
        "server restarting mid-run",
        f"1 restart, {cut} requests cut or refused",
        check,
        summary.retries,
        "every sample stored once; " + published(check, summary),
    )


@dataclass(frozen=True)
class Wrong:
    order: str
    fault: str
    config: SimConfig
    max_new_tokens: int
    reason: str
    injected: Callable[[dict], str]


WRONG = [
    Wrong(
        "09",
        "outputs without </think> (the model's behaviour: nothing sent again)",
        SimConfig(faults={"no_think_end": 0.2}, fault_seed=1),
        1000,
        "missing_think_end",
        lambda stats: injected_text(stats, ["no_think_end"]),
    ),
    Wrong(
        "10",
        "outputs truncated by max_new_tokens",
        SimConfig(),
        130,
        "finish_length",
        lambda stats: "max_new_tokens 130 for outputs of 50-150 tokens",
    ),
    Wrong(
        "11",
        "server stripping think tokens (occasional)",
        SimConfig(faults={"strip_think": 0.1}, fault_seed=1),
        1000,
        "missing_think_end",
        lambda stats: injected_text(stats, ["strip_think"]),
    ),
]


@pytest.mark.parametrize("case", WRONG, ids=lambda c: c.fault)
def test_wrong_outputs_are_quarantined_with_their_reason(tmp_path, fault_table, case):
    with SimServerThread(case.config.with_profile("instant")) as sim:
        summary = run_generation(
            run_options(tmp_path, [sim.url], sampling=sampling(max_new_tokens=case.max_new_tokens))
        )
        stats = sim.stats()
    check = check_run(str(tmp_path / "out"), "r").assert_ok()
    assert 0 < len(check.quarantine) < SAMPLES and set(check.reasons) == {case.reason}
    assert len(check.data) + len(check.quarantine) == SAMPLES and summary.retries == 0
    record(
        fault_table,
        case.order,
        case.fault,
        case.injected(stats),
        check,
        0,
        f"quarantined as {case.reason}, the rest in data; " + published(check, summary),
    )


# --- sick replicas and broken deployments: answers validated as they arrive -------------------------------


def replica(**faults: float) -> SimServerThread:
    """An instant stand-in at 1 ms a token: answers overlap, so replicas share the work evenly."""
    config = SimConfig(faults=faults, fault_seed=7).with_profile("instant")
    return SimServerThread(dataclasses.replace(config, decode_s_per_token=0.001))


def ejections(check: RunCheck) -> dict[str, list[dict]]:
    assert check.manifest is not None
    return {url: e["ejected"] for url, e in check.manifest["counts"]["endpoints"].items()}


def test_a_replica_with_the_echo_bug_is_ejected_and_the_run_publishes(tmp_path, fault_table):
    with replica() as good, replica(echo=0.2) as sick:
        summary = run_generation(run_options(tmp_path, [good.url, sick.url], sampling=sampling(), concurrency=4))
        stats = sick.stats()
    check = check_run(str(tmp_path / "out"), "r").assert_ok()
    assert len(check.data) == SAMPLES and not check.quarantine  # no echo answer stored
    (ejection,) = ejections(check)[sick.url]
    assert not ejections(check)[good.url] and ejection["answers"] <= 60
    record(
        fault_table,
        "12",
        "prompt-tail echo bug (SGLang 0.5.0-0.5.4) on one replica of two, 20% of its answers",
        injected_text(stats, ["echo"]),
        check,
        summary.retries,
        f"replica ejected at its answer {ejection['answers']} ({ejection['reason']}, 3 of its last answers); "
        "the echo answers were sent again to the other, none stored; the report names it; " + published(check, summary),
    )


def test_a_replica_stripping_think_tokens_is_ejected_and_its_answers_quarantined(tmp_path, fault_table):
    with replica() as a, replica() as b, replica(strip_think=1.0) as stripping:
        summary = run_generation(
            run_options(tmp_path, [a.url, b.url, stripping.url], sampling=sampling(), concurrency=4)
        )
        stats = stripping.stats()
    check = check_run(str(tmp_path / "out"), "r").assert_ok()
    (ejection,) = ejections(check)[stripping.url]
    assert ejection["kind"] == "model_behaviour" and summary.retries == 0
    assert len(check.quarantine) == stats["generations"] and set(check.reasons) == {"missing_think_end"}
    record(
        fault_table,
        "13",
        "server stripping think tokens on one replica of three (every answer)",
        injected_text(stats, ["strip_think"]),
        check,
        summary.retries,
        f"replica ejected at its answer {ejection['answers']} (missing_think_end far above the others'); its "
        "answers quarantined, none sent again; " + published(check, summary),
    )


@pytest.mark.parametrize(
    ("order", "fault", "faults", "replicas", "diagnosis", "within"),
    [
        ("13a", "prompt-tail echo bug on every replica (20%)", {"echo": 0.2}, 2, "upgrade SGLang", 100),
        (
            "13b",
            "wrong tokenizer: prompt token counts disagree (every answer, every replica)",
            {"prompt_tokens": 1.0},
            2,
            "did not process the input_ids as sent",
            50,
        ),
        (
            "13c",
            "server stripping think tokens (systematic, 90%)",
            {"strip_think": 0.9},
            1,
            "not through a proxy that rewrites answers",
            40,
        ),
    ],
)
def test_a_broken_deployment_stops_the_run_early_and_a_rerun_after_the_fix_completes(
    tmp_path, fault_table, order, fault, faults, replicas, diagnosis, within
):
    servers = [replica(**faults) for _ in range(replicas)]
    for server in servers:
        server.__enter__()
    try:
        urls = [server.url for server in servers]
        with pytest.raises(RunStopped, match=re.escape(diagnosis)) as stopped:
            run_generation(run_options(tmp_path, urls, sampling=sampling(), concurrency=4))
        answered = sum(server.stats()["generations"] for server in servers)
        asked = sum(server.stats()["requests"]["total"] for server in servers)
        injected = ", ".join(injected_text(server.stats(), list(faults)) for server in servers)
        # a server-fault answer is sent again; a model-behaviour one (stripped think tokens) is not
        retried = (
            0
            if "strip_think" in faults
            else sum(server.stats()["faults"].get(k, 0) for server in servers for k in faults)
        )
        kept = checkpointed_samples(tmp_path / "out", "r")
        for server in servers:
            server.set_faults({})
        rerun = run_generation(run_options(tmp_path, urls, sampling=sampling(), concurrency=4))
    finally:
        for server in servers:
            server.__exit__(None, None, None)
    message = str(stopped.value)
    assert "\n" not in message and all(url in message for url in urls) and answered <= within
    check = check_run(str(tmp_path / "out"), "r").assert_ok()
    assert rerun.resumed == kept and rerun.published is not None
    record(
        fault_table,
        order,
        fault,
        f"{injected} in the first {asked} requests",
        check,
        retried,
        f"stopped after {answered} answers: `{message[:110]}...`; after the fix the rerun resumed {kept} "
        "checkpointed samples and generated the rest; " + published(check, rerun),
    )


def test_permanent_400s_are_recorded_and_not_resent(tmp_path, fault_table):
    # prompt + max_new_tokens (1000) must fit in 1040 tokens: the 4 prompts of 40 tokens or more get a 400
    with SimServerThread(SimConfig(context_length=1040).with_profile("instant")) as sim:
        summary = run_generation(run_options(tmp_path, [sim.url], sampling=sampling()))
        served = sim.stats()["requests"]["total"]
    check = check_run(str(tmp_path / "out"), "r").assert_ok()
    assert served == SAMPLES  # one request per sample: a 400 is never resent
    assert check.permanently_failed == 8 == len(check.quarantine)
    assert all("http_400" in r["error"] and "context length" in r["error"] for r in check.quarantine)
    record(
        fault_table,
        "14",
        "permanent 400 (prompt + max_new_tokens over the context length)",
        "8 samples answered 400",
        check,
        summary.retries,
        "recorded in quarantine as request_error with the server's message, sent once; " + published(check, summary),
    )


def test_a_worker_killed_mid_shard_loses_and_repeats_nothing(tmp_path, fault_table):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"prompt number {i}") for i in range(PROMPTS)])
    out = tmp_path / "out"
    args = ["--prompts", str(src), "--output", str(out), "--run-id", "k", "--shard-size", "10"]
    args += ["--samples-per-prompt", str(PER_PROMPT), "--concurrency", "4", "--checkpoint-every", "1"]
    args += ["--draft-vocab-size", "64"]
    config = SimConfig(max_running_requests=4, decode_s_per_token=0.002, output_tokens_min=40, output_tokens_max=80)
    with SimServerThread(config) as sim:
        url = ["--sglang-url", sim.url]
        killed = run_cli(args + url, kill_when=lambda: checkpointed_samples(out, "k") >= SAMPLES // 3, timeout_s=120)
        assert killed.killed, killed.stderr[-2000:]
        done_before = checkpointed_samples(out, "k")
        rerun = run_cli(args + url)
    assert rerun.returncode == 0, rerun.stderr
    check = check_run(str(out), "k").assert_ok()
    assert len(check.data) == SAMPLES and f"{done_before:,} resumed from checkpoints" in rerun.stdout
    record(
        fault_table,
        "15",
        "worker (the run process) killed mid-shard",
        f"SIGKILL after {done_before} of {SAMPLES} samples were checkpointed",
        check,
        0,
        f"rerun with the same --run-id resumed {done_before}, generated the rest; " + published(check),
    )


# --- faults of the object store ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A SeaweedFS of this module's own: one test stops and restarts it."""
    with SeaweedFS(tmp_path_factory.mktemp("seaweedfs"), buckets=["eagle"]) as server:
        yield server


@pytest.fixture
def proxied(store, monkeypatch):
    """The package's S3 client pointed at a fault proxy in front of the store."""
    with S3FaultProxy(store.endpoint_url, seed=7) as proxy:
        for key, value in store.env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        s3_client.cache_clear()
        yield proxy
        s3_client.cache_clear()


def s3_run(tmp_path, proxy: S3FaultProxy, name: str) -> tuple[RunSummary, RunCheck, dict]:
    uri = f"s3://eagle/{name}"
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        summary = run_generation(run_options(tmp_path, [sim.url], sampling=sampling(), output=uri))
    faults = dict(proxy.stats.faults)
    proxy.set_rates({})  # the checker reads through the same endpoint: no faults for it
    check = check_run(uri, "r").assert_ok()
    assert len(check.data) == SAMPLES
    return summary, check, faults


def proxy_text(faults: dict, requests: int) -> str:
    return ", ".join(f"{kind} x{n}" for kind, n in sorted(faults.items())) + f" in {requests} requests"


@pytest.mark.parametrize(
    ("order", "fault", "rates"),
    [
        ("16", "object store: 500 InternalError and 503 SlowDown", {"internal_error": 0.1, "slow_down": 0.1}),
        ("17", "object store: connection resets mid-request", {"reset_before": 0.08, "reset_after": 0.08}),
    ],
)
def test_object_store_errors_mid_upload_are_retried(tmp_path, proxied, fault_table, order, fault, rates):
    proxied.set_rates(rates)
    summary, check, faults = s3_run(tmp_path, proxied, f"m{order}")
    assert all(faults.get(kind, 0) > 0 for kind in rates)
    record(
        fault_table,
        order,
        fault,
        proxy_text(faults, sum(proxied.stats.requests.values())),
        check,
        sum(faults.values()),
        "every sample stored once; " + published(check, summary),
    )


def test_a_committed_write_whose_answer_is_lost_is_not_written_twice(tmp_path, proxied, fault_table):
    proxied.schedule("PUT", "/checkpoints/", 2, "reset_before")  # a checkpoint that never reached the store
    proxied.schedule("PUT", "/data/", 1, "slow_down")  # the first data shard: refused once
    proxied.schedule("PUT", "/manifests/run=r.json", 1, "reset_after")  # committed, but the answer is lost
    summary, check, faults = s3_run(tmp_path, proxied, "m18")
    assert faults == {"reset_before": 1, "slow_down": 1, "reset_after": 1}
    record(
        fault_table,
        "18",
        "object store: the N-th PUT fails (a shard refused, the manifest committed but its answer lost)",
        ", ".join(f"{m} {k.split('/', 2)[-1][:40]}: {f}" for m, k, f in proxied.stats.injected),
        check,
        sum(faults.values()),
        "retried; the lost answer found committed (412 then same checksum); " + published(check, summary),
    )


def test_seaweedfs_stopped_and_restarted_mid_upload(tmp_path, proxied, store, fault_table):
    restart = threading.Thread(target=lambda: (time.sleep(1.0), store.start()))
    triggered = threading.Event()

    def stop_at_the_first_data_shard(method: str, key: str) -> None:
        if method == "PUT" and "/data/" in key and not triggered.is_set():
            triggered.set()
            store.stop()  # SIGTERM by PID; the request in hand then finds no server
            restart.start()  # same data folder and ports

    proxied.before_forward = stop_at_the_first_data_shard
    try:
        summary, check, faults = s3_run(tmp_path, proxied, "m19")
    finally:
        proxied.before_forward = None
        if restart.ident is not None:
            restart.join()
    assert triggered.is_set() and faults.get("upstream_down", 0) > 0
    record(
        fault_table,
        "19",
        "SeaweedFS stopped and restarted mid-upload",
        f"stopped (SIGTERM) at the first data-shard PUT, back on the same ports after 1 s + start; "
        f"{faults['upstream_down']} requests found it down",
        check,
        faults["upstream_down"],
        "uploads retried until it was back; " + published(check, summary),
    )


def test_the_object_store_down_for_seconds_mid_generation(tmp_path, proxied, store, fault_table):
    """Longer than boto3's own retries last (3 attempts): checkpoint writes wait for the store to come back."""
    outage = {}
    config = SimConfig(decode_s_per_token=0.002, output_tokens_min=50, output_tokens_max=100, max_running_requests=8)
    with SimServerThread(config) as sim:

        def stop_for_a_while() -> None:
            started = time.monotonic()
            store.restart(downtime_s=5.0)
            outage["s"] = time.monotonic() - started

        outages = after_generations([sim], 20, stop_for_a_while)
        uri = "s3://eagle/m20"
        try:
            summary = run_generation(run_options(tmp_path, [sim.url], sampling=sampling(), output=uri))
        finally:
            outages.join()
    check = check_run(uri, "r").assert_ok()
    assert len(check.data) == SAMPLES and proxied.stats.faults["upstream_down"] > 0
    record(
        fault_table,
        "20",
        "object store down for seconds mid-generation",
        f"SeaweedFS stopped after 20 generations for {outage['s']:.0f} s (5 s down, then its start); "
        f"{proxied.stats.faults['upstream_down']} requests found it down",
        check,
        proxied.stats.faults["upstream_down"],
        "checkpoint writes waited for it (generation paused, nothing lost); " + published(check, summary),
    )
