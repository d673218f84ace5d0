"""The preflight compares the client's canary ids with the server's own (SGLang's /v1/tokenize with messages),
here against serve-sim loading the remote-code stand-in as SGLang does (--trust-remote-code); the real engine's
side is tests/engine/test_tokenizer_agreement_real_engine.py. A run against serve-sim goes through it too, and a
rerun with a tampered tokenizer is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import aiohttp
import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.preflight import EndpointVerdicts, RunLevelError, judge_endpoints
from eagle_datagen.inference.tokenizer_agreement import agreement_check, client_ids, first_difference
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.tokenization.canaries import CANARIES
from eagle_datagen.tokenization.loader import load_tokenizer
from generation_runs import run_cli
from standin_variants import copy_standin, swap_byte_ranks

from conftest import user_record, write_jsonl

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim():
    with SimServerThread(SimConfig(tokenizer_path="standin:kimi-k2.5").with_profile("instant")) as server:
        yield server


def check(urls: list[str], tokenizer) -> dict[str, str]:
    """The endpoints the check leaves out, with why."""

    async def go() -> dict[str, str]:
        async with aiohttp.ClientSession() as session:
            return await agreement_check(tokenizer)(session, urls)

    return asyncio.run(go())


def judge(urls: list[str], tokenizer, profile) -> EndpointVerdicts:
    """The whole per-endpoint preflight (no canary generation), the agreement check included."""
    return asyncio.run(
        judge_endpoints(urls, profile, "moonshotai/Kimi-K2.5", None, wait_s=5, agreement=agreement_check(tokenizer))
    )


@pytest.fixture(scope="module")
def odd_replica(tmp_path_factory, standin_dir):
    """A replica serving a copy of the stand-in whose "?" and "@" ranks are swapped: one token off."""
    folder = copy_standin(standin_dir, tmp_path_factory.mktemp("odd") / "tok")
    swap_byte_ranks(folder)
    with SimServerThread(SimConfig(tokenizer_path=str(folder)).with_profile("instant")) as server:
        yield server


def test_the_same_tokenizer_agrees_on_every_canary(sim, tokenizer, caplog):
    with caplog.at_level(logging.INFO):
        assert check([sim.url], tokenizer) == {}
    assert f"{len(CANARIES)} canaries give the same ids on 1 endpoint(s)" in caplog.text
    assert sim.stats()["polls"].get("POST /v1/tokenize") == len(CANARIES)


def test_a_client_tokenizer_one_token_off_is_caught(sim, standin_dir, tmp_path, kimi_profile, tokenizer):
    folder = copy_standin(standin_dir, tmp_path / "tok")
    question, at = swap_byte_ranks(folder)  # "?" gets the id of "@" and back
    client = load_tokenizer(str(folder), kimi_profile, trust_remote_code=True).tokenizer
    mine, theirs = client_ids(client)["plain"], client_ids(tokenizer)["plain"]
    position = first_difference(mine, theirs)
    assert sum(a != b for a, b in zip(mine, theirs, strict=True)) == 1  # exactly one token differs
    with pytest.raises(RunLevelError) as info:  # the run's own failure: whatever other endpoints say
        check([sim.url], client)
    line = str(info.value)
    assert "\n" not in line
    assert "canary 'plain'" in line and f"first difference at position {position} of {len(mine)}" in line
    assert f"client {at} '?'" in line and f"server {question} '?'" in line, line


def test_a_server_without_a_tokenizer_is_skipped_and_said_once(tokenizer, caplog):
    with (
        SimServerThread(SimConfig().with_profile("instant")) as bare,
        SimServerThread(SimConfig().with_profile("instant")) as other,
    ):
        with caplog.at_level(logging.INFO):
            assert check([bare.url, other.url], tokenizer) == {}
    [line] = [r.getMessage() for r in caplog.records if "agreement" in r.getMessage()]
    assert line.startswith("tokenizer agreement check skipped:") and line.count("--skip-tokenizer-init") == 2


def test_a_client_tokenizer_that_no_replica_agrees_with_stops_the_run(sim, odd_replica, tokenizer, kimi_profile):
    """Both replicas serve the stand-in; the client's is one token off: the run's own failure, in one line."""
    client = load_tokenizer(odd_replica.config.tokenizer_path, kimi_profile, trust_remote_code=True).tokenizer
    with SimServerThread(SimConfig(tokenizer_path="standin:kimi-k2.5").with_profile("instant")) as second:
        with pytest.raises(RunLevelError) as info:
            judge([sim.url, second.url], client, kimi_profile)
    line = str(info.value)
    assert "\n" not in line and "first difference at position" in line and "point --tokenizer at the folder" in line


def test_a_replica_serving_another_tokenizer_is_left_out_when_the_others_agree(
    sim, odd_replica, tokenizer, kimi_profile
):
    verdicts = judge([sim.url, odd_replica.url], tokenizer, kimi_profile)
    assert [s.url for s in verdicts.servers] == [sim.url]
    [left] = verdicts.left_out
    assert left.url == odd_replica.url and "\n" not in left.reason
    assert "tokenizes canary 'plain' differently" in left.reason and "this one serves another tokenizer" in left.reason


def test_a_server_with_a_tokenizer_but_no_tokenize_route_fails_its_preflight(sim, tokenizer, kimi_profile):
    """Not a skip: only a server without a tokenizer may go unchecked (an SGLang before 0.5.23 has no route)."""
    config = dataclasses.replace(
        SimConfig(tokenizer_path="standin:kimi-k2.5").with_profile("instant"), tokenize_routes=False
    )
    with SimServerThread(config) as server:
        verdicts = judge([sim.url, server.url], tokenizer, kimi_profile)
        assert [s.url for s in verdicts.servers] == [sim.url]
        [left] = verdicts.left_out
        assert left.url == server.url and "loads a tokenizer, but it has no /v1/tokenize route (404)" in left.reason
        with pytest.raises(ConfigError) as info:  # alone, it is the run's only endpoint: the run stops
            judge([server.url], tokenizer, kimi_profile)
    line = str(info.value)
    assert "\n" not in line and "the client's tokenizer cannot be compared with it" in line


def test_a_run_against_serve_sim_checks_agreement_and_a_tampered_rerun_is_refused(sim, standin_dir, tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}?") for i in range(4)])
    out = tmp_path / "out"
    base = ["--prompts", str(src), "--output", str(out), "--run-id", "r1", "--sglang-url", sim.url,
            "--draft-vocab-size", "16"]  # fmt: skip
    first = run_cli(base)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"tokenizer agreement: {len(CANARIES)} canaries give the same ids" in first.stderr

    folder = copy_standin(standin_dir, tmp_path / "tok")
    swap_byte_ranks(folder)
    # the same run continued with a changed tokenizer: with the tampered copy, the server's check would
    # already stop it, so the rerun goes to a server without a tokenizer (skipped, said once) to reach the plan
    with SimServerThread(SimConfig().with_profile("instant")) as bare:
        args = ["--prompts", str(src), "--output", str(out), "--run-id", "r1", "--sglang-url", bare.url,
                "--draft-vocab-size", "16", "--tokenizer", str(folder)]  # fmt: skip
        rerun = run_cli(args)
    assert rerun.returncode == 1, rerun.stderr[-3000:]
    [line] = [line for line in rerun.stderr.splitlines() if "error:" in line]
    assert "run r1 was made with another tokenizer" in line and "tiktoken.model" in line, line
