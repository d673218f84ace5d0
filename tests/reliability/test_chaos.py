"""The chaos run: thousands of samples against two stand-in SGLang replicas with every fault on at moderate
rates, `eagle-datagen run` SIGKILLed and restarted with the same --run-id at seeded random points (one kill
while it publishes), one replica restarted mid-run; on S3 also object-store faults through a proxy and
SeaweedFS stopped and restarted mid-run. Afterwards the independent checker (store_checker.py) reads the
output store and finds no loss, no duplicate, no corrupt data row and a manifest that matches the store.

The figures of each run are printed (`pytest -s`) and written to build/reliability/chaos-<root>.md.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from store_checker import Store, check_run

from eagle_datagen.inference.preflight import CANARY_TRIES
from eagle_datagen.objectstore.fault_proxy import S3FaultProxy
from eagle_datagen.objectstore.seaweedfs import SeaweedFS
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from generation_runs import Invocation, after_generations, generations, run_cli

from conftest import REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow
SEED = 20260501
CATEGORIES = ("chat", "code", "math")
LONG_EVERY = 97  # every 97th prompt is too long for the context: its samples are permanent 400s
SERVER_FAULTS = {
    "error_503": 0.03,
    "error_429": 0.02,
    "error_408": 0.02,
    "abort": 0.02,
    "drop": 0.02,
    "slow": 0.01,
    "no_think_end": 0.02,
    "echo": 0.002,  # sent again; too rare (3 in an endpoint's last 50 answers) to eject a replica
    "strip_think": 0.005,
}
STORE_FAULTS = {"internal_error": 0.01, "slow_down": 0.01, "reset_before": 0.01, "reset_after": 0.01}
SLOTS, CHECKPOINT_EVERY, MAX_NEW_TOKENS = 32, 32, 58
KILLS_MID_GENERATION = 4


@dataclass(frozen=True)
class Scale:
    prompts: int
    per_prompt: int

    @property
    def samples(self) -> int:
        return self.prompts * self.per_prompt


SCALES = {"local": Scale(1000, 3), "s3": Scale(500, 3)}


@dataclass
class ChaosLog:
    invocations: list[Invocation] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)  # where each SIGKILL landed
    replica_restarts: int = 0
    store_restarts: int = 0
    server_stats: list[dict] = field(default_factory=list)  # each replica's /sim/stats at the end


def prompts_file(folder: Path, scale: Scale) -> Path:
    records = []
    for i in range(scale.prompts):
        text = f"chaos prompt {i}: " + ("a long question " * 1500 if i % LONG_EVERY == LONG_EVERY - 1 else "tell me")
        records.append(user_record(text, category=CATEGORIES[i % len(CATEGORIES)]))
    return write_jsonl(folder / "prompts.jsonl", records)


def replica_config(seed: int) -> SimConfig:
    # 20-60 tokens: some run past max_new_tokens (58) and are quarantined as finish_length; a context of 4200
    # tokens: the canary (4096 new tokens) and the short prompts fit, the long ones (~4500 tokens) get a 400
    return SimConfig(
        faults=SERVER_FAULTS,
        fault_seed=seed,
        slow_seconds=0.5,
        max_running_requests=SLOTS,
        decode_s_per_token=0.001,
        output_tokens_min=20,
        output_tokens_max=60,
        context_length=4200,
    )


def chaos(root: str, scale: Scale, tmp_path: Path, env: dict[str, str], store_restart=None) -> ChaosLog:
    """Kill and restart the run at seeded points until it finishes; restart a replica (and the store) on cue."""
    rng = random.Random(SEED)
    src = prompts_file(tmp_path, scale)
    args = ["--prompts", str(src), "--output", root, "--run-id", "chaos", "--shard-size", "100"]
    args += ["--samples-per-prompt", str(scale.per_prompt), "--max-new-tokens", str(MAX_NEW_TOKENS)]
    args += ["--checkpoint-every", str(CHECKPOINT_EVERY), "--checkpoint-interval", "0.5"]
    args += ["--draft-vocab-size", "256"]
    env = env | {"EAGLE_DATAGEN_LOG_LEVEL": "WARNING"}  # stderr: warnings (retries) and errors only
    kill_at = sorted(int(rng.uniform(0.05, 0.9) * scale.samples) for _ in range(KILLS_MID_GENERATION))
    restart_replica_at = int(rng.uniform(0.2, 0.8) * scale.samples)
    restart_store_at = int(rng.uniform(0.2, 0.8) * scale.samples)
    store = Store(root)
    log = ChaosLog()
    events: list[str] = []
    stop = threading.Event()

    def publishing() -> bool:  # shards are being committed and the manifest is not there yet
        try:
            return bool(store.keys("data/")) and not store.keys("manifests/run=chaos.json")
        except Exception:  # noqa: BLE001 - the store restarting: ask again at the next poll
            return False

    with SimServerThread(replica_config(SEED)) as a, SimServerThread(replica_config(SEED + 1)) as b:
        replicas = [a, b]
        args += ["--sglang-url", a.url, "--sglang-url", b.url]
        watchers = [after_generations(replicas, restart_replica_at, lambda: b.restart(1.0), stop, timeout_s=600)]
        if store_restart is not None:

            def restart_store() -> None:
                store_restart()
                events.append("store")

            watchers.append(after_generations(replicas, restart_store_at, restart_store, stop, timeout_s=600))
        try:
            for count in kill_at:
                before = generations(replicas)
                run = run_cli(args, kill_when=lambda count=count: generations(replicas) >= count, env=env)
                log.invocations.append(run)
                if run.killed:
                    now = generations(replicas)
                    this_run = f" (+{now - before:,})" if now > before else ", at start-up"
                    log.kills.append(f"at {now:,} generations{this_run}")
                assert run.killed or run.returncode in (0, 3), run.stderr[-3000:]
            run = run_cli(args, kill_when=publishing, env=env, poll_s=0.02)
            log.invocations.append(run)
            if run.killed:
                log.kills.append("while publishing")
            for _ in range(3):  # samples that ran out of retries (exit 3) are finished by another rerun
                if run.returncode == 0 and not run.killed:
                    break
                run = run_cli(args, env=env)
                log.invocations.append(run)
            assert run.returncode == 0, run.stderr[-3000:]
        finally:
            stop.set()
            for watcher in watchers:
                watcher.join(timeout=60)
        log.replica_restarts = b.stats()["restarts"]
        log.store_restarts = events.count("store")
        log.server_stats = [r.stats() for r in replicas]
    return log


def report(name: str, root: str, scale: Scale, log: ChaosLog, check, seconds: float, proxy=None) -> str:
    stats = log.server_stats
    faults = sum((Counter(s["faults"]) for s in stats), Counter())
    requests = sum(s["requests"]["total"] for s in stats)
    generations = sum(s["generations"] for s in stats)
    lines = [
        f"chaos run on a {name} output root ({root}), seed {SEED}, {seconds:.0f} s",
        f"- samples planned: {check.planned:,}; in data: {len(check.data):,}; in quarantine: "
        f"{len(check.quarantine):,} ({', '.join(f'{k} {v}' for k, v in sorted(check.reasons.items()))}); "
        f"permanent failures recorded: {check.permanently_failed}",
        f"- run invocations: {len(log.invocations)}; SIGKILLs: {len(log.kills)} ({'; '.join(log.kills)})",
        f"- replica restarts: {log.replica_restarts}; object-store restarts: {log.store_restarts}",
        f"- /generate requests: {requests:,} for {generations:,} generations ({requests - generations:,} answered "
        "without one: faults, the permanent 400s, requests cut by kills and the restart); faults injected by the "
        "replicas: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())),
    ]
    if proxy is not None:
        lines.append(
            f"- object-store requests: {sum(proxy.stats.requests.values()):,}; faults injected by the proxy: "
            + ", ".join(f"{k} {v}" for k, v in sorted(proxy.stats.faults.items()))
        )
    lines.append("- checker: no loss, no duplicates, manifest matches the store, every data row passes the contract")
    text = "\n".join(lines) + "\n"
    out = REPO / "build" / "reliability" / f"chaos-{name}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print("\n" + text)
    return text


def assert_outcome(check, scale: Scale, log: ChaosLog) -> None:
    check.assert_ok()
    assert check.planned == scale.samples and len(check.data) + len(check.quarantine) == scale.samples
    long_prompts = scale.prompts // LONG_EVERY
    assert check.permanently_failed == long_prompts * scale.per_prompt
    # The echo answers (a server fault) were sent again and never stored: no completion_tokens_mismatch.
    assert set(check.reasons) <= {"request_error", "missing_think_end", "finish_length"}
    assert check.reasons["finish_length"] > 0 and check.reasons["missing_think_end"] > 0
    assert sum(1 for k in log.kills if k.startswith("at ")) >= KILLS_MID_GENERATION - 1
    assert log.replica_restarts == 1
    # Nothing checkpointed is generated again: beyond one answer per sample, the replicas answered only the
    # canaries, the echo answers sent again and, per kill, at most what was in flight or not yet checkpointed.
    stats = log.server_stats
    answered_samples = scale.samples - check.permanently_failed
    extra = sum(s["generations"] for s in stats) - answered_samples
    canaries = len(log.invocations) * 2 * CANARY_TRIES
    echoes = sum(s["faults"].get("echo", 0) for s in stats)
    assert 0 <= extra <= canaries + echoes + len(log.kills) * (2 * SLOTS * 1.25 + CHECKPOINT_EVERY)


def test_chaos_run_on_a_local_root(tmp_path):
    started = time.monotonic()
    root = str(tmp_path / "out")
    scale = SCALES["local"]
    log = chaos(root, scale, tmp_path, dict(os.environ))
    check = check_run(root, "chaos")
    report("local", "a local folder", scale, log, check, time.monotonic() - started)
    assert_outcome(check, scale, log)


@pytest.fixture
def chaos_store(tmp_path_factory, monkeypatch):
    """A SeaweedFS of this test's own (it is restarted) and the environment the checker reads it with."""
    with SeaweedFS(tmp_path_factory.mktemp("chaos-seaweedfs"), buckets=["eagle"]) as server:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        yield server


def test_chaos_run_on_s3_with_object_store_faults(tmp_path, chaos_store):
    started = time.monotonic()
    root, scale = "s3://eagle/chaos", SCALES["s3"]
    with S3FaultProxy(chaos_store.endpoint_url, rates=STORE_FAULTS, seed=SEED) as proxy:
        env = dict(os.environ) | chaos_store.env | {"AWS_ENDPOINT_URL": proxy.url}
        log = chaos(root, scale, tmp_path, env, store_restart=lambda: chaos_store.restart(1.0))
    check = check_run(root, "chaos")  # straight from SeaweedFS, not through the proxy
    report("s3", root, scale, log, check, time.monotonic() - started, proxy)
    assert_outcome(check, scale, log)
    assert log.store_restarts == 1 and all(proxy.stats.faults[kind] > 0 for kind in STORE_FAULTS)
    assert json.loads(Store(root).read("manifests/run=chaos.json"))["counts"]["samples"] == scale.samples
