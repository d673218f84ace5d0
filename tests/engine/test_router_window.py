"""A run behind the real smg router (1.13.0, from `make sglang`) over two serve-sim workers of 64 slots each
sizes its window for both: the preflight counts the router's workers (GET /workers), the window is 1.25 x their
128 slots, and the workers together hold well over one replica's 1.25 x 64 = 80 requests at once. Before,
the window was one worker's (80): at most 62% of the two workers' slots were ever busy (DESIGN.md section 15)."""

from __future__ import annotations

import dataclasses
import os
import threading

import pytest
import requests

from eagle_datagen.generation.stage import SamplingOverrides
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.inference.fleet import ROUTER
from eagle_datagen.inference.retry import RetryPolicy
from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from eagle_datagen_stack.sglang_engine import SmgRouter, engine_venv
from generation_runs import run_options

pytestmark = [pytest.mark.slow, pytest.mark.engine]
SLOTS = 64
# about a second a request: long enough that the window, not the client's speed, sets what is in flight
WORKER = dataclasses.replace(
    SimConfig(max_running_requests=SLOTS), decode_s_per_token=0.01, output_tokens_min=60, output_tokens_max=140
)


class InFlight(threading.Thread):
    """The most requests the workers held at once (running + queued, summed), from their /sim/stats."""

    def __init__(self, sims: list[SimServerThread]) -> None:
        super().__init__(daemon=True)
        self.sims, self.peak, self.done = sims, 0, threading.Event()

    def run(self) -> None:
        with requests.Session() as session:
            while not self.done.wait(0.05):
                stats = [session.get(s.url + "/sim/stats", timeout=10).json() for s in self.sims]
                self.peak = max(self.peak, sum(s["running"] + s["queued"] for s in stats))


def test_a_run_behind_the_router_keeps_both_workers_slots_busy(tmp_path):
    if not (engine_venv() / "bin" / "smg").exists():
        reason = f"smg is not installed in {engine_venv()}: run `make sglang`"
        if os.environ.get("EAGLE_DATAGEN_REQUIRE_ENGINE") == "1":  # make test builds it: missing is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    with SimServerThread(WORKER) as a, SimServerThread(WORKER) as b:
        with SmgRouter([a.url, b.url], tmp_path / "smg", policy="round_robin") as router:
            options = run_options(
                tmp_path, [router.url], run_id="routed", prompts=200,
                sampling=SamplingOverrides(max_new_tokens=1000, samples_per_prompt=3),
                retry=RetryPolicy(max_attempts=10, base_delay_s=0.05, max_delay_s=0.5),
            )  # fmt: skip
            watch = InFlight([a, b])
            watch.start()
            try:
                summary = run_generation(options)
            finally:
                watch.done.set()
                watch.join()
            served = [s.stats()["generations"] for s in (a, b)]
    (server,) = summary.servers
    assert (server["replicas"], server["slots"], server["replicas_found_by"]) == (2, 2 * SLOTS, ROUTER), server
    assert summary.generated == 600 and not summary.pending, summary.to_json()
    assert all(n > 100 for n in served), f"both workers must serve: {served}"
    # one replica's window would cap this at 80; the fleet's is 160 (the drain and the client's own pace lower it)
    assert watch.peak >= 2 * SLOTS, f"peak in flight {watch.peak}, slots {2 * SLOTS}, served {served}"
