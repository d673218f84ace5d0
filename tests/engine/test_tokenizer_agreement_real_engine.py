"""The real SGLang 0.5.23 engine serving the tiny model whose folder holds the remote-code Kimi stand-in tokenizer,
started without --skip-tokenizer-init and with --trust-remote-code (as Kimi-K2.5 is served): the server loads
our tokenization_kimi.TikTokenTokenizer through transformers' remote-code path, its /v1/tokenize renders the
canaries through that code, and the preflight's agreement check runs for real: a run passes it, a client
tokenizer one token off is stopped. The comparison through `prompt` (for servers whose /v1/tokenize takes no
messages) is checked against the real server too: the client's rendered canaries, encoded by it without added
special tokens, are the client's ids."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
import requests

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.tokenizer_agreement import (
    AgreementResult,
    agreement_check,
    client_ids,
    prompt_body,
)
from eagle_datagen.tokenization.canaries import CANARIES, render_canaries
from eagle_datagen.tokenization.loader import load_tokenizer
from eagle_datagen_stack.sglang_engine import ServerOptions
from engine_support import published_rows, real_servers
from generation_runs import run_cli
from standin_variants import copy_standin, swap_byte_ranks

from conftest import user_record, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.engine]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    options = ServerOptions(skip_tokenizer_init=False)
    with real_servers(tmp_path_factory.mktemp("sglang-logs"), options) as [(server, proxy)]:
        yield server, proxy


def check(url: str, tokenizer) -> AgreementResult:
    async def go() -> AgreementResult:
        async with aiohttp.ClientSession() as session:
            return await agreement_check(tokenizer)(session, [url])

    return asyncio.run(go())


def test_the_server_tokenizes_the_canaries_through_the_remote_code_as_the_client(engine, tokenizer):
    server, _ = engine
    info = requests.get(f"{server.url}/server_info", timeout=10).json()
    assert info["skip_tokenizer_init"] is False and info["trust_remote_code"] is True
    expected = client_ids(tokenizer)
    for name, (messages, tools) in CANARIES.items():
        body = {"messages": messages, "add_generation_prompt": True} | ({"tools": tools} if tools else {})
        answer = requests.post(f"{server.url}/v1/tokenize", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["tokens"] == expected[name], name
    assert check(server.url, tokenizer) == AgreementResult({}, {server.url: "messages"})


def test_the_prompt_comparison_agrees_with_the_real_server(engine, tokenizer, kimi_profile):
    """What the check sends where /v1/tokenize takes no messages: the client's rendered text as `prompt`, no added
    special tokens; the real server's ids are the client's, by the own call and by the fast path alike."""
    server, _ = engine
    texts = render_canaries(tokenizer)
    fast = load_tokenizer("standin:kimi-k2.5", kimi_profile, trust_remote_code=True, tiktoken_fast_path=True)
    for expected in (client_ids(tokenizer), client_ids(tokenizer, fast.encoder())):
        for name, text in texts.items():
            answer = requests.post(f"{server.url}/v1/tokenize", json=prompt_body(text), timeout=60)
            assert answer.status_code == 200, answer.text
            assert answer.json()["tokens"] == expected[name], name


def test_a_run_passes_the_agreement_check(engine, tmp_path):
    _, proxy = engine
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}: why?") for i in range(3)])
    out = tmp_path / "out"
    # the default draft vocabulary: the tiny model may answer all three badly (quarantined, no trained tokens),
    # which skips it with a warning, where an explicit size would fail a run this test is not about
    args = ["--prompts", str(src), "--output", str(out), "--run-id", "agree", "--max-new-tokens", "96",
            "--sglang-url", proxy.url]  # fmt: skip
    result = run_cli(args, timeout_s=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"tokenizer agreement: {len(CANARIES)} canaries give the same ids on 1 endpoint(s)" in result.stderr
    rows = published_rows(out, "agree")
    assert len(rows["data"]) + len(rows["quarantine"]) == 3


def test_a_client_tokenizer_one_token_off_is_stopped(engine, standin_dir, tmp_path, kimi_profile):
    server, _ = engine
    folder = copy_standin(standin_dir, tmp_path / "tok")
    question, at = swap_byte_ranks(folder)
    client = load_tokenizer(str(folder), kimi_profile, trust_remote_code=True).tokenizer
    with pytest.raises(ConfigError) as info:
        check(server.url, client)
    line = str(info.value)
    assert "canary 'plain'" in line and f"client {at} '?'" in line and f"server {question} '?'" in line, line
