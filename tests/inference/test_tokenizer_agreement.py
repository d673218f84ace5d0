"""The preflight compares the client's canary ids (by the run's encoder) with the server's own (SGLang's
/v1/tokenize with messages, or with the client's rendered text as prompt where it takes no messages), here against
serve-sim loading the remote-code stand-in as SGLang does (--trust-remote-code); the real engine's side is
tests/engine/test_tokenizer_agreement_real_engine.py. A run against serve-sim goes through it too, and a rerun with
a tampered tokenizer is refused; an endpoint that cannot be asked is refused naming allow_unchecked_tokenizer, and
with it the run goes on and its manifest says unchecked."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import aiohttp
import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.preflight import EndpointVerdicts, RunLevelError, judge_endpoints
from eagle_datagen.inference.tokenizer_agreement import (
    AgreementResult,
    agreement_check,
    client_ids,
    first_difference,
    unchecked_reason,
)
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.storage.manifest import read_manifest
from eagle_datagen.storage.output_root import open_output_root
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


def checked(urls: list[str], tokenizer, **how) -> AgreementResult:
    """What the check leaves out (with why) and how it compared the others."""

    async def go() -> AgreementResult:
        async with aiohttp.ClientSession() as session:
            return await agreement_check(tokenizer, **how)(session, urls)

    return asyncio.run(go())


def check(urls: list[str], tokenizer, **how) -> dict[str, str]:
    """The endpoints the check leaves out, with why."""
    return checked(urls, tokenizer, **how).left_out


def judge(urls: list[str], tokenizer, profile, **how) -> EndpointVerdicts:
    """The whole per-endpoint preflight (no canary generation), the agreement check included."""
    agreement = agreement_check(tokenizer, **how)
    return asyncio.run(judge_endpoints(urls, profile, "moonshotai/Kimi-K2.5", None, wait_s=5, agreement=agreement))


def sim_config(api: str, tokenizer_path: str = "standin:kimi-k2.5") -> SimConfig:
    """serve-sim with the stand-in, its /v1/tokenize as SGLang 0.5.23 (messages), an earlier one (prompt) or none."""
    return dataclasses.replace(SimConfig(tokenizer_path=tokenizer_path).with_profile("instant"), tokenize_api=api)


@pytest.fixture(scope="module")
def prompt_only():
    """An SGLang before 0.5.23: /v1/tokenize takes a prompt, refuses a body without one (400)."""
    with SimServerThread(sim_config("prompt")) as server:
        yield server


@pytest.fixture(scope="module")
def odd_replica(tmp_path_factory, standin_dir):
    """A replica serving a copy of the stand-in whose "?" and "@" ranks are swapped: one token off."""
    folder = copy_standin(standin_dir, tmp_path_factory.mktemp("odd") / "tok")
    swap_byte_ranks(folder)
    with SimServerThread(SimConfig(tokenizer_path=str(folder)).with_profile("instant")) as server:
        yield server


def test_the_same_tokenizer_agrees_on_every_canary(sim, tokenizer, caplog):
    before = sim.stats()["polls"].get("POST /v1/tokenize", 0)
    with caplog.at_level(logging.INFO):
        assert checked([sim.url], tokenizer) == AgreementResult({}, {sim.url: "messages"})
    assert f"{len(CANARIES)} canaries give the same ids on 1 endpoint(s) ({sim.url} through messages)" in caplog.text
    assert sim.stats()["polls"].get("POST /v1/tokenize") - before == len(CANARIES)


def test_an_endpoint_without_messages_is_checked_through_prompt(prompt_only, tokenizer, caplog):
    """SGLang before 0.5.23 refuses `messages` (400, `prompt` is required): the client's rendered canaries go as
    `prompt`, encoded without added special tokens, and are compared with the client's ids."""
    before = prompt_only.stats()["polls"].get("POST /v1/tokenize", 0)
    with caplog.at_level(logging.INFO):
        assert checked([prompt_only.url], tokenizer) == AgreementResult({}, {prompt_only.url: "prompt"})
    assert f"({prompt_only.url} through prompt)" in caplog.text
    assert "takes no messages in /v1/tokenize (/v1/tokenize answered 400" in caplog.text
    # one refused messages body, then every canary as prompt
    assert prompt_only.stats()["polls"].get("POST /v1/tokenize") - before == 1 + len(CANARIES)


def test_a_mismatch_through_prompt_is_still_caught(prompt_only, standin_dir, tmp_path, kimi_profile):
    folder = copy_standin(standin_dir, tmp_path / "tok")
    question, at = swap_byte_ranks(folder)
    client = load_tokenizer(str(folder), kimi_profile, trust_remote_code=True).tokenizer
    with pytest.raises(RunLevelError) as info:
        check([prompt_only.url], client)
    line = str(info.value)
    assert "\n" not in line and "the client's rendered text, sent as prompt" in line, line
    assert "canary 'plain'" in line and f"client {at} '?'" in line and f"server {question} '?'" in line, line


def test_the_client_ids_are_the_run_encoders(sim, tokenizer, odd_replica, kimi_profile):
    """The ids compared are those of the encoder the run uses, not the tokenizer's own call: an encoder that gives
    other ids than the served tokenizer is caught although the tokenizer's own call agrees."""
    odd = load_tokenizer(odd_replica.config.tokenizer_path, kimi_profile, trust_remote_code=True).tokenizer

    def odd_encoder(texts):
        return [list(ids) for ids in odd(list(texts), add_special_tokens=False)["input_ids"]]

    assert check([sim.url], tokenizer) == {}  # the tokenizer's own call agrees with the server
    with pytest.raises(RunLevelError, match="tokenizes canary 'plain' differently"):
        check([sim.url], tokenizer, encode=odd_encoder)


def test_with_the_fast_path_the_canaries_go_through_it(sim, kimi_profile):
    """The run's encoder (LoadedTokenizer.encoder()) with the tiktoken fast path opted in encodes the canaries."""
    loaded = load_tokenizer("standin:kimi-k2.5", kimi_profile, trust_remote_code=True, tiktoken_fast_path=True)
    assert loaded.tiktoken_encoding is not None  # the stand-in's fast path is proven: the run would use it
    encoder = loaded.encoder()
    assert checked([sim.url], loaded.tokenizer, encode=encoder) == AgreementResult({}, {sim.url: "messages"})
    assert encoder.seen == len(CANARIES)  # every canary went through the fast path


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


def test_a_server_with_a_tokenizer_but_no_tokenize_route_is_refused_naming_the_setting(sim, tokenizer, kimi_profile):
    """Not a skip: only a server without a tokenizer goes unchecked by itself (a gateway may not pass the route on)."""
    with SimServerThread(sim_config("none")) as server:
        verdicts = judge([sim.url, server.url], tokenizer, kimi_profile)
        assert [s.url for s in verdicts.servers] == [sim.url] and verdicts.tokenizer_check == {sim.url: "messages"}
        [left] = verdicts.left_out
        assert left.url == server.url and "loads a tokenizer, but it has no /v1/tokenize route (404)" in left.reason
        with pytest.raises(ConfigError) as info:  # alone, it is the run's only endpoint: the run stops
            judge([server.url], tokenizer, kimi_profile)
    line = str(info.value)
    assert "\n" not in line and "the client's tokenizer cannot be compared with it" in line
    assert "set --allow-unchecked-tokenizer to use it unchecked" in line, line


def test_with_the_setting_an_endpoint_that_cannot_be_asked_is_used_unchecked(sim, tokenizer, kimi_profile, caplog):
    with SimServerThread(sim_config("none")) as server, caplog.at_level(logging.INFO):
        verdicts = judge([sim.url, server.url], tokenizer, kimi_profile, allow_unchecked=True)
    assert [s.url for s in verdicts.servers] == [sim.url, server.url] and verdicts.left_out == []
    assert verdicts.tokenizer_check == {sim.url: "messages", server.url: "unchecked"}
    [line] = [r.getMessage() for r in caplog.records if "unchecked" in r.getMessage()]
    assert line.startswith("tokenizer check: 1 endpoint(s) used unchecked (--allow-unchecked-tokenizer)"), line
    assert f"{server.url}: it has no /v1/tokenize route (404)" in line


def test_the_refusal_names_the_setting_as_airflow_sets_it():
    line = unchecked_reason("http://h:1", "it has no /v1/tokenize route (404)", "airflow")
    assert "set the SGLang connection's extra 'allow_unchecked_tokenizer' to use it unchecked" in line, line


def test_a_run_against_serve_sim_checks_agreement_and_a_tampered_rerun_is_refused(sim, standin_dir, tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}?") for i in range(4)])
    out = tmp_path / "out"
    base = ["--prompts", str(src), "--output", str(out), "--run-id", "r1", "--sglang-url", sim.url,
            "--draft-vocab-size", "16"]  # fmt: skip
    first = run_cli(base)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"tokenizer agreement: {len(CANARIES)} canaries give the same ids" in first.stderr
    assert read_manifest(open_output_root(str(out)), "r1")["validation"]["tokenizer_check"] == {sim.url: "messages"}

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


def test_runs_against_endpoints_that_take_no_messages_or_cannot_be_asked(prompt_only, tmp_path):
    """Through `eagle-datagen run`: a prompt-only endpoint is checked through prompt; one without the route is
    refused in one line naming the setting; with it the run completes and its manifest says unchecked."""
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}?") for i in range(4)])

    def args(run_id: str, url: str) -> list[str]:
        return ["--prompts", str(src), "--output", str(tmp_path / "out"), "--run-id", run_id, "--sglang-url", url,
                "--draft-vocab-size", "16"]  # fmt: skip

    def tokenizer_check(run_id: str) -> dict[str, str]:
        return read_manifest(open_output_root(str(tmp_path / "out")), run_id)["validation"]["tokenizer_check"]

    prompted = run_cli(args("p1", prompt_only.url))
    assert prompted.returncode == 0, prompted.stderr[-3000:]
    assert f"({prompt_only.url} through prompt)" in prompted.stderr
    assert tokenizer_check("p1") == {prompt_only.url: "prompt"}

    with SimServerThread(sim_config("none")) as bare:
        refused = run_cli(args("n1", bare.url))
        assert refused.returncode != 0
        [line] = [line for line in refused.stderr.splitlines() if "error:" in line]
        assert "it has no /v1/tokenize route (404)" in line and "set --allow-unchecked-tokenizer" in line, line
        unchecked = run_cli(args("n2", bare.url) + ["--allow-unchecked-tokenizer"])
    assert unchecked.returncode == 0, unchecked.stderr[-3000:]
    assert unchecked.stderr.count("used unchecked (--allow-unchecked-tokenizer)") == 1
    assert tokenizer_check("n2") == {bare.url: "unchecked"}
