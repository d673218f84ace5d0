"""API keys against the stand-in started with --api-key (SGLang's middleware: 401 on every route but /health*,
/ready*, /metrics): a run with the key passes and sends it on every request (the stand-in counts each refusal), the
key appears in nothing the run wrote or logged; no key or a wrong one ends the command in one line within seconds,
naming the route and where the key came from, with nothing under the output root; a 401 in the middle of a run is
neither retried nor held against the endpoint; evaluate gives each deployment its own key; https with a private CA
bundle."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import ipaddress
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle_datagen.generation.steps import run_generation
from eagle_datagen.inference.access import KeyRefused, server_access
from eagle_datagen.inference.client import GenerateClient
from eagle_datagen.inference.endpoints import Endpoint, EndpointPool
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.inference.samples import SampleRequest
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.standin.sglang.speculative import SpeculativeConfig
from generation_runs import after_generations, checkpointed_samples, run_options
from secret_scan import files_under, leaks

from conftest import user_record, write_jsonl

pytestmark = pytest.mark.slow  # starts stand-in servers and the command line
CLI = [sys.executable, "-m", "eagle_datagen.cli"]
TOKENIZER = ["--tokenizer", "standin:kimi-k2.5", "--trust-remote-code"]


def keyed(key: str, **changes) -> SimServerThread:
    return SimServerThread(dataclasses.replace(SimConfig().with_profile("instant"), api_key=key, **changes))


def refusals(sim: SimServerThread) -> dict[str, int]:
    return {k: v for k, v in sim.stats()["polls"].items() if k.startswith("unauthorized")}


def run_cli(tmp_path: Path, url: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}: " + "word " * i) for i in range(12)])
    args = [*CLI, "--log-level", "DEBUG", "run", "--prompts", str(src), *TOKENIZER, "--sglang-url", url]
    args += ["--output", str(tmp_path / "out"), "--max-new-tokens", "400", "--shard-size", "5", *extra]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_DATAGEN_API")}
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=environment | (env or {}))


def test_a_run_with_the_key_sends_it_everywhere_and_writes_it_nowhere(tmp_path):
    key = "sk-" + secrets.token_urlsafe(24)
    with keyed(key) as sim:
        done = run_cli(tmp_path, sim.url, env={"EAGLE_DATAGEN_API_KEY": key})
        assert done.returncode == 0, done.stderr[-2000:]
        assert refusals(sim) == {}  # preflight, tokenizer check, liveness polls, /generate: all with the key
        assert sim.stats()["generations"] >= 12
    written = files_under(tmp_path / "out")
    assert any("manifests/" in k for k in written)
    logs = {"stdout": done.stdout.encode(), "stderr": done.stderr.encode()}
    assert leaks([key], written | logs) == []


@pytest.mark.parametrize("given", ["none", "env", "file"])
def test_no_key_or_a_wrong_one_ends_the_run_in_one_line_writing_nothing(tmp_path, given):
    key = "sk-" + secrets.token_urlsafe(24)
    wrong = "sk-" + secrets.token_urlsafe(24)
    (tmp_path / "key").write_text(wrong + "\n")
    extra, env = {"none": ([], {}), "env": ([], {"EAGLE_DATAGEN_API_KEY": wrong})}.get(
        given, (["--api-key-file", str(tmp_path / "key")], {})
    )
    with keyed(key) as sim:
        started = time.monotonic()
        done = run_cli(tmp_path, sim.url, *extra, env=env)
        took = time.monotonic() - started
        assert sim.stats()["generations"] == 0
    assert done.returncode != 0 and took < 30
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"eagle-datagen: error: {sim.url}/get_model_info answered 401 Unauthorized: "), line
    source = {"none": "none was given", "env": "from $EAGLE_DATAGEN_API_KEY", "file": f"--api-key-file {tmp_path}"}
    assert source[given] in line
    assert not (tmp_path / "out").exists()
    assert wrong not in done.stderr + done.stdout and key not in done.stderr + done.stdout


def test_a_refusal_in_the_middle_of_a_run_is_not_retried_nor_held_against_the_endpoint():
    """The key checked by preflight, then changed on the server: the first 401 stops the run (KeyRefused, one
    line), with no retry and the endpoint's breaker untouched."""

    async def go(url: str) -> tuple[GenerateClient, Endpoint, BaseException]:
        endpoint = Endpoint(url, 4)
        access = dataclasses.replace(server_access(), api_key="sk-rotated-away", source="$EAGLE_DATAGEN_API_KEY")
        pool = EndpointPool([endpoint], access=access)
        async with GenerateClient(pool, RetryPolicy(max_attempts=5, base_delay_s=0.01)) as client:
            request = SampleRequest("rid-1", "p", "r", "chat", 0, [1, 2, 3], {"max_new_tokens": 8})
            with pytest.raises(KeyRefused) as refused:
                await client.generate(request)
        return client, endpoint, refused.value

    with keyed("sk-the-servers-key") as sim:
        client, endpoint, refused = asyncio.run(go(sim.url))
    assert str(refused).startswith(f"{sim.url}/generate answered 401 Unauthorized: the API key from $EAGLE_DATAGEN")
    assert "sk-rotated-away" not in str(refused)
    assert client.stats.retries == 0 and client.stats.sent == 1
    assert endpoint.failures == 0 and endpoint.open_until == 0.0 and endpoint.outstanding == 0


def test_a_key_changed_in_the_middle_of_a_run_stops_it_in_one_line_keeping_what_was_stored(tmp_path, monkeypatch):
    key = "sk-" + secrets.token_urlsafe(24)
    monkeypatch.setenv("EAGLE_DATAGEN_API_KEY", key)
    with keyed(key, decode_s_per_token=0.002, max_running_requests=4) as sim:
        options = run_options(tmp_path, [sim.url], prompts=60)

        def rotate() -> None:
            sim.server.state.config.api_key = "sk-rotated-" + secrets.token_hex(8)

        after_generations([sim], 12, rotate)
        started = time.monotonic()
        with pytest.raises(KeyRefused) as refused:
            run_generation(options)
        took = time.monotonic() - started
        answered = sim.stats()["generations"]
    assert str(refused.value).startswith(f"{sim.url}/generate answered 401 Unauthorized: the API key from $EAGLE")
    assert key not in str(refused.value) and took < 60
    assert 12 <= checkpointed_samples(tmp_path / "out", "r") <= answered < 60  # what came back is kept


def test_evaluate_sends_each_deployment_its_own_key(tmp_path):
    key_a, key_b = "sk-a-" + secrets.token_hex(12), "sk-b-" + secrets.token_hex(12)
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"tell me about {i}") for i in range(8)])
    spec = SpeculativeConfig(draft_model_path="drafter", accept_rate=0.7)
    to = tmp_path / "results" / "eval.json"
    with keyed(key_a, speculative=spec) as a, keyed(key_b, speculative=spec) as b:
        args = [*CLI, "evaluate", *TOKENIZER, "--max-new-tokens", "300", "--prompts", str(src)]
        args += ["--sglang-url", a.url, "--compare-url", b.url, "--compare-api-key-file", str(tmp_path / "kb")]
        (tmp_path / "kb").write_text(key_b)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_DATAGEN_API")}
        done = subprocess.run(
            [*args, "--to", str(to)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env | {"EAGLE_DATAGEN_API_KEY": key_a},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert refusals(a) == {} and refusals(b) == {}
        assert a.stats()["generations"] == b.stats()["generations"] == 8
        (tmp_path / "kb").write_text(key_a)  # B's file now holds A's key: B refuses it, before any request
        done = subprocess.run(
            [*args, "--to", str(tmp_path / "results" / "again.json")],
            capture_output=True,
            text=True,
            timeout=300,
            env=env | {"EAGLE_DATAGEN_API_KEY": key_a},
        )
        assert a.stats()["generations"] == 8
    line = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and f"{b.url}/get_model_info answered 401" in line and "--compare-api-key-file" in line
    written = files_under(tmp_path / "results")
    results = json.loads(to.read_text())
    assert results["overall"]["requests"] == 8 and results["comparison"]
    assert leaks([key_a, key_b], written | {"stderr": done.stderr.encode()}) == []


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by itself (its own CA bundle), and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_https_with_a_given_ca_bundle(tmp_path):
    cert, private = self_signed(tmp_path)
    key = "sk-" + secrets.token_urlsafe(24)
    with keyed(key, tls_cert=str(cert), tls_key=str(private)) as sim:
        assert sim.url.startswith("https://")
        env = {"EAGLE_DATAGEN_API_KEY": key}
        done = run_cli(tmp_path, sim.url, "--ca-bundle", str(cert), "--wait-ready", "2", env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert refusals(sim) == {}
        (tmp_path / "again").mkdir()
        refused = run_cli(tmp_path / "again", sim.url, "--wait-ready", "2", env=env)
    line = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode != 0 and "certificate" in line.lower(), line  # the system's CAs do not know it
