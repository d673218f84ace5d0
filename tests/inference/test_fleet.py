"""The replicas and slots behind one URL (inference/fleet.py): the window counts every worker of a router, from
its GET /workers (the shape smg 1.13.0 answers, trimmed) or the replicas_behind_url setting; a URL whose answer
comes from another port and which lists no workers is counted as one server, with one line naming the setting."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.test_utils import TestServer

from eagle_datagen.inference.fleet import ROUTER, SERVER, SETTING, UNKNOWN, find_fleet
from eagle_datagen.inference.preflight import preflight

URL = "http://127.0.0.1:30000"
INFO = {"max_running_requests": 64, "port": 39847}  # one worker's answer, as the router passes it on


def worker(port: int, slots: str | None = "64", healthy: bool = True) -> dict:
    labels = {"max_running_requests": slots, "tp_size": "8"} if slots else {"tp_size": "8"}
    return {"url": f"http://10.0.0.1:{port}", "runtime_type": "sglang", "is_healthy": healthy, "labels": labels}


def test_a_routers_workers_are_counted_with_their_own_slots():
    fleet = find_fleet(URL, INFO, {"workers": [worker(1, "64"), worker(2, "32")]})
    assert (fleet.replicas, fleet.slots, fleet.found_by, fleet.note) == (2, 96, ROUTER, None)
    assert fleet.window() == 120  # 1.25 x 96, not 1.25 x one worker's 64
    assert fleet.window(concurrency=10) == 10


def test_unhealthy_workers_get_no_share_and_a_worker_without_a_label_counts_the_one_answer():
    fleet = find_fleet(URL, INFO, {"workers": [worker(1), worker(2, None), worker(3, healthy=False)]})
    assert (fleet.replicas, fleet.slots) == (2, 128)


def test_the_setting_wins_over_what_the_router_lists():
    fleet = find_fleet(URL, INFO, {"workers": [worker(1)]}, replicas_behind_url=8)
    assert (fleet.replicas, fleet.slots, fleet.found_by) == (8, 512, SETTING)
    assert fleet.window() == 640


def test_a_server_on_the_urls_port_is_one_server_without_a_note():
    fleet = find_fleet(URL, {"max_running_requests": 64, "port": 30000}, None)
    assert (fleet.replicas, fleet.slots, fleet.found_by, fleet.note) == (1, 64, SERVER, None)
    assert find_fleet(URL, INFO, {"workers": []}).found_by == UNKNOWN  # a router with no worker yet


def test_slots_unknown_are_the_default_per_replica():
    fleet = find_fleet(URL, {"port": 30000}, None, replicas_behind_url=2)
    assert (fleet.slots, fleet.window()) == (None, 160)


def fake_router(workers: dict | None, port: int | None = None) -> TestServer:
    """Answers preflight as smg does (/server_info 404, /get_server_info from one worker); /workers if given."""

    def answer(body: dict | str):
        async def handler(_request: web.Request) -> web.Response:
            return web.json_response(body) if isinstance(body, dict) else web.Response(text=body)

        return handler

    app = web.Application()
    app.router.add_get("/health_generate", answer(""))
    app.router.add_get("/get_model_info", answer({"model_path": "moonshotai/Kimi-K2.5"}))
    info = {"max_running_requests": 64, "port": port or 1, "enable_deterministic_inference": True}
    app.router.add_get("/get_server_info", answer(info))
    if workers is not None:
        app.router.add_get("/workers", answer(workers))
    return TestServer(app, host="127.0.0.1")


def preflight_of(kimi_profile, server: TestServer, **kwargs):
    async def scenario():
        async with server:
            url = str(server.make_url("")).rstrip("/")
            return url, (await preflight([url], kimi_profile, kimi_profile.model, None, wait_s=5, **kwargs))[0]

    return asyncio.run(scenario())


def test_preflight_counts_a_routers_workers_and_records_them(kimi_profile, caplog):
    caplog.set_level(logging.INFO, "eagle_datagen.inference.preflight")
    url, info = preflight_of(kimi_profile, fake_router({"workers": [worker(1), worker(2)]}))
    assert (info.max_running_requests, info.replicas, info.slots, info.window()) == (64, 2, 128, 160)
    assert {"replicas": 2, "slots": 128, "replicas_found_by": ROUTER}.items() <= info.provenance().items()
    assert f"SGLang at {url}: 2 replicas (router /workers), 128 slots, window 160" in caplog.messages
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_preflight_says_in_one_line_when_the_count_cannot_be_known(kimi_profile, caplog):
    caplog.set_level(logging.INFO, "eagle_datagen.inference.preflight")
    url, info = preflight_of(kimi_profile, fake_router(None))
    assert (info.replicas, info.window(), info.replicas_found_by) == (1, 80, UNKNOWN)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert url in warnings[0] and "lists no workers" in warnings[0] and "(80 requests in flight)" in warnings[0]
    assert "set --replicas-behind-url to the number of replicas it fronts" in warnings[0]


def test_the_setting_silences_the_line_and_sizes_the_window(kimi_profile, caplog):
    caplog.set_level(logging.INFO, "eagle_datagen.inference.preflight")
    _, info = preflight_of(kimi_profile, fake_router(None), replicas_behind_url=4)
    assert (info.replicas, info.slots, info.window(), info.replicas_found_by) == (4, 256, 320, SETTING)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
