"""Preflight against servers that answer, but not as SGLang does: one line that says so, never a traceback;
and against one that fails the canary transiently: retried, each attempt with its own rid."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference import preflight as preflight_module
from eagle_datagen.inference.preflight import CANARY_TRIES, PREFLIGHT_RETRY, preflight
from eagle_datagen.inference.retry import RetryPolicy


def serve(model_info_body: str, content_type: str):
    async def healthy(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def model_info(request: web.Request) -> web.Response:
        return web.Response(text=model_info_body, content_type=content_type)

    app = web.Application()
    app.router.add_get("/health_generate", healthy)
    app.router.add_get("/get_model_info", model_info)
    return TestServer(app, host="127.0.0.1")


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("<html><body>502 Bad Gateway</body></html>", "text/html"),  # a proxy in front of a dead server
        ('["moonshotai/Kimi-K2.5"]', "application/json"),  # JSON, but not an object
    ],
)
def test_a_model_info_that_is_not_a_json_object_is_one_line(kimi_profile, body, content_type):
    async def scenario() -> None:
        async with serve(body, content_type) as server:
            url = str(server.make_url("")).rstrip("/")
            await preflight([url], kimi_profile, kimi_profile.model, None, wait_s=5)

    with pytest.raises(ConfigError, match=r"answered GET /get_model_info with .* not a JSON object: is this SGLang\?"):
        asyncio.run(scenario())


GOOD = {"output_ids": [5, 163607, 7, 163586], "meta_info": {"finish_reason": {"type": "stop"}, "completion_tokens": 4}}
ABORT = {"output_ids": [], "meta_info": {"finish_reason": {"type": "abort", "message": "scheduler restarted"}}}


def sglang_like(canary: list[tuple[int, dict]], rids: list[str]) -> TestServer:
    """Answers health and info like SGLang, and the canary POSTs with `canary` in turn (the last one then on)."""

    def answering(body: dict):
        async def handler(request: web.Request) -> web.Response:
            return web.json_response(body)

        return handler

    async def generate(request: web.Request) -> web.Response:
        rids.append((await request.json())["rid"])
        status, body = canary[min(len(rids), len(canary)) - 1]
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_get("/health_generate", answering({}))
    app.router.add_get("/get_model_info", answering({"model_path": "moonshotai/Kimi-K2.5"}))
    app.router.add_get("/get_server_info", answering({"version": "0.5.6"}))
    app.router.add_post("/generate", generate)
    return TestServer(app, host="127.0.0.1")


def preflight_canary(kimi_profile, canary: list[tuple[int, dict]], rids: list[str]):
    body = {"input_ids": [1, 163606], "sampling_params": {"sampling_seed": 7}, "rid": "canary"}

    async def scenario():
        async with sglang_like(canary, rids) as server:
            url = str(server.make_url("")).rstrip("/")
            return await preflight([url], kimi_profile, kimi_profile.model, body, wait_s=5)

    return asyncio.run(scenario())


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(preflight_module, "PREFLIGHT_RETRY", RetryPolicy(PREFLIGHT_RETRY.max_attempts, 0.0, 0.0))


def test_a_canary_answered_503_then_aborted_is_retried_with_a_new_rid_each_time(kimi_profile):
    rids: list[str] = []
    [server] = preflight_canary(kimi_profile, [(503, {"error": "queue full"}), (200, ABORT), (200, GOOD)], rids)
    assert rids == ["canary", "canary-r2", "canary-r3"] and server.model_path == "moonshotai/Kimi-K2.5"


def test_a_canary_that_always_aborts_is_judged_after_the_last_attempt(kimi_profile):
    rids: list[str] = []
    with pytest.raises(ConfigError, match="aborted the canary: scheduler restarted"):
        preflight_canary(kimi_profile, [(200, ABORT)], rids)
    # every canary try (each with another seed) used all its attempts
    assert len(rids) == CANARY_TRIES * PREFLIGHT_RETRY.max_attempts == len(set(rids))


def test_server_info_falls_back_to_the_older_path_and_defaults_to_not_deterministic(kimi_profile, caplog):
    """The stand-in above serves only /get_server_info (as older SGLang): read there, and without
    enable_deterministic_inference the run says once that sampling_seed does not make samples reproducible."""
    rids: list[str] = []
    with caplog.at_level("WARNING", logger="eagle_datagen.inference.preflight"):
        [server] = preflight_canary(kimi_profile, [(200, GOOD)], rids)
    assert server.version == "0.5.6" and server.deterministic_inference is False
    assert server.provenance()["sampling_seed"].startswith("not reproducible")
    [line] = [r.getMessage() for r in caplog.records if "sampling_seed" in r.getMessage()]
    assert "does not make samples reproducible on this deployment" in line
    assert "--enable-deterministic-inference" in line


@pytest.mark.parametrize("deterministic", [False, True])
def test_preflight_reads_deterministic_inference_from_serve_sim(kimi_profile, caplog, deterministic):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    config = SimConfig(enable_deterministic_inference=deterministic).with_profile("instant")
    with SimServerThread(config) as one, SimServerThread(config) as two:
        with caplog.at_level("WARNING", logger="eagle_datagen.inference.preflight"):
            servers = asyncio.run(preflight([one.url, two.url], kimi_profile, kimi_profile.model, None, wait_s=5))
    assert [s.deterministic_inference for s in servers] == [deterministic, deterministic]
    assert [s.provenance()["enable_deterministic_inference"] for s in servers] == [deterministic, deterministic]
    lines = [r.getMessage() for r in caplog.records if "sampling_seed does not make" in r.getMessage()]
    if deterministic:
        assert lines == [] and servers[0].provenance()["sampling_seed"].startswith("reproducible")
    else:
        [line] = lines  # once for the run, naming both endpoints
        assert one.url in line and two.url in line


def test_a_watermarking_server_is_refused_in_one_line_and_sampling_settings_are_recorded(kimi_profile):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    with SimServerThread(SimConfig(enable_watermark=True).with_profile("instant")) as marked:
        with pytest.raises(ConfigError, match="runs with --enable-watermark: SGLang biases the sampled tokens") as info:
            asyncio.run(preflight([marked.url], kimi_profile, kimi_profile.model, None, wait_s=5))
    assert "\n" not in str(info.value) and marked.url in str(info.value)
    with SimServerThread(SimConfig().with_profile("instant")) as plain:
        [server] = asyncio.run(preflight([plain.url], kimi_profile, kimi_profile.model, None, wait_s=5))
    recorded = server.provenance()["sampling_settings"]
    assert recorded["enable_watermark"] is False and recorded["sampling_backend"] == "flashinfer"
    assert "watermark_config" not in recorded  # its value is the server's secret (SGLang redacts it)
