"""Preflight: the client's tokenizer must give the ids the server's own tokenizer gives.

The pipeline renders and tokenizes prompts itself and sends `input_ids`; the server never sees the text. A client
tokenizer that differs from the one the server loaded (a look-alike class for the same `model_type`, an older
`tiktoken.model`, another template) would give prompt ids the model's own tokenizer never produces, and nothing
downstream would notice. So, where an endpoint loads a tokenizer, a few canary conversations (plain, system
prompt, tools, multilingual, a prior assistant turn with reasoning: tokenization/canaries.py) are rendered by the
client in every mode the run sends (thinking, and instant with its template variables, `thinking=False` for K2.5:
a template that differs only there would pass a thinking-only check) and encoded by the run's own encoder (the one
its tokenize stage uses: LoadedTokenizer.encoder(), so the ids compared are the ids the run sends), and compared
with the server's ids, asked one of two ways:
- `messages`: SGLang's `/v1/tokenize` with chat `messages` (0.5.23: the chat endpoint's own rendering,
  `add_generation_prompt` and a mode's `chat_template_kwargs` passed to the template, encoded without added special
  tokens): the template and the encoding both checked;
- `prompt`: where `/v1/tokenize` takes no `messages` (SGLang before 0.5.23 refuses the body 400 for its missing
  `prompt`; a gateway may answer 422, or 200 without ids), the client's rendered text encoded by the server
  (`prompt`, `add_special_tokens: false`): the encoding checked, the template only as far as the client renders it.

The modes compared are recorded beside the comparison (`AgreementResult.modes`; the manifest's
validation.tokenizer_check_modes). Verdicts, per endpoint (`EndpointAgreement.check` names the comparison: messages,
prompt, no_tokenizer, unchecked): the same ids on every canary; a mismatch, one line naming the canary (and its
mode), the first differing position and both tokens; no tokenizer (`--skip-tokenizer-init`): nothing to compare, the
check is skipped and said once; or a tokenizer that cannot be asked (no `/v1/tokenize` route, an answer that is not
JSON, neither form answered with ids): that endpoint fails its preflight and is left out with the reason, which
names the setting `allow_unchecked_tokenizer`; with it, the endpoint is used, said once, and recorded `unchecked`. A
mismatch on every endpoint that could be compared is the run's own failure (its tokenizer is not the served one) and
stops it; a mismatch on some replicas while others agree leaves those replicas out: they are the odd ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from eagle_datagen import settings
from eagle_datagen.inference.error_body import error_message
from eagle_datagen.inference.preflight import RunLevelError
from eagle_datagen.modes import THINKING
from eagle_datagen.tokenization.canaries import CANARIES, render_canaries
from eagle_datagen.tokenization.tiktoken_path import own_call

log = logging.getLogger(__name__)
TOKENIZE_PATH = "/v1/tokenize"

Encode = Callable[[Sequence[str]], list[list[int]]]  # texts -> ids: the run's encoder (LoadedTokenizer.encoder())
Comparison = Literal["messages", "prompt", "no_tokenizer", "unchecked"]  # what the manifest records per endpoint
Modes = Mapping[str, Mapping[str, Any]]  # the modes a run sends -> their chat template variables (profile.ModeFacts)
# label -> (messages, tools, template variables): each canary in each mode; thinking's label is the canary's name
Cases = dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None, dict[str, Any]]]


def canary_cases(modes: Modes | None = None) -> Cases:
    """Every canary in every mode (default: thinking alone), labelled `plain`, `plain (instant mode)`, ..."""
    cases: Cases = {}
    for mode, kwargs in (modes or {THINKING: {}}).items():
        for name, (messages, tools) in CANARIES.items():
            cases[name if mode == THINKING else f"{name} ({mode} mode)"] = (messages, tools, dict(kwargs))
    return cases


def render_cases(tokenizer: Any, modes: Modes | None = None) -> dict[str, str]:
    """The client's rendering of `canary_cases(modes)`, with the same labels."""
    texts: dict[str, str] = {}
    for mode, kwargs in (modes or {THINKING: {}}).items():
        for name, text in render_canaries(tokenizer, dict(kwargs)).items():
            texts[name if mode == THINKING else f"{name} ({mode} mode)"] = text
    return texts


@dataclass(frozen=True)
class AgreementResult:
    """The endpoints to leave out (with why) and, for the others, which comparison was made (`Comparison`)."""

    left_out: dict[str, str]
    checks: dict[str, str]
    modes: tuple[str, ...] = (THINKING,)  # the modes whose renderings were compared


# (session, the endpoints that passed the rest of the preflight) -> what to leave out, how the rest were checked
AgreementCheck = Callable[[aiohttp.ClientSession, list[str]], Awaitable[AgreementResult]]


def client_ids(
    tokenizer: Any, encode: Encode | None = None, texts: dict[str, str] | None = None
) -> dict[str, list[int]]:
    """The canaries' prompt ids as the run makes them: the tokenizer's rendering (`texts`, rendered here when not
    given), encoded in one batch by `encode` (the run's encoder; default: the tokenizer's own call)."""
    texts = texts if texts is not None else render_canaries(tokenizer)
    encoded = encode(list(texts.values())) if encode else own_call(tokenizer, list(texts.values()))
    return dict(zip(texts, (list(ids) for ids in encoded), strict=True))


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


@dataclass(frozen=True)
class ServerAnswer:
    """The server's ids of one canary, or None, why not and whether the other form may still be asked
    (`refused`: the body was refused as invalid, 400/422, or answered without ids: the form is not taken)."""

    ids: list[int] | None
    why: str = ""
    refused: bool = False


async def _server_ids(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> ServerAnswer:
    """The server's ids for one /v1/tokenize body."""
    async with session.post(url.rstrip("/") + TOKENIZE_PATH, json=body) as response:
        raw = await response.read()
        status = response.status
    if status in (404, 405):
        return ServerAnswer(None, f"it has no {TOKENIZE_PATH} route ({status})")
    try:
        answer = json.loads(raw)
    except ValueError:
        text = raw[:80].decode(errors="replace").strip()
        return ServerAnswer(None, f"{TOKENIZE_PATH} answered {status} with {text!r}, not JSON")
    if status in (400, 422):  # a validation error: this form of the body is not taken
        return ServerAnswer(None, f"{TOKENIZE_PATH} answered {status} ({error_message(raw)[:200]})", refused=True)
    if status != 200:
        return ServerAnswer(None, f"{TOKENIZE_PATH} answered {status} ({error_message(raw)[:200]})")
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        return ServerAnswer(None, f"{TOKENIZE_PATH} answered without a list of token ids", refused=True)
    return ServerAnswer(tokens)


def messages_body(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, template_kwargs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A `messages` body; a mode's template variables as the chat endpoints take them (`chat_template_kwargs`)."""
    body: dict[str, Any] = {"messages": messages, "add_generation_prompt": True}
    if template_kwargs:
        body["chat_template_kwargs"] = template_kwargs
    return body | {"tools": tools} if tools else body


def prompt_body(text: str) -> dict[str, Any]:
    """The client's rendered canary, encoded by the server as the client encodes it (no added special tokens)."""
    return {"prompt": text, "add_special_tokens": False}


@dataclass(frozen=True)
class EndpointAgreement:
    """One endpoint's verdict: `agrees`, `skipped` (no tokenizer), `unchecked` (it cannot be asked) or `mismatch`
    (with why); `check`: the comparison made (messages, prompt) or none (no_tokenizer, unchecked)."""

    url: str
    verdict: Literal["agrees", "skipped", "unchecked", "mismatch"]
    why: str = ""
    difference: tuple[str, list[int], list[int], str | None] | None = None  # canary, client ids, server's, its text
    check: Comparison = "unchecked"
    cause: str = ""  # unchecked: why the endpoint cannot be asked

    def describe(self, tokenizer: Any, fix: str) -> str:
        assert self.difference is not None
        canary, client, server, server_text = self.difference
        line = describe_mismatch(self.url, canary, client, server, tokenizer, server_text, fix)
        if self.check == "prompt":  # the server encoded the client's text: say so, it reads differently
            line = line.replace(" differently", " (the client's rendered text, sent as prompt) differently", 1)
        return line


def unchecked_reason(url: str, why: str, front_end: str = "cli") -> str:
    """One line: the endpoint cannot be asked, and the fixes: serve the route, or the setting that lets the run
    (or evaluation) go on without the check."""
    return (
        f"SGLang at {url} loads a tokenizer, but {why}: the client's tokenizer cannot be compared with it; serve "
        f"{TOKENIZE_PATH} (SGLang 0.5.23 takes messages, earlier ones a prompt), or set "
        f"{settings.named('allow_unchecked_tokenizer', front_end)} to use it unchecked"
    )


async def check_endpoint_agreement(
    session: aiohttp.ClientSession,
    url: str,
    tokenizer: Any,
    expected: dict[str, list[int]],
    texts: dict[str, str] | None = None,
    front_end: str = "cli",
    cases: Cases | None = None,
) -> EndpointAgreement:
    """The endpoint's canary ids against the client's (`expected`, of the client's rendered `texts`), for each of
    `cases` (default: the canaries in thinking mode): through `messages`, or through `prompt` where the endpoint
    does not take messages."""
    cases = cases if cases is not None else canary_cases()
    texts = texts if texts is not None else render_cases(tokenizer)
    check: Comparison = "messages"
    try:
        info = await _server_info(session, url)
        if info.get("skip_tokenizer_init") is True:
            return EndpointAgreement(
                url, "skipped", f"SGLang at {url} runs with --skip-tokenizer-init", None, "no_tokenizer"
            )
        for name, (messages, tools, kwargs) in cases.items():
            answer = await _server_ids(
                session,
                url,
                messages_body(messages, tools, kwargs) if check == "messages" else prompt_body(texts[name]),
            )
            if answer.ids is None and answer.refused and check == "messages":
                check = "prompt"  # no messages here (SGLang before 0.5.23, a gateway): the client's text instead
                refusal = answer.why
                answer = await _server_ids(session, url, prompt_body(texts[name]))
                if answer.ids is not None:
                    log.info(
                        "SGLang at %s takes no messages in %s (%s): comparing the client's rendered canaries as prompt",
                        url,
                        TOKENIZE_PATH,
                        refusal,
                    )
            if answer.ids is None:
                why = unchecked_reason(url, answer.why, front_end)
                return EndpointAgreement(url, "unchecked", why, cause=answer.why)
            if answer.ids != expected[name]:
                server = answer.ids
                position = first_difference(expected[name], server)
                text = await _server_text(session, url, server[position]) if position < len(server) else None
                return EndpointAgreement(url, "mismatch", "", (name, expected[name], server, text), check)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # it passed its preflight: say how this failed
        cause = f"{TOKENIZE_PATH} failed ({' '.join(f'{type(exc).__name__} {exc}'.split())[:200]})"
        return EndpointAgreement(url, "unchecked", unchecked_reason(url, cause, front_end), cause=cause)
    return EndpointAgreement(url, "agrees", check=check)


def agreement_check(
    tokenizer: Any,
    front_end: str = "cli",
    encode: Encode | None = None,
    allow_unchecked: bool = False,
    modes: Modes | None = None,
) -> AgreementCheck:
    """The preflight hook: every endpoint's tokenizer against the client's, the client's ids by `encode` (the
    run's encoder; default: the tokenizer's own call), the canaries rendered in each of `modes` (the modes the run
    sends, with their template variables; default: thinking). Returns the endpoints to leave out, with why, the
    comparison made on each of the others and the modes compared; raises RunLevelError when every endpoint that
    could be compared disagrees. `allow_unchecked`: an endpoint that cannot be asked is used (recorded
    `unchecked`), not left out."""
    cases = canary_cases(modes)
    compared = tuple(modes or (THINKING,))

    async def check(session: aiohttp.ClientSession, urls: list[str]) -> AgreementResult:
        texts = render_cases(tokenizer, modes)  # once, for the client's ids and the servers' `prompt` form alike
        expected = client_ids(tokenizer, encode, texts)
        verdicts = await asyncio.gather(
            *(
                check_endpoint_agreement(session, url, tokenizer, expected, texts, front_end, cases)
                for url in urls
            )
        )
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
                "tokenizer agreement: %d canaries give the same ids on %d endpoint(s) (%s); rendered in %s",
                len(expected),
                len(agreeing),
                ", ".join(f"{v.url} through {v.check}" for v in agreeing),
                " and ".join(f"{mode} mode" for mode in compared),
            )
        unchecked = by_verdict.get("unchecked", [])
        if unchecked and allow_unchecked:
            log.warning(
                "tokenizer check: %d endpoint(s) used unchecked (%s): %s",
                len(unchecked),
                settings.named("allow_unchecked_tokenizer", front_end),
                "; ".join(f"{v.url}: {v.cause}" for v in unchecked),
            )
        used = agreeing + by_verdict.get("skipped", []) + (unchecked if allow_unchecked else [])
        left_out = {} if allow_unchecked else {v.url: v.why for v in unchecked}
        left_out |= {v.url: v.describe(tokenizer, REPLICA_FIX) for v in mismatched}
        checks = {v.url: v.check for v in sorted(used, key=lambda v: urls.index(v.url))}
        return AgreementResult(left_out, checks, compared)

    return check
