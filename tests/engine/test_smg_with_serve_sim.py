"""The real smg router (1.13.0, from `make sglang`) registers serve-sim workers and serves /generate through
them: serve-sim answers the router's registration and polls (/health, /v1/models with owned_by "sglang",
/server_info, /model_info, and every 10 s the load monitor's /v1/loads, which it falls back from to
/metrics when /v1/loads is missing) as SGLang does."""

from __future__ import annotations

import time

import pytest
import requests

from eagle_datagen.standin.sglang import SimConfig, SimServerThread
from eagle_datagen_stack.sglang_engine import SmgRouter, engine_venv

pytestmark = [pytest.mark.slow, pytest.mark.engine]
PROMPT = [220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]
REGISTRATION = {"GET /health", "GET /v1/models", "GET /server_info", "GET /model_info"}


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    if not (engine_venv() / "bin" / "smg").exists():
        pytest.skip(f"smg is not installed in {engine_venv()}: run `make sglang`")
    config = SimConfig().with_profile("instant")
    with SimServerThread(config) as a, SimServerThread(config) as b:
        with SmgRouter([a.url, b.url], tmp_path_factory.mktemp("smg"), policy="round_robin") as router:
            yield router, (a, b)


def polls(sim) -> dict[str, int]:
    return requests.get(sim.url + "/sim/stats", timeout=10).json()["polls"]


def test_the_router_registers_both_serve_sims_as_sglang_workers(routed):
    router, sims = routed
    readiness = requests.get(router.url + "/readiness", timeout=10).json()
    assert (readiness["healthy_workers"], readiness["total_workers"]) == (2, 2)
    workers = requests.get(router.url + "/workers", timeout=10).json()["workers"]
    assert {w["url"] for w in workers} == {s.url for s in sims}
    assert all(w["runtime_type"] == "sglang" and w["model_id"] == "moonshotai/Kimi-K2.5" for w in workers)
    for sim in sims:
        assert REGISTRATION <= set(polls(sim))


def test_generate_through_the_router_reaches_both_serve_sims(routed):
    router, sims = routed
    with requests.Session() as session:
        for i in range(6):
            body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 16}, "rid": f"via-smg-{i}"}
            answer = session.post(router.url + "/generate", json=body, timeout=30)
            assert answer.status_code == 200, answer.text
            assert answer.json()["meta_info"]["id"] == f"via-smg-{i}" and answer.json()["output_ids"]
    generations = [requests.get(s.url + "/sim/stats", timeout=10).json()["generations"] for s in sims]
    assert all(g > 0 for g in generations) and sum(generations) == 6, generations


def test_the_load_monitor_polls_are_answered(routed):
    _, sims = routed
    deadline = time.monotonic() + 25  # the monitor runs every 10 s
    while time.monotonic() < deadline and not all("GET /v1/loads" in polls(s) for s in sims):
        time.sleep(1)
    for sim in sims:
        seen = polls(sim)
        assert "GET /v1/loads" in seen, seen
        assert "GET /metrics" not in seen, f"the monitor fell back to /metrics: /v1/loads did not do: {seen}"
        loads = requests.get(sim.url + "/v1/loads", timeout=10).json()
        assert loads["loads"][0]["max_running_requests"] == sim.config.max_running_requests
