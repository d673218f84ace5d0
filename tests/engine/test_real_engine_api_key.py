"""The real SGLang 0.5.23 started with --api-key, alone and behind the real `smg` router started with the same
--api-key: a run with the key passes and the key is in nothing it wrote or logged; no key or a wrong one ends the
command in one line within seconds, naming the route and where the key came from, with nothing under the output
root. (/health answers 200 without the key: preflight checks the key on /get_model_info.)"""

from __future__ import annotations

import os
import secrets
import time

import pytest
import requests

from eagle_datagen_stack.sglang_engine import ServerOptions, SmgRouter, engine_venv
from engine_support import published_rows, real_servers
from generation_runs import run_cli
from secret_scan import files_under, leaks

from conftest import user_record, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.engine]
KEY = "sk-" + secrets.token_urlsafe(24)  # unique to this test run: a hit is never a coincidence
PROMPTS = 6


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """One real server with --api-key for the module (its own URL: the recording proxy drops Authorization)."""
    logs = tmp_path_factory.mktemp("sglang-keyed")
    with real_servers(logs, ServerOptions(api_key=KEY)) as pairs:
        yield pairs[0][0], logs


def environment(key: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_DATAGEN_API")}
    return env | ({"EAGLE_DATAGEN_API_KEY": key} if key else {})


def run(tmp_path, url: str, key: str | None, *extra: str):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"task {i}: " + "how " * i) for i in range(PROMPTS)])
    args = ["--prompts", str(src), "--output", str(tmp_path / "out"), "--run-id", "keyed", "--sglang-url", url]
    args += ["--max-new-tokens", "64", "--draft-vocab-size", "32", *extra]
    started = time.monotonic()
    result = run_cli(args, env=environment(key), timeout_s=400)
    return result, time.monotonic() - started


def test_the_server_wants_the_key_except_on_health(keyed):
    server, _ = keyed
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
    assert requests.get(server.url + "/get_model_info", timeout=10).status_code == 401
    auth = {"Authorization": f"Bearer {KEY}"}
    assert requests.get(server.url + "/get_model_info", headers=auth, timeout=10).status_code == 200


def test_a_run_with_the_key_passes_and_leaves_the_key_nowhere(keyed, tmp_path):
    server, _ = keyed
    result, _ = run(tmp_path, server.url, KEY)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = published_rows(tmp_path / "out", "keyed")
    assert len(rows["data"] + rows["quarantine"]) == PROMPTS
    logs = {"stdout": result.stdout.encode(), "stderr": result.stderr.encode()}
    assert leaks([KEY], files_under(tmp_path / "out") | logs) == []


@pytest.mark.parametrize("key", [None, "sk-wrong-" + secrets.token_hex(8)], ids=["no key", "wrong key"])
def test_no_key_or_a_wrong_one_ends_the_run_in_one_line_writing_nothing(keyed, tmp_path, key):
    server, _ = keyed
    result, took = run(tmp_path, server.url, key)
    assert result.returncode != 0 and took < 60
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"eagle-datagen: error: {server.url}/get_model_info answered 401 Unauthorized: "), line
    assert ("from $EAGLE_DATAGEN_API_KEY is wrong" if key else "none was given") in line
    assert not (tmp_path / "out").exists()


def test_behind_the_smg_router_with_the_same_key(keyed, tmp_path):
    """smg's --api-key is the key it sends its workers; smg 1.13.0 then wants it from its clients too."""
    server, logs = keyed
    if not (engine_venv() / "bin" / "smg").exists():
        pytest.skip(f"smg is not installed in {engine_venv()}: run `make sglang`")
    with SmgRouter([server.url], logs, api_key=KEY) as router:
        (tmp_path / "a").mkdir()
        result, _ = run(tmp_path / "a", router.url, KEY)
        assert result.returncode == 0, result.stderr[-3000:]
        (tmp_path / "b").mkdir()
        refused, took = run(tmp_path / "b", router.url, None)
    rows = published_rows(tmp_path / "a" / "out", "keyed")
    assert len(rows["data"] + rows["quarantine"]) == PROMPTS
    assert leaks([KEY], files_under(tmp_path / "a" / "out") | {"stderr": result.stderr.encode()}) == []
    line = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode != 0 and took < 60 and f"{router.url}/get_model_info answered 401" in line, line
    assert not (tmp_path / "b" / "out").exists()
