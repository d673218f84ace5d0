"""What a server does with SGLang's `POST /abort_request`, observed the same way on the real engine
(tests/engine/test_lost_request_real_engine.py) and on serve-sim (tests/standin/test_sglang_server.py), so the
two are held to one expectation, `EXPECTED`.

Three long requests run (`probe`, `probe-h`, `other`); `{"rid": "probe"}` is sent; then a rid nobody holds and
an empty rid (both ignored); then `{"abort_all": true}`. The liveness monitor (inference/liveness.py) aborts a
lost request's copy by rid; the prefix match is why a hedge must never share its server with an original that
is aborted while the hedge runs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

# A prompt in the tiny model's and serve-sim's vocabulary, ending in the generation prompt.
PROMPT = [163587, 1000, 2000, 3000, 163586, 163588, 69702, 163601, 163606]
ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
EXPECTED = {
    "abort_status": 200,
    "abort_body": "",
    "probe": ABORTED,  # the rid asked for
    "probe-h": ABORTED,  # a longer rid with that prefix, on the same server: ended too
    "partial": True,  # each ended one carries the ids decoded so far, counted by completion_tokens
    "held_after_probe": 1,  # `other` still runs
    "held_after_unknown_and_empty": 1,  # neither ended anything
    "other": ABORTED,  # abort_all ended it
    "held_at_end": 0,
}


async def _held(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url + "/v1/loads") as response:
        loads = (await response.json())["loads"]
    return sum(load["num_running_reqs"] + load["num_waiting_reqs"] for load in loads)


async def _until_held(session: aiohttp.ClientSession, url: str, count: int, timeout_s: float = 30) -> int:
    deadline = time.monotonic() + timeout_s
    while (held := await _held(session, url)) != count and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return held


async def _generate(session: aiohttp.ClientSession, url: str, rid: str, max_new_tokens: int) -> dict[str, Any]:
    body = {
        "input_ids": PROMPT,
        "rid": rid,
        "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 1.0},
    }
    async with session.post(url + "/generate", json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def _abort(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, str]:
    async with session.post(url + "/abort_request", json=body) as response:
        return response.status, await response.text()


def _partial(answer: dict[str, Any], max_new_tokens: int) -> bool:
    count = answer["meta_info"]["completion_tokens"]
    return len(answer["output_ids"]) == count < max_new_tokens


async def _observe(url: str, max_new_tokens: int) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        runs = {rid: asyncio.create_task(_generate(session, url, rid, max_new_tokens)) for rid in ("probe", "probe-h")}
        runs["other"] = asyncio.create_task(_generate(session, url, "other", max_new_tokens))
        await _until_held(session, url, 3)
        await asyncio.sleep(0.5)  # every one is decoding, not only admitted
        status, body = await _abort(session, url, {"rid": "probe"})
        ended = {rid: await asyncio.wait_for(runs[rid], 30) for rid in ("probe", "probe-h")}
        seen: dict[str, Any] = {"abort_status": status, "abort_body": body}
        seen |= {rid: answer["meta_info"]["finish_reason"] for rid, answer in ended.items()}
        seen["partial"] = all(_partial(answer, max_new_tokens) for answer in ended.values())
        seen["held_after_probe"] = await _until_held(session, url, 1)
        await _abort(session, url, {"rid": "never-seen"})
        await _abort(session, url, {"rid": ""})
        await asyncio.sleep(0.5)
        seen["held_after_unknown_and_empty"] = await _held(session, url)
        await _abort(session, url, {"abort_all": True})
        seen["other"] = (await asyncio.wait_for(runs["other"], 30))["meta_info"]["finish_reason"]
        seen["held_at_end"] = await _until_held(session, url, 0)
        return seen


def observe_abort_semantics(url: str, max_new_tokens: int) -> dict[str, Any]:
    """The observations `EXPECTED` names; `max_new_tokens` must keep a request running for several seconds."""
    return asyncio.run(_observe(url.rstrip("/"), max_new_tokens))
