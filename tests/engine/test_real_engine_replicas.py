"""Two real SGLang replicas: listed as two --sglang-url, and the same two behind the real `smg` router. One of
them runs --reasoning-parser, which preflight and `eagle-datagen check` must warn of (the parser acts only on the
OpenAI endpoints, so /generate still returns think tokens and the runs below are unaffected:
docs/server-checklist.md)."""

from __future__ import annotations

import asyncio
import math
import re

import pytest
import requests

from eagle_datagen.inference.preflight import preflight
from eagle_datagen_stack.sglang_engine import ServerOptions, SmgRouter
from engine_support import assert_rows_match_server, published_rows, real_servers
from generation_runs import run_cli

from conftest import user_record, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.engine]

PROMPTS, SAMPLES = 10, 2


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    logs = tmp_path_factory.mktemp("sglang-logs")
    plain, parsing = ServerOptions(), ServerOptions(extra_args=("--reasoning-parser", "kimi_k2"))
    with real_servers(logs, plain, parsing) as pairs:
        yield {"pairs": pairs, "logs": logs}


def run(tmp_path, urls: list[str], run_id: str):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"task {i}: " + "how " * i) for i in range(PROMPTS)])
    out = tmp_path / "out"
    args = [
        "--prompts",
        str(src),
        "--output",
        str(out),
        "--run-id",
        run_id,
        "--shard-size",
        "5",
        "--samples-per-prompt",
        str(SAMPLES),
        "--max-new-tokens",
        "96",
        "--draft-vocab-size",
        "256",
    ]
    for url in urls:
        args += ["--sglang-url", url]
    result = run_cli(args, timeout_s=400)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = published_rows(out, run_id)
    every = rows["data"] + rows["quarantine"]
    assert len(every) == len({r["sample_id"] for r in every}) == PROMPTS * SAMPLES
    return every, result


def test_preflight_flags_the_reasoning_parser(replicas, kimi_profile):
    (plain, _), (parsing, _) = replicas["pairs"]
    infos = asyncio.run(preflight([plain.url, parsing.url], kimi_profile, "moonshotai/Kimi-K2.5", None, wait_s=10))
    assert [i.version for i in infos] == ["0.5.23", "0.5.23"]
    assert [i.weight_version for i in infos] == ["default", "default"]
    assert infos[0].warnings == []
    assert len(infos[1].warnings) == 1 and "--reasoning-parser kimi_k2" in infos[1].warnings[0]


def test_check_passes_both_and_warns_of_the_reasoning_parser(replicas, tmp_path):
    """`eagle-datagen check` on the real engine: the parser is a warning (other users of the server), not a refusal."""
    import subprocess
    import sys

    from conftest import REPO

    src = write_jsonl(tmp_path / "p.jsonl", [user_record("how are you?")])
    urls = [proxy.url for _, proxy in replicas["pairs"]]
    command = [sys.executable, "-m", "eagle_datagen.cli", "check", "--tokenizer", "standin:kimi-k2.5",
               "--trust-remote-code", "--prompts", str(src), "--output", str(tmp_path / "out"),
               "--max-new-tokens", "96", "--sglang-url", urls[0], "--sglang-url", urls[1]]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert [x for x in lines if x.startswith("refused")] == []
    assert sum(x.startswith("ok      endpoint ") and "(SGLang 0.5.23" in x for x in lines) == 2
    [parser] = [x for x in lines if "--reasoning-parser kimi_k2" in x]
    assert parser.startswith(f"warn    endpoint {urls[1]}: ") and "OpenAI endpoints only" in parser


def test_two_replicas_as_two_urls(replicas, tmp_path):
    proxies = [proxy for _, proxy in replicas["pairs"]]
    for proxy in proxies:
        proxy.clear()
    rows, result = run(tmp_path, [p.url for p in proxies], "two")
    assert all(p.exchanges for p in proxies), "both replicas must have served samples"
    assert_rows_match_server(rows, [e for p in proxies for e in p.exchanges])
    assert "--reasoning-parser kimi_k2" in result.stderr + result.stdout  # the preflight's warning reached the log


def test_two_replicas_behind_the_smg_router(replicas, tmp_path):
    proxies = [proxy for _, proxy in replicas["pairs"]]
    for proxy in proxies:
        proxy.clear()
    with SmgRouter([p.url for p in proxies], replicas["logs"]) as router:
        models = requests.get(f"{router.url}/v1/models", timeout=10)
        rows, result = run(tmp_path, [router.url], "routed")
    assert models.status_code == 200
    # the window counts both workers, each with the max_running_requests the router read from it
    sized = re.search(r"SGLang at \S+: 2 replicas \(router /workers\), (\d+) slots, window (\d+)", result.stderr)
    assert sized, result.stderr[-3000:]
    assert int(sized[2]) == math.ceil(1.25 * int(sized[1]))
    assert_rows_match_server(rows, [e for p in proxies for e in p.exchanges])
    # the router forwards the client's rid as it is (a string; a list would get 422)
    assert {e.rid for p in proxies for e in p.exchanges if e.rid} >= {r["sample_id"] for r in rows}
