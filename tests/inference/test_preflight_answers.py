"""Preflight against servers that answer, but not as SGLang does: one line that says so, never a traceback."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.preflight import preflight


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
