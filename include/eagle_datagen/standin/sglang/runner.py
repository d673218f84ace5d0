"""Start, stop and restart a stand-in SGLang server: on the caller's event loop, or in a background thread.

A restart is what a client sees when a real server process dies and comes back: the listening socket
closes (new connections are refused), every open connection is cut (in-flight requests fail with a
disconnect), and after `downtime_s` it listens again on the same port, answering /health_generate with 503
for `startup_seconds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from concurrent.futures import Future
from typing import Any

from aiohttp import web

from eagle_datagen.standin.sglang.app import build_app
from eagle_datagen.standin.sglang.config import FaultRates, SimConfig
from eagle_datagen.standin.sglang.state import SimState

log = logging.getLogger(__name__)
SHUTDOWN_TIMEOUT_S = 1.0


class SimServer:
    """A running stand-in on the current event loop. Made by `start_sim_server`."""

    def __init__(self, config: SimConfig, host: str, port: int) -> None:
        self.config = config
        self.host = host
        self.port = port
        self.state = SimState(config)
        self.state.restart = self.restart
        # handler_cancellation: a client that goes away (or a restart) cancels its request and frees its slot
        self._runner = web.AppRunner(
            build_app(self.state), handler_cancellation=True, shutdown_timeout=SHUTDOWN_TIMEOUT_S, access_log=None
        )
        self._site: web.TCPSite | None = None
        self._restart_lock = asyncio.Lock()
        self._periodic: asyncio.Task | None = None
        self._stopped = False
        self.down = asyncio.Event()  # set while restarting, from the moment the listener is closed

    @property
    def url(self) -> str:
        return f"{'https' if self.config.tls_cert else 'http'}://{self.host}:{self.port}"

    def _ssl_context(self) -> ssl.SSLContext | None:
        if not self.config.tls_cert:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.config.tls_cert, self.config.tls_key)
        return context

    async def _listen(self) -> None:
        self._site = web.TCPSite(
            self._runner, self.host, self.port, reuse_address=True, ssl_context=self._ssl_context()
        )
        await self._site.start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]
        self.state.address = (self.host, self.port)
        self.state.came_up()
        self.down.clear()

    async def start(self) -> SimServer:
        await self._runner.setup()
        await self._listen()
        if self.config.restart_every_s:
            self._periodic = asyncio.get_running_loop().create_task(self._restart_periodically())
        log.info("SGLang stand-in listening on %s", self.url)
        return self

    async def _go_down(self) -> None:
        if self._site is not None:
            await self._site.stop()  # closes the listening socket: new connections are refused
            self._site = None
        server = self._runner.server
        for handler in server.connections if server is not None else []:
            handler.force_close()
            if handler.transport is not None:
                handler.transport.close()  # in-flight requests are cancelled (handler_cancellation)
        self.down.set()

    async def restart(self, downtime_s: float) -> None:
        """Go away for `downtime_s` seconds and come back on the same port (returns once back)."""
        async with self._restart_lock:
            if self._stopped:
                return
            log.info("SGLang stand-in restarting: down for %.2fs", downtime_s)
            self.state.stats.restarts += 1
            self.state.prefix_cache.clear()  # a restarted process starts with an empty KV cache
            await self._go_down()
            await asyncio.sleep(downtime_s)
            if not self._stopped:
                await self._listen()

    async def _restart_periodically(self) -> None:
        assert self.config.restart_every_s is not None
        while True:
            await asyncio.sleep(self.config.restart_every_s)
            await self.restart(self.config.restart_downtime_s)

    async def stop(self) -> None:
        self._stopped = True
        tasks = [t for t in (self._periodic, *self.state.background) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._go_down()
        await self._runner.cleanup()


async def start_sim_server(config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> SimServer:
    """Start a stand-in SGLang server on this event loop; port 0 picks a free port (see `.port`, `.url`)."""
    return await SimServer(config or SimConfig(), host, port).start()


class SimServerThread:
    """`with SimServerThread(config) as sim:` runs a stand-in on its own event loop in a daemon thread.

    For synchronous code and tests: `sim.url`, `sim.stats()`, `sim.set_faults(...)`, `sim.restart(downtime_s)`.
    """

    def __init__(self, config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config or SimConfig()
        self.host = host
        self.port = port
        self.server: SimServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.config.tls_cert else 'http'}://{self.host}:{self.port}"

    def start(self) -> SimServerThread:
        started: Future[SimServer] = Future()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            try:
                started.set_result(self._loop.run_until_complete(start_sim_server(self.config, self.host, self.port)))
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                self._loop.close()
                started.set_exception(exc)
                return
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="sglang-standin", daemon=True)
        self._thread.start()
        try:
            self.server = started.result(timeout=60)
        except BaseException:
            self._thread.join(timeout=10)
            self._loop = self._thread = None
            raise
        self.port = self.server.port
        return self

    def _call(self, coro: Any, timeout: float | None = 60) -> Any:
        assert self._loop is not None, "the server is not running"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def restart(self, downtime_s: float, wait: bool = True) -> None:
        """Restart now. wait=True returns once it is back; wait=False as soon as it is down."""
        assert self.server is not None and self._loop is not None
        server = self.server

        async def begin() -> None:
            task = asyncio.get_running_loop().create_task(server.restart(downtime_s))
            server.state.background.add(task)
            task.add_done_callback(server.state.background.discard)
            if wait:
                await task
            else:
                down = asyncio.ensure_future(server.down.wait())
                await asyncio.wait({task, down}, return_when=asyncio.FIRST_COMPLETED)
                down.cancel()

        self._call(begin(), timeout=None)

    def stats(self) -> dict[str, Any]:
        assert self.server is not None
        server = self.server

        async def read() -> dict[str, Any]:
            return server.state.stats.to_json(server.state.pool)

        return self._call(read())

    def set_faults(self, rates: FaultRates | dict[str, float]) -> None:
        assert self.server is not None
        rates = rates if isinstance(rates, FaultRates) else FaultRates.from_dict(rates)
        server = self.server

        async def apply() -> None:
            server.state.set_fault_rates(rates)

        self._call(apply())

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        if self.server is not None:
            self._call(self.server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = None
        self._thread = None

    def __enter__(self) -> SimServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
