"""Preflight: check every SGLang endpoint before a single prompt is sent.

1. `/health_generate` answers 200 (waits a little while the server is still starting);
2. `/get_model_info` serves the configured model;
3. `/server_info` (`/get_server_info` on older servers) reports the version (0.5.0-0.5.4 echo the prompt
   tail into output_ids), the number of running slots, which sizes the client's concurrency window, and
   whether the server runs with `--enable-deterministic-inference`: without it SGLang ignores
   `sampling_seed`, so the run says once that its samples are not reproducible by seed;
   Every server argument in the server checklist (server_flags.py, docs/server-checklist.md) is judged from
   the same answer: a refused one leaves the endpoint out, a warned one is logged;
4. a canary generation ends in the EOS, carries `</think>` and no `<think>`, and counts its own tokens.
Each endpoint is judged on its own (`judge_endpoints`): one that fails a check is left out of the run with a
warning naming it and the reason, and the run goes on with the others; it stops, with one line naming every
endpoint left out and why, only when fewer than `min_endpoints` pass, or at once when the failure is the
run's own (`RunLevelError`: its sampling parameters, its chat template), which no other endpoint would pass
either. A server that is only busy or flaky is not left out: transient failures (503, 429, 408, other 5xx,
HTTP-200 aborts, dropped connections) are retried, and a canary that fails a content check is sent again with
another seed, so one odd sample (which a run would simply quarantine) is not taken for a misconfiguration.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.access import NO_ACCESS, REFUSED_STATUSES, KeyRefused, ServerAccess
from eagle_datagen.inference.error_body import error_message
from eagle_datagen.inference.fleet import SERVER, Fleet, find_fleet
from eagle_datagen.inference.retry import RetryPolicy, failure_from_status
from eagle_datagen.inference.server_flags import SERVER_FLAGS, judge_server_flags
from eagle_datagen.profile import ModelProfile

log = logging.getLogger(__name__)
ECHO_BUG_VERSIONS = re.compile(r"^v?0\.5\.[0-4](\D|$)")
_USERINFO = re.compile(r"//[^/?#]*@")
# Attempts per preflight request for transient failures; backoff as for generation requests.
PREFLIGHT_RETRY = RetryPolicy(max_attempts=5, base_delay_s=0.5, max_delay_s=4.0)
CANARY_TRIES = 3  # canaries (each with its own seed) that must all fail a content check to stop the run
SEED_REPRODUCIBLE = "reproducible: the server runs with --enable-deterministic-inference"
# /server_info keys that change what a sample is drawn from or how: recorded per server in the plan and manifest
SAMPLING_SETTINGS = (
    "enable_deterministic_inference",
    "random_seed",
    "sampling_backend",
    "sampling_defaults",
    "preferred_sampling_params",
    "enable_custom_logit_processor",
    "enable_watermark",
    "watermark_default_enabled",
    "watermark_enforce_all",
    "speculative_algorithm",
    "dtype",
    "quantization",
    "kv_cache_dtype",
)
SEED_NOT_REPRODUCIBLE = (
    "not reproducible: the server runs without --enable-deterministic-inference, so SGLang ignores sampling_seed"
)


class RunLevelError(ConfigError):
    """A preflight failure that is the run's own, not the endpoint's: the run stops whatever the others say."""


class _Transient(Exception):
    """A preflight request failed in a way that another attempt can cure."""


async def _retried(url: str, what: str, call: Callable[[int], Awaitable[Any]]) -> Any:
    """`call(attempt)` until it returns, retrying transient failures; after the last attempt one ConfigError
    line."""
    rng = random.Random()
    for attempt in range(1, PREFLIGHT_RETRY.max_attempts + 1):
        try:
            return await call(attempt)
        except TimeoutError:  # the session's timeout is long: waiting that long again would not help
            raise ConfigError(f"SGLang at {url} did not answer {what} in time: check that it is not stuck") from None
        except (_Transient, aiohttp.ClientError) as exc:
            problem = str(exc) if isinstance(exc, _Transient) else f"{type(exc).__name__}: {exc}"
            if attempt == PREFLIGHT_RETRY.max_attempts:
                raise ConfigError(
                    f"SGLang at {url} kept failing {what} ({attempt} attempts, last: {problem[:200]}): check that "
                    "it is healthy and not overloaded, then run again"
                ) from None
            log.warning("SGLang at %s failed %s (%s); retrying", url, what, problem[:200])
            await asyncio.sleep(PREFLIGHT_RETRY.delay(attempt, rng))


@dataclass(frozen=True)
class ServerInfo:
    url: str
    model_path: str
    weight_version: str | None
    version: str | None
    max_running_requests: int | None
    warnings: list[str] = field(default_factory=list)
    deterministic_inference: bool = False  # --enable-deterministic-inference: only then is sampling_seed honoured
    sampling_settings: dict[str, Any] = field(default_factory=dict)  # SAMPLING_SETTINGS the server reported
    # what answers behind the URL (inference/fleet.py): a router's workers, or one server
    replicas: int = 1
    slots: int | None = None  # summed over the replicas
    replicas_found_by: str = SERVER

    @property
    def fleet(self) -> Fleet:
        one = self.max_running_requests
        slots = self.slots if self.slots is not None else (one * self.replicas if one else None)
        return Fleet(self.replicas, slots, self.replicas_found_by)

    def window(self, concurrency: int | None = None) -> int:
        """Requests in flight at this URL: `concurrency`, else 1.25 x every slot behind it."""
        return self.fleet.window(concurrency)

    def provenance(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "model_path": self.model_path,
            "weight_version": self.weight_version,
            "sglang_version": self.version,
            "enable_deterministic_inference": self.deterministic_inference,
            "sampling_seed": SEED_REPRODUCIBLE if self.deterministic_inference else SEED_NOT_REPRODUCIBLE,
            "sampling_settings": dict(self.sampling_settings),
            "max_running_requests": self.max_running_requests,
            "replicas": self.replicas,
            "slots": self.fleet.slots,
            "replicas_found_by": self.replicas_found_by,
        }


def check_endpoint_urls(urls: list[str]) -> None:
    """Plain http(s) URLs with a host, and no credentials: a URL is logged and stored in plans and manifests
    (its `user:password@` would be too)."""
    for url in urls:
        shown = _USERINFO.sub("//***@", url)[:200]
        if shown != url[:200]:
            raise ConfigError(
                f"SGLang URL {shown} carries credentials: give the URL without user:password@ "
                "(URLs are logged and stored in plans and manifests)"
            )
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
            good = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            good = False
        if not good or any(c.isspace() or c == "\x00" for c in url):
            raise ConfigError(f"bad SGLang URL {shown!r}: give http://host:port (or https://)")


def same_model(served: str, expected: str) -> bool:
    """A hub id and a local copy of it match on their last path component: /models/Kimi-K2.5 ~ moonshotai/Kimi-K2.5."""
    return PurePosixPath(served.rstrip("/")).name.lower() == PurePosixPath(expected.rstrip("/")).name.lower()


async def _get_json(
    session: aiohttp.ClientSession, url: str, path: str, fallback: str | None = None, optional: bool = False
) -> Any:
    """GET a JSON object; on a 404, `fallback` (an older name of the same endpoint) instead, or None if `optional`."""

    async def get(_attempt: int) -> Any:
        async with session.get(url.rstrip("/") + path) as response:
            if response.status == 404 and (fallback is not None or optional):
                return None
            if response.status in REFUSED_STATUSES:  # the key (access.py): judge_endpoints says where it came from
                raise KeyRefused(url.rstrip("/") + path, response.status)
            if response.status != 200:
                if failure_from_status(response.status, "").transient:
                    raise _Transient(f"{response.status} to GET {path}")
                raise ConfigError(
                    f"SGLang at {url} answered {response.status} to GET {path}: is this an SGLang server?"
                )
            raw = await response.read()
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):  # a proxy's HTML page, say: not worth retrying
            text = raw[:120].decode(errors="replace").strip()
            raise ConfigError(f"SGLang at {url} answered GET {path} with {text!r}, not a JSON object: is this SGLang?")
        return answer

    answer = await _retried(url, f"GET {path}", get)
    if answer is None and fallback is not None:
        return await _get_json(session, url, fallback)
    return answer


async def get_server_info(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """The server's `/server_info` (`/get_server_info` on older servers), transient failures retried; ConfigError
    (one line) when it cannot be read."""
    return await _get_json(session, url, "/server_info", fallback="/get_server_info")


async def find_replicas(
    session: aiohttp.ClientSession,
    url: str,
    server_info: dict[str, Any],
    replicas_behind_url: int | None = None,
    front_end: str = "cli",
) -> Fleet:
    """The replicas and slots behind `url` (inference/fleet.py), from the setting or the router's `/workers`."""
    workers = None
    if not replicas_behind_url:
        try:
            workers = await _get_json(session, url, "/workers", optional=True)  # SGLang itself: 404
        except ConfigError as exc:  # a router whose admin routes want a key, say: counted as one server
            log.info("SGLang at %s: GET /workers unreadable (%s)", url, exc)
    fleet = find_fleet(url, server_info, workers, replicas_behind_url, front_end)
    if fleet.note:
        log.warning(fleet.note)
    log.info("SGLang at %s: %s, window %d", url, fleet.describe(), fleet.window())
    return fleet


async def _wait_healthy(session: aiohttp.ClientSession, url: str, wait_s: float, front_end: str = "cli") -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            async with session.get(url.rstrip("/") + "/health_generate") as response:
                if response.status == 200:
                    return
                if response.status in REFUSED_STATUSES:  # a router that guards its health route too
                    raise KeyRefused(url.rstrip("/") + "/health_generate", response.status)
                problem = f"/health_generate answered {response.status}"
        except aiohttp.ClientError as exc:
            problem = f"cannot connect ({type(exc).__name__}: {exc})"
        if time.monotonic() >= deadline:
            raise ConfigError(
                f"SGLang at {url} is not ready: {problem}; start it, wait until it has loaded, or fix "
                + settings.named("sglang_urls", front_end)
            )
        await asyncio.sleep(1.0)


def check_server_flags(url: str, server_info: dict[str, Any]) -> list[str]:
    """The server checklist (server_flags.SERVER_FLAGS): ConfigError for the first refused argument; the warnings of
    the others, except those the run says once for all its servers (warn_seed_not_reproducible)."""
    verdicts = judge_server_flags(url, server_info)
    for refused in (v for v in verdicts if v.flag.verdict == "refuse"):
        raise ConfigError(refused.line)
    return [v.line for v in verdicts if not v.flag.once_per_run]


def check_canary(url: str, answer: Any, profile: ModelProfile) -> list[str]:
    """Raise ConfigError for a misconfigured server; return warnings for what could not be checked."""
    if isinstance(answer, list) and len(answer) == 1:
        answer = answer[0]
    if not isinstance(answer, dict) or not isinstance(answer.get("output_ids"), list):
        raise ConfigError(f"SGLang at {url} answered the canary without output_ids: is this the native /generate?")
    ids: list[int] = answer["output_ids"]
    meta = answer.get("meta_info") or {}
    finish = (meta.get("finish_reason") or {}).get("type")
    if meta.get("completion_tokens") is not None and meta["completion_tokens"] != len(ids):
        raise ConfigError(
            f"SGLang at {url} returned {len(ids)} output ids for {meta['completion_tokens']} completion tokens "
            "(the prompt-echo bug of SGLang 0.5.0-0.5.4): upgrade SGLang"
        )
    if finish == "abort":
        raise ConfigError(f"SGLang at {url} aborted the canary: {(meta.get('finish_reason') or {}).get('message')}")
    if finish == "length":
        return [f"canary from {url} hit max_new_tokens before finishing; </think> and EOS were not checked"]
    think_start, think_end = profile.think_start.id, profile.think_end.id
    if think_end not in ids:
        # With a prefilled <think> the output carries only </think>: a missing one is the signature of something
        # that rewrites answers (SGLang's --reasoning-parser does not: it acts on the OpenAI endpoints only), or of
        # another model behind the URL.
        raise ConfigError(
            f"SGLang at {url} returned a canary without {profile.think_end.text} ({think_end}): something between "
            f"the client and the model strips think tokens (a proxy or gateway that rewrites answers) or the server "
            f"serves another model than {profile.model}"
        )
    if profile.thinking == "prefilled" and think_start in ids:
        raise RunLevelError(
            f"SGLang at {url} generated {profile.think_start.text} although the prompt already ends in it: "
            f"is the chat template the {profile.model} one?"
        )
    if not ids or ids[-1] != profile.eos.id:
        raise ConfigError(
            f"SGLang at {url} ended the canary with {ids[-1:] or 'nothing'}, not the EOS {profile.eos.id} "
            f"({profile.eos.text}): check the served model and that output_ids keep the stop token"
        )
    return []


async def _canary_answer(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Any:
    """The canary's answer, with transient failures retried (each attempt with its own rid)."""

    async def post(attempt: int) -> Any:
        rid = body["rid"] if attempt == 1 else f"{body['rid']}-r{attempt}"
        async with session.post(url.rstrip("/") + "/generate", json=body | {"rid": rid}) as response:
            raw = await response.read()
        text = raw[:200].decode(errors="replace").strip()
        if response.status in REFUSED_STATUSES:
            raise KeyRefused(url.rstrip("/") + "/generate", response.status)
        if response.status != 200:
            message = error_message(raw)[:200]
            if failure_from_status(response.status, message).transient:
                raise _Transient(f"{response.status}: {message}")
            raise RunLevelError(
                f"SGLang at {url} answered {response.status} to the canary generation ({message}): check the "
                "sampling parameters"
            )
        try:
            answer = json.loads(raw)
        except ValueError:
            raise ConfigError(f"SGLang at {url} answered the canary with {text!r}, not JSON: is this SGLang?") from None
        one = answer[0] if isinstance(answer, list) and len(answer) == 1 else answer
        finish = ((one.get("meta_info") or {}).get("finish_reason") or {}) if isinstance(one, dict) else {}
        if finish.get("type") == "abort" and attempt < PREFLIGHT_RETRY.max_attempts:
            raise _Transient(f"abort: {finish.get('message')}")  # the last one is judged (and refused) below
        return answer

    return await _retried(url, "the canary generation", post)


def _canary_try(canary_body: dict[str, Any], attempt: int) -> dict[str, Any]:
    """The canary again with another seed: a real model answers differently, a misconfigured server fails again."""
    if attempt == 1:
        return canary_body
    params = canary_body["sampling_params"]
    return canary_body | {
        "sampling_params": params | {"sampling_seed": params.get("sampling_seed", 0) + attempt - 1},
        "rid": f"{canary_body['rid']}-c{attempt}",
    }


async def judge_canary(
    session: aiohttp.ClientSession, url: str, canary_body: dict[str, Any], profile: ModelProfile
) -> list[str]:
    """Warnings from the first canary that passes its checks; the error of the last when CANARY_TRIES fail."""
    for attempt in range(1, CANARY_TRIES):
        answer = await _canary_answer(session, url, _canary_try(canary_body, attempt))
        try:
            return check_canary(url, answer, profile)
        except ConfigError as exc:  # what the answer holds, not how it was served: worth another seed
            log.warning("canary %d of %d from %s failed (%s); trying another seed", attempt, CANARY_TRIES, url, exc)
    return check_canary(url, await _canary_answer(session, url, _canary_try(canary_body, CANARY_TRIES)), profile)


async def preflight_endpoint(
    session: aiohttp.ClientSession,
    url: str,
    profile: ModelProfile,
    expected_model: str,
    canary_body: dict[str, Any] | None,
    allow_model_mismatch: bool = False,
    wait_s: float = settings.WAIT_READY_S,
    front_end: str = "cli",  # messages name the settings as this front end calls them
    replicas_behind_url: int | None = None,  # the setting; None: found from the router's /workers
) -> ServerInfo:
    await _wait_healthy(session, url, wait_s, front_end)
    model_info = await _get_json(session, url, "/get_model_info")
    served = str(model_info.get("model_path", ""))
    if not same_model(served, expected_model) and not allow_model_mismatch:
        fixes = [f"point {settings.named('sglang_urls', front_end)} at the right server"]
        fixes.append(f"set {settings.named('model', front_end)}")
        if settings.offered("allow_model_mismatch", front_end):
            fixes.append(f"pass {settings.named('allow_model_mismatch', front_end)}")
        raise ConfigError(
            f"SGLang at {url} serves {served!r}, but this run is for {expected_model!r}: "
            + (", ".join(fixes[:-1]) + ", or " + fixes[-1])
        )
    server_info = await get_server_info(session, url)
    warnings = check_server_flags(url, server_info)
    version = server_info.get("version")
    if version and ECHO_BUG_VERSIONS.match(str(version)):
        warnings.append(f"SGLang {version} at {url} has the prompt-echo bug (0.5.0-0.5.4); upgrade if you can")
    if canary_body is not None:
        warnings += await judge_canary(session, url, canary_body, profile)
    for warning in warnings:
        log.warning(warning)
    running = server_info.get("max_running_requests")
    fleet = await find_replicas(session, url, server_info, replicas_behind_url, front_end)
    return ServerInfo(
        url=url,
        model_path=served,
        weight_version=model_info.get("weight_version"),
        version=str(version) if version is not None else None,
        max_running_requests=int(running) if isinstance(running, int) and running > 0 else None,
        warnings=warnings,
        deterministic_inference=server_info.get("enable_deterministic_inference") is True,
        sampling_settings={k: server_info[k] for k in SAMPLING_SETTINGS if k in server_info},
        replicas=fleet.replicas,
        slots=fleet.slots,
        replicas_found_by=fleet.found_by,
    )


@dataclass(frozen=True)
class LeftOut:
    """An endpoint that failed its preflight, and why (one line)."""

    url: str
    reason: str
    run_level: bool = False  # it failed in a way that would be the run's own, were no other endpoint to pass
    key_refused: bool = False  # it refused the API key: the run stops (a key is the deployment's, not one replica's)

    def to_json(self) -> dict[str, str]:
        return {"url": self.url, "reason": self.reason}


@dataclass(frozen=True)
class EndpointVerdicts:
    servers: list[ServerInfo]  # the endpoints that passed, in the order given
    left_out: list[LeftOut]
    # how each endpoint that passed had its tokenizer checked (tokenizer_agreement.Comparison: messages, prompt,
    # no_tokenizer, unchecked); empty without the agreement check
    tokenizer_check: dict[str, str] = field(default_factory=dict)
    tokenizer_modes: tuple[str, ...] = ()  # the modes whose canary renderings were compared (AgreementResult.modes)


async def judge_each(
    urls: list[str],
    profile: ModelProfile,
    expected_model: str,
    canary_body: dict[str, Any] | None,
    allow_model_mismatch: bool = False,
    wait_s: float = settings.WAIT_READY_S,
    canary_timeout_s: float = 600.0,
    agreement: Callable[[aiohttp.ClientSession, list[str]], Awaitable[Any]] | None = None,
    front_end: str = "cli",
    replicas_behind_url: int | None = None,
    access: ServerAccess = NO_ACCESS,
) -> tuple[list[ServerInfo | LeftOut], dict[str, str], tuple[str, ...]]:
    """Every endpoint's own verdict, in the order given, how the tokenizer of each that passed was compared
    (`agreement`) and in which modes; no minimum applied. An endpoint that refuses the API key is a LeftOut with
    `key_refused`. `judge_endpoints` and `eagle-datagen check` both judge through this one session, so what one
    accepts the other does."""
    check_endpoint_urls(urls)
    timeout = aiohttp.ClientTimeout(total=canary_timeout_s, sock_connect=10)

    async def judged(session: aiohttp.ClientSession, url: str) -> ServerInfo | LeftOut:
        try:
            return await preflight_endpoint(
                session,
                url,
                profile,
                expected_model,
                canary_body,
                allow_model_mismatch,
                wait_s,
                front_end,
                replicas_behind_url,
            )
        except KeyRefused as exc:
            return LeftOut(url, str(access.refused(exc.url, exc.status)), key_refused=True)
        except ConfigError as exc:
            return LeftOut(url, str(exc), run_level=isinstance(exc, RunLevelError))

    async with access.session(timeout=timeout) as session:
        verdicts: list[ServerInfo | LeftOut] = list(await asyncio.gather(*(judged(session, url) for url in urls)))
        passed = [v.url for v in verdicts if isinstance(v, ServerInfo)]
        checks: dict[str, str] = {}
        modes: tuple[str, ...] = ()
        if agreement is not None and passed:  # the client's tokenizer against the servers' (tokenizer_agreement.py)
            result = await agreement(session, passed)
            disagreeing, checks = result.left_out, result.checks  # {url: why}: left out like any failed check
            modes = tuple(result.modes)
            verdicts = [LeftOut(v.url, disagreeing[v.url]) if v.url in disagreeing else v for v in verdicts]
    return verdicts, checks, modes


async def judge_endpoints(
    urls: list[str],
    profile: ModelProfile,
    expected_model: str,
    canary_body: dict[str, Any] | None,
    allow_model_mismatch: bool = False,
    wait_s: float = settings.WAIT_READY_S,
    canary_timeout_s: float = 600.0,
    min_endpoints: int = settings.MIN_ENDPOINTS,
    # tokenizer_agreement.AgreementCheck: (session, urls) -> AgreementResult (left_out {url: why}, checks)
    agreement: Callable[[aiohttp.ClientSession, list[str]], Awaitable[Any]] | None = None,
    front_end: str = "cli",  # messages name the settings as this front end calls them (settings.named)
    replicas_behind_url: int | None = None,  # replicas behind each URL; None: found per URL (inference/fleet.py)
    access: ServerAccess = NO_ACCESS,  # the API key and CA bundle every request carries (access.py)
) -> EndpointVerdicts:
    """Preflight every endpoint; those that fail are left out with a warning. ConfigError (one line) when
    fewer than `min_endpoints` pass. A failure that looks like the run's own (RunLevelError: the canary of its
    sampling refused, a think token its template should have prefilled) is the run's only when no endpoint
    passes: then it stops the run as it is; when others pass the same canary, it is that endpoint's (a replica
    with a shorter context length, another model) and the endpoint is left out like any other.
    `agreement`: the client-vs-server tokenizer check, run on the endpoints that passed; those it names are left out,
    the comparison made on the others is returned (`tokenizer_check`). An endpoint that refuses the API key stops
    the run in one line (KeyRefused), whatever the others say."""
    verdicts, checks, modes = await judge_each(
        urls,
        profile,
        expected_model,
        canary_body,
        allow_model_mismatch,
        wait_s,
        canary_timeout_s,
        agreement,
        front_end,
        replicas_behind_url,
        access,
    )
    refused = [v for v in verdicts if isinstance(v, LeftOut) and v.key_refused]
    if refused:
        raise KeyRefused(refused[0].url, 401, refused[0].reason)
    servers = [v for v in verdicts if isinstance(v, ServerInfo)]
    left_out = [v for v in verdicts if isinstance(v, LeftOut)]
    run_level = [x for x in left_out if x.run_level]
    if run_level and not servers:  # no endpoint passed what failed there: the run's own failure
        raise RunLevelError(run_level[0].reason)
    left_out = [_endpoints_own(x, len(servers)) if x.run_level else x for x in left_out]
    if len(servers) < max(min_endpoints, 1):
        raise ConfigError(too_few_endpoints(len(servers), urls, left_out, min_endpoints, front_end))
    for x in left_out:
        log.warning(
            "endpoint %s is left out of this run (%d of %d go on): %s", x.url, len(servers), len(urls), x.reason
        )
    weights = {i.weight_version for i in servers}
    if len(weights) > 1:
        raise ConfigError(f"the endpoints serve different weight versions {sorted(map(str, weights))}: use one")
    warn_seed_not_reproducible(servers)
    return EndpointVerdicts(servers, left_out, {s.url: checks[s.url] for s in servers if s.url in checks}, modes)


def too_few_endpoints(passed: int, urls: list[str], left_out: list[LeftOut], min_endpoints: int, front_end: str) -> str:
    """The one line that stops a run whose preflight passed fewer endpoints than required (and `check`'s)."""
    if len(urls) == 1 and left_out:
        return left_out[0].reason
    reasons = "; ".join(f"{x.url}: {x.reason}" for x in left_out) or "none"
    return (
        f"{passed} of {len(urls)} SGLang endpoints passed preflight, fewer than the {min_endpoints} "
        f"required ({settings.named('min_endpoints', front_end)}); left out: {reasons}"
    )


def _endpoints_own(left: LeftOut, passed: int) -> LeftOut:
    """A run-level-looking failure of one endpoint while `passed` others took the same canary: the endpoint's."""
    return LeftOut(left.url, f"{left.reason} (the same canary passed on {passed} other endpoint(s): this one differs)")


async def preflight(
    urls: list[str],
    profile: ModelProfile,
    expected_model: str,
    canary_body: dict[str, Any] | None,
    allow_model_mismatch: bool = False,
    wait_s: float = settings.WAIT_READY_S,
    canary_timeout_s: float = 600.0,
    agreement: Callable[[aiohttp.ClientSession, list[str]], Awaitable[Any]] | None = None,
    replicas_behind_url: int | None = None,
    access: ServerAccess = NO_ACCESS,
) -> list[ServerInfo]:
    """Every endpoint must pass (`judge_endpoints` with all of them required)."""
    verdicts = await judge_endpoints(
        urls,
        profile,
        expected_model,
        canary_body,
        allow_model_mismatch,
        wait_s,
        canary_timeout_s,
        len(urls),
        agreement,
        replicas_behind_url=replicas_behind_url,
        access=access,
    )
    return verdicts.servers


def warn_seed_not_reproducible(infos: list[ServerInfo]) -> None:
    """Once per run: without deterministic inference a sample generated again may differ from the stored one."""
    loose = [i.url for i in infos if not i.deterministic_inference]
    if loose:
        row = next(f for f in SERVER_FLAGS if f.key == "enable_deterministic_inference")
        log.warning(
            "sampling_seed does not make samples reproducible on this deployment: SGLang at %s runs without %s (%s)",
            ", ".join(loose),
            row.flag,
            row.why,
        )
