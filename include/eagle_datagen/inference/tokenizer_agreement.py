"""Preflight: the client's tokenizer must give the ids the server's own tokenizer gives.

The pipeline renders and tokenizes prompts itself and sends `input_ids`; the server never sees the text. A client
tokenizer that differs from the one the server loaded (a look-alike class for the same `model_type`, an older
`tiktoken.model`, another template) would give prompt ids the model's own tokenizer never produces, and nothing
downstream would notice. So, where an endpoint loads a tokenizer, a few canary conversations (plain, system
prompt, tools, multilingual, a prior assistant turn with reasoning: tokenization/canaries.py) are rendered and
encoded by the server through SGLang's `/v1/tokenize` with `messages` (0.5.23: the chat endpoint's own rendering,
`add_generation_prompt` passed to the template, encoded without added special tokens), and compared with the
client's ids, encoded as the pipeline encodes (tokenize.py).

Verdicts, per endpoint: the same ids on every canary; a mismatch, one line naming the canary, the first differing
position and both tokens; no tokenizer (`--skip-tokenizer-init`): nothing to compare, the check is skipped and said
once; or a tokenizer that cannot be asked (no `/v1/tokenize`, another answer than 200, no id list): that endpoint
fails its preflight and is left out with the reason, as other per-endpoint failures are (inference/preflight.py).
A mismatch on every endpoint that could be compared is the run's own failure (its tokenizer is not the served one)
and stops it; a mismatch on some replicas while others agree leaves those replicas out: they are the odd ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from eagle_datagen import settings
from eagle_datagen.inference.error_body import error_message
from eagle_datagen.inference.preflight import RunLevelError
from eagle_datagen.tokenization.canaries import CANARIES

log = logging.getLogger(__name__)
TOKENIZE_PATH = "/v1/tokenize"

# (session, the endpoints that passed the rest of the preflight) -> {endpoint to leave out: why}
AgreementCheck = Callable[[aiohttp.ClientSession, list[str]], Awaitable[dict[str, str]]]


def client_ids(tokenizer: Any) -> dict[str, list[int]]:
    """The canaries' prompt ids as the pipeline makes them: the tokenizer's own rendering, encoded in one batch."""
    names = list(CANARIES)
    texts = [
        tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        for messages, tools in CANARIES.values()
    ]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return dict(zip(names, (list(ids) for ids in encoded), strict=True))


def first_difference(client: list[int], server: list[int]) -> int | None:
    for position, (a, b) in enumerate(zip(client, server, strict=False)):
        if a != b:
            return position
    return None if len(client) == len(server) else min(len(client), len(server))


def run_fix(front_end: str = "cli") -> str:
    """What to do when no endpoint serves the client's tokenizer, in the words of the front end that runs."""
    return (
        f"point {settings.named('tokenizer', front_end)} at the folder the server loads (with "
        f"{settings.named('trust_remote_code', front_end)} where it ships code)"
    )


RUN_FIX = run_fix()
REPLICA_FIX = "the other endpoints agree with the client: this one serves another tokenizer"


def describe_mismatch(
    url: str,
    canary: str,
    client: list[int],
    server: list[int],
    tokenizer: Any,
    server_text: str | None = None,
    fix: str = RUN_FIX,
) -> str:
    """One line: the canary, the first differing position, the client's token and the server's (as the server
    decodes it, when it said), and `fix`."""
    position = first_difference(client, server)
    assert position is not None

    def token(ids: list[int], text: str | None) -> str:
        if position >= len(ids):
            return "the end of the prompt"
        return f"{ids[position]} {text if text is not None else tokenizer.decode([ids[position]])!r}"

    return (
        f"SGLang at {url} tokenizes canary {canary!r} differently from this run's tokenizer: first difference at "
        f"position {position} of {len(client)}: client {token(client, None)}, server {token(server, server_text)}; "
        + fix
    )


async def _server_text(session: aiohttp.ClientSession, url: str, token_id: int) -> str | None:
    """The server's own reading of one of its ids (SGLang's /v1/detokenize), or None."""
    try:
        async with session.post(
            url.rstrip("/") + "/v1/detokenize", json={"tokens": [token_id], "skip_special_tokens": False}
        ) as response:
            if response.status != 200:
                return None
            text = (await response.json(content_type=None)).get("text")
    except (aiohttp.ClientError, ValueError, AttributeError):
        return None
    return text if isinstance(text, str) else None


async def _server_info(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    for path in ("/server_info", "/get_server_info"):
        async with session.get(url.rstrip("/") + path) as response:
            if response.status == 200:
                answer = await response.json(content_type=None)
                return answer if isinstance(answer, dict) else {}
    return {}


async def _server_ids(
    session: aiohttp.ClientSession, url: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[list[int] | None, str]:
    """The server's ids of one canary, or None and why it could not say."""
    body: dict[str, Any] = {"messages": messages, "add_generation_prompt": True}
    if tools:
        body["tools"] = tools
    async with session.post(url.rstrip("/") + TOKENIZE_PATH, json=body) as response:
        raw = await response.read()
        status = response.status
    if status in (404, 405):
        return None, f"it has no {TOKENIZE_PATH} route ({status})"
    if status != 200:
        return None, f"{TOKENIZE_PATH} answered {status} ({error_message(raw)[:200]})"
    try:
        tokens = json.loads(raw).get("tokens")
    except (ValueError, AttributeError):
        tokens = None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        return None, f"{TOKENIZE_PATH} answered without a list of token ids"
    return tokens, ""


@dataclass(frozen=True)
class EndpointAgreement:
    """One endpoint's verdict: `agrees`, `skipped` (no tokenizer), `unchecked` or `mismatch` (with why)."""

    url: str
    verdict: Literal["agrees", "skipped", "unchecked", "mismatch"]
    why: str = ""
    difference: tuple[str, list[int], list[int], str | None] | None = None  # canary, client ids, server's, its text

    def describe(self, tokenizer: Any, fix: str) -> str:
        assert self.difference is not None
        canary, client, server, server_text = self.difference
        return describe_mismatch(self.url, canary, client, server, tokenizer, server_text, fix)


async def check_endpoint_agreement(
    session: aiohttp.ClientSession, url: str, tokenizer: Any, expected: dict[str, list[int]]
) -> EndpointAgreement:
    """The endpoint's canary ids against the client's (`expected`)."""
    try:
        info = await _server_info(session, url)
        if info.get("skip_tokenizer_init") is True:
            return EndpointAgreement(url, "skipped", f"SGLang at {url} runs with --skip-tokenizer-init")
        for name, (messages, tools) in CANARIES.items():
            server, why = await _server_ids(session, url, messages, tools)
            if server is None:
                return EndpointAgreement(
                    url,
                    "unchecked",
                    f"SGLang at {url} loads a tokenizer, but {why}: the client's tokenizer cannot be compared with it "
                    f"(SGLang 0.5.23 or later answers {TOKENIZE_PATH} with messages)",
                )
            if server != expected[name]:
                position = first_difference(expected[name], server)
                text = await _server_text(session, url, server[position]) if position < len(server) else None
                return EndpointAgreement(url, "mismatch", "", (name, expected[name], server, text))
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # it passed its preflight: say how this failed
        detail = " ".join(f"{type(exc).__name__} {exc}".split())[:200]
        return EndpointAgreement(url, "unchecked", f"SGLang at {url}: {TOKENIZE_PATH} failed ({detail})")
    return EndpointAgreement(url, "agrees")


def agreement_check(tokenizer: Any, front_end: str = "cli") -> AgreementCheck:
    """The preflight hook: every endpoint's tokenizer against the client's. Returns the endpoints to leave out,
    with why; raises RunLevelError when every endpoint that could be compared disagrees."""

    async def check(session: aiohttp.ClientSession, urls: list[str]) -> dict[str, str]:
        expected = client_ids(tokenizer)
        verdicts = await asyncio.gather(*(check_endpoint_agreement(session, url, tokenizer, expected) for url in urls))
        by_verdict: dict[str, list[EndpointAgreement]] = {}
        for verdict in verdicts:
            by_verdict.setdefault(verdict.verdict, []).append(verdict)
        mismatched, agreeing = by_verdict.get("mismatch", []), by_verdict.get("agrees", [])
        if mismatched and not agreeing:  # no endpoint agrees: the client's tokenizer is not the served one
            raise RunLevelError(mismatched[0].describe(tokenizer, run_fix(front_end)))
        if by_verdict.get("skipped"):
            log.warning("tokenizer agreement check skipped: %s", "; ".join(v.why for v in by_verdict["skipped"]))
        if agreeing:
            log.info(
                "tokenizer agreement: %d canaries give the same ids on %d endpoint(s)", len(expected), len(agreeing)
            )
        left_out = {v.url: v.why for v in by_verdict.get("unchecked", [])}
        return left_out | {v.url: v.describe(tokenizer, REPLICA_FIX) for v in mismatched}

    return check
