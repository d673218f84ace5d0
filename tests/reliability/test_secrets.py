"""Secrets and exposure: a real run with S3 credentials (SeaweedFS with authentication on) leaves them in no log
line and in no stored file, even at --log-level debug; the servers the project starts listen on 127.0.0.1 only.

The Airflow side (connections with secret values, task logs and XComs) is tests/dags/test_secrets_in_airflow.py;
trust_remote_code is tests/reliability/test_remote_code_tokenizer.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from secret_scan import files_under, leaks, random_credentials, stored_objects

from conftest import REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow
LOOPBACK = "127.0.0.1"


@pytest.fixture(scope="module")
def secret_store(tmp_path_factory):
    """A SeaweedFS of its own, with credentials unique to this run."""
    from eagle_datagen.objectstore.seaweedfs import SeaweedFS

    credentials = random_credentials()
    server = SeaweedFS(tmp_path_factory.mktemp("secret-store"), buckets=["vault"], **credentials)
    with server:
        yield server


def test_a_debug_run_to_s3_leaks_no_credential(tmp_path, secret_store):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    records = [user_record(f"question {i}", category="math", id=f"m{i}") for i in range(6)] + [b"{broken"]
    src = write_jsonl(tmp_path / "p.jsonl", records)
    env = {**os.environ, **secret_store.env}
    with SimServerThread(SimConfig(faults={"no_think_end": 0.3}, fault_seed=3).with_profile("instant")) as sim:
        result = subprocess.run(
            [
                sys.executable, "-m", "eagle_datagen.cli", "--log-level", "debug", "run",
                "--prompts", str(src), "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code",
                "--sglang-url", sim.url,
                "--output", "s3://vault/runs", "--run-id", "secret-run", "--samples-per-prompt", "2",
                "--shard-size", "3", "--draft-vocab-size", "16", "--max-reject-rate", "0.5", "--no-canary",
            ],
            capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"DEBUG botocore\.\S+:", result.stderr)  # debug logging was really on, S3 requests included
    assert "Credential=***/" in result.stderr  # botocore logs the Authorization header: its key id is masked
    secret_values = [secret_store.access_key, secret_store.secret_key]
    assert leaks(secret_values, {"stdout": result.stdout.encode(), "stderr": result.stderr.encode()}) == []
    stored = stored_objects(secret_store.client(), "vault")
    kinds = {key.split("/")[1] for key in stored}
    assert {"data", "quarantine", "rejects", "plans", "checkpoints", "manifests"} <= kinds, kinds
    assert any(key.endswith(".statistics.json") for key in stored) and any(key.endswith(".html") for key in stored)
    assert leaks(secret_values, stored) == []
    assert leaks(secret_values, files_under(tmp_path)) == []


def test_credentials_in_an_sglang_url_are_refused_without_echoing_them(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record("hi")])
    result = subprocess.run(
        [
            sys.executable, "-m", "eagle_datagen.cli", "run", "--prompts", str(src), "--tokenizer",
            "standin:kimi-k2.5",
            "--trust-remote-code",
            "--sglang-url", "http://svc:s3cr3t-Pa55@127.0.0.1:9", "--output", str(tmp_path / "o"),
        ],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1 and "carries credentials" in result.stderr
    assert "s3cr3t-Pa55" not in result.stdout + result.stderr and "svc:" not in result.stderr


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the process and its children listen on."""
    process = psutil.Process(pid)
    found = set()
    for proc in [process, *process.children(recursive=True)]:
        for conn in proc.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                found.add((conn.laddr.ip, conn.laddr.port))
    return found


def test_seaweedfs_listens_on_loopback_only(secret_store):
    sockets = listening(secret_store.process.pid)
    assert (LOOPBACK, secret_store.s3_port) in sockets
    assert {address for address, _ in sockets} == {LOOPBACK}, sockets


def test_serve_sim_listens_on_loopback_only():
    process = subprocess.Popen(
        [sys.executable, "-m", "eagle_datagen.cli", "serve-sim", "--port", "0", "--profile", "instant"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        line = process.stdout.readline()  # "serving SGLang stand-in on http://127.0.0.1:PORT"
        match = re.search(r"http://([\d.]+):(\d+)", line)
        assert match, line
        assert match.group(1) == LOOPBACK
        deadline = time.monotonic() + 60
        while not (sockets := listening(process.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sockets == {(LOOPBACK, int(match.group(2)))}
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def test_the_in_process_stand_in_listens_on_loopback_only():
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        mine = {(a, p) for a, p in listening(os.getpid()) if p == sim.port}
    assert mine == {(LOOPBACK, sim.port)}
