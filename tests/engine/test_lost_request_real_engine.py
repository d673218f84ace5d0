"""A request lost against the real SGLang engine (0.5.23 on the CPU, tiny model): two real replicas, one behind a
proxy that forwards everything but swallows one /generate answer (the server generated it; the client never
hears it, its connection held open; /health and /v1/loads pass through, so the server's own count no longer
has the request). The liveness monitor must find it within its bound, a hedged copy on the other replica must
win, every sample must be stored once, and the lost rid must be aborted on the real server.

SGLang's own controls cannot provoke the loss: `/pause_generation` keeps paused requests in /v1/loads's
`paused` queue, which the monitor counts on purpose (a paused request is not lost). What `/abort_request`
does on the real server is observed first (tests/abort_probe.py; serve-sim is held to the same): by rid
prefix, answered 200, the aborted /generate answered 200 with finish_reason abort and the ids decoded so far.
One module shares the two servers (each start is 25-65 s and ~2 GB).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from abort_probe import EXPECTED, observe_abort_semantics
from eagle_datagen.generation.publish import PublishOptions
from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.inference.liveness import LivenessPolicy
from eagle_datagen_stack.sglang_engine import ServerOptions
from engine_support import assert_rows_match_server, published_rows, real_servers, sample_id_of
from generation_runs import run_options

pytestmark = [pytest.mark.slow, pytest.mark.engine]

PROMPTS, SAMPLES = 8, 2
# the bound under test: found lost_after_s after the server stopped counting it, give or take a poll or two
WATCH = LivenessPolicy(lost_after_s=4.0, poll_s=0.5, grace_s=1.0)
# The first /generate the losing replica receives loses its answer: the oldest request there, which is the one the
# monitor flags (a count says how many are lost, not which: it takes the oldest; a later one lost while older ones
# still run would be found a round later, after a wasted hedge of an older one)
SWALLOWED = 1


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    with real_servers(tmp_path_factory.mktemp("sglang-logs"), ServerOptions(), ServerOptions()) as pairs:
        yield pairs


async def _held(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url + "/v1/loads") as response:
        loads = (await response.json())["loads"]
    return sum(load["num_running_reqs"] + load["num_waiting_reqs"] for load in loads)


def test_the_real_server_honours_abort_request_by_rid_prefix(replicas):
    """The semantics the client's aborts rely on (and serve-sim copies): measured here, not assumed."""
    (server, _), _ = replicas
    assert observe_abort_semantics(server.url, max_new_tokens=4000) == EXPECTED


def test_an_answer_lost_on_the_way_is_found_within_the_bound_hedged_and_stored_once(replicas, tmp_path, caplog):
    (_, good), (losing_server, losing) = replicas
    good.clear()
    losing.clear()
    losing.swallow_nth = SWALLOWED
    try:
        sampling = SamplingOverrides(max_new_tokens=64, samples_per_prompt=SAMPLES)
        options = run_options(
            tmp_path,
            [good.url, losing.url],
            prompts=PROMPTS,
            sampling=sampling,
            liveness=WATCH,
            publish=PublishOptions(draft_vocab_size=256),
        )
        with caplog.at_level("WARNING", logger="eagle_datagen.inference.liveness"):
            summary = run_generation(options)
    finally:
        losing.swallow_nth = None
    assert summary.pending == 0 and summary.published is not None

    [lost] = losing.swallowed  # the real server generated it; the client never heard the answer
    assert lost.status == 200 and lost.output_ids
    rows = published_rows(tmp_path / "out", "r")
    every = rows["data"] + rows["quarantine"]
    assert len(every) == len({r["sample_id"] for r in every}) == PROMPTS * SAMPLES  # each sample once
    assert_rows_match_server(every, good.exchanges + losing.exchanges)  # each row is an answer a server gave

    # found within the bound: flagged lost_after_s after the server stopped counting it, give or take polls
    [found] = [r for r in caplog.records if "lost for" in r.getMessage() and losing.url in r.getMessage()]
    assert lost.rid in found.getMessage()  # the oldest request there, the lost one
    found_after = found.created - losing.swallowed_at
    print(f"lost answer found {found_after:.1f} s after the server gave it (lost_after {WATCH.lost_after_s} s)")
    assert WATCH.lost_after_s - WATCH.poll_s <= found_after <= WATCH.lost_after_s + 3 * WATCH.poll_s + 1.0, found_after
    # and hedged: the copy went to the good replica (once it had a free slot) under the same sample and seed
    hedge_rid = f"{lost.rid}-h"
    [hedge] = [e for e in good.exchanges if e.rid == hedge_rid]
    assert hedge.input_ids == lost.input_ids and hedge.sampling_params == lost.sampling_params
    assert good.arrived[hedge_rid] >= found.created
    # the hedge's answer is the one stored (the swallowed one never reached the client)
    [row] = [r for r in every if r["sample_id"] == sample_id_of(lost.rid)]
    assert row["output_ids"] == hedge.output_ids
    assert summary.failures.get("lost") == 1

    # the lost rid was aborted on the real server (200), which holds nothing of it afterwards
    assert (lost.rid, 200) in losing.aborts
    assert asyncio.run(_held(losing_server.url)) == 0
    assert [e for e in losing.exchanges if e.rid == lost.rid] == []  # never answered twice

    counts = json.loads((tmp_path / "out" / "manifests" / "run=r.json").read_text())["counts"]["endpoints"]
    assert counts[losing.url]["lost_requests"] == 1
    assert counts[good.url]["hedges"]["hedges_sent"] == counts[good.url]["hedges"]["hedges_won"] == 1
    assert counts[losing.url]["hedges"]["aborted"] == 1
