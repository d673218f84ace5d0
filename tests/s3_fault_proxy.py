"""A fault-injecting HTTP proxy in front of an S3 server, for reliability tests: real sockets on 127.0.0.1.

Every request is read whole (head and body), then either forwarded to the upstream server with its answer
relayed back, or met with a fault:
- `internal_error`: S3's 500 InternalError, the request never reaches the server;
- `slow_down`: S3's 503 SlowDown (throttling), the request never reaches the server;
- `reset_before`: the connection is reset before the request reaches the server;
- `reset_after`: the request is forwarded and handled (a PUT is committed), then the connection is reset
  before the client hears the answer: the client must find out what happened on its own.
Faults are drawn per request from one seeded RNG at the configured rates, or scheduled on the N-th request
of a method whose key contains a text (`schedule("PUT", "/data/", 1, "slow_down")`). The head and body are
forwarded byte for byte, so SigV4 signatures stay valid; only `Expect: 100-continue` is answered by the
proxy itself (it reads the body before deciding). While the upstream is down (a stopped SeaweedFS) the
client's connection is reset, as a vanished server's would be.
"""

from __future__ import annotations

import http.client
import logging
import os
import random
import socket
import socketserver
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlsplit

log = logging.getLogger(__name__)
S3Fault = Literal["internal_error", "slow_down", "reset_before", "reset_after"]
FAULTS: tuple[S3Fault, ...] = ("internal_error", "slow_down", "reset_before", "reset_after")
ERRORS = {
    "internal_error": (500, "Internal Server Error", "InternalError", "We encountered an internal error."),
    "slow_down": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
}
MAX_LINE = 65536


@dataclass
class ScheduledFault:
    method: str
    key_contains: str
    nth: int  # 1: the first matching request
    fault: S3Fault
    seen: int = 0


@dataclass
class ProxyStats:
    requests: Counter[str] = field(default_factory=Counter)  # by method
    faults: Counter[str] = field(default_factory=Counter)  # by fault kind, and "upstream_down"
    injected: list[tuple[str, str, str]] = field(default_factory=list)  # (method, key, fault)


class _Request:
    def __init__(self, method: str, target: str, head: bytes, body: bytes, keep_alive: bool) -> None:
        self.method, self.target, self.head, self.body, self.keep_alive = method, target, head, body, keep_alive

    @property
    def key(self) -> str:
        return unquote(urlsplit(self.target).path)


def _read_request(rfile, wfile) -> _Request | None:  # noqa: ANN001 - socket files
    line = rfile.readline(MAX_LINE)
    if not line.strip():
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    kept, headers = [line], {}
    while (raw := rfile.readline(MAX_LINE)) not in (b"\r\n", b"\n", b""):
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
        if name.strip().lower() not in ("expect", "connection"):  # neither is signed by SigV4
            kept.append(raw)
    if headers.get("expect", "").lower() == "100-continue":
        wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        wfile.flush()
    # boto3 over http (this proxy) sends checksums as headers and bodies with Content-Length; it streams
    # chunked bodies with checksum trailers over https only
    if "transfer-encoding" in headers:
        raise ValueError(f"the S3 fault proxy reads Content-Length bodies only, not {method} {target} chunked")
    body = rfile.read(int(headers.get("content-length") or 0))
    keep_alive = headers.get("connection", "").lower() != "close"
    head = b"".join(kept) + b"Connection: close\r\n\r\n"
    return _Request(method, target, head, body, keep_alive)


def _error_response(method: str, fault: S3Fault, number: int) -> bytes:
    status, reason, code, message = ERRORS[fault]
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
        f"<RequestId>fault-{number}</RequestId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nx-amz-request-id: fault-{number}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head if method == "HEAD" else head + body


def _forward(upstream: tuple[str, int], request: _Request) -> bytes:
    """The upstream's whole answer, re-framed with a Content-Length (it was asked to close after it)."""
    with socket.create_connection(upstream, timeout=120) as sock:
        sock.sendall(request.head + request.body)
        response = http.client.HTTPResponse(sock, method=request.method)
        response.begin()
        body = response.read()
        lines = [f"HTTP/1.1 {response.status} {response.reason}\r\n".encode("latin-1")]
        for name, value in response.msg.items():
            if name.lower() in ("transfer-encoding", "connection") or (
                name.lower() == "content-length" and request.method != "HEAD"
            ):
                continue
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        if request.method != "HEAD" and response.status not in (204, 304):
            lines.append(f"Content-Length: {len(body)}\r\n".encode())
        return b"".join(lines) + b"\r\n" + body


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN, as a crashed peer or a middlebox would (now, whatever still holds
    the socket's files: a plain close would wait for them, and socketserver would send a FIN first)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        os.close(sock.detach())
    except OSError:
        pass  # already closed


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class S3FaultProxy:
    """`with S3FaultProxy(upstream_url, rates={"slow_down": 0.1}, seed=1) as proxy:` then point the client at
    `proxy.url`. `proxy.stats` counts requests and the faults injected; `before_forward(method, key)`, when
    set, runs in the connection's thread before a request is forwarded (to stop the upstream on cue)."""

    def __init__(self, upstream_url: str, rates: dict[S3Fault, float] | None = None, seed: int = 0) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rates: dict[S3Fault, float] = {}
        self.set_rates(rates or {})
        self.scheduled: list[ScheduledFault] = []
        self.stats = ProxyStats()
        self.before_forward: Callable[[str, str], None] | None = None
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_rates(self, rates: dict[S3Fault, float]) -> None:
        unknown = sorted(set(rates) - set(FAULTS))
        if unknown or any(not 0.0 <= r <= 1.0 for r in rates.values()) or sum(rates.values()) > 1.0:
            raise ValueError(f"fault rates must be known kinds {list(FAULTS)} in [0, 1], summing to <= 1: {rates}")
        self.rates = dict(rates)

    def schedule(self, method: str, key_contains: str, nth: int, fault: S3Fault) -> None:
        """Inject `fault` on the nth request of `method` whose (decoded) key contains `key_contains`."""
        with self._lock:
            self.scheduled.append(ScheduledFault(method.upper(), key_contains, nth, fault))

    def _decide(self, request: _Request) -> tuple[S3Fault | None, int]:
        with self._lock:
            self.stats.requests[request.method] += 1
            number = sum(self.stats.requests.values())
            chosen: S3Fault | None = None
            for planned in self.scheduled:
                if planned.method == request.method and planned.key_contains in request.key:
                    planned.seen += 1
                    if planned.seen == planned.nth:
                        chosen = chosen or planned.fault
            draw, edge = self._rng.random(), 0.0  # drawn for every request: schedules do not shift the draws
            for fault in FAULTS:
                edge += self.rates.get(fault, 0.0)
                if chosen is None and draw < edge:
                    chosen = fault
            if chosen is not None:
                self.stats.faults[chosen] += 1
                self.stats.injected.append((request.method, request.key, chosen))
            return chosen, number

    def _serve(self, handler: socketserver.StreamRequestHandler) -> None:
        while True:
            try:
                request = _read_request(handler.rfile, handler.wfile)
            except OSError:
                return
            except ValueError as exc:  # a request it cannot frame: say so, not only drop the connection
                log.error("%s", exc)
                return
            if request is None:
                return
            fault, number = self._decide(request)
            if fault == "reset_before":
                _reset(handler.connection)
                return
            if fault in ERRORS:
                handler.wfile.write(_error_response(request.method, fault, number))
            else:
                if self.before_forward is not None:
                    self.before_forward(request.method, request.key)
                try:
                    answer = _forward(self.upstream, request)
                except OSError:  # the upstream is down or went away mid-answer
                    with self._lock:
                        self.stats.faults["upstream_down"] += 1
                    _reset(handler.connection)
                    return
                if fault == "reset_after":
                    _reset(handler.connection)
                    return
                handler.wfile.write(answer)
            handler.wfile.flush()
            if not request.keep_alive:
                return

    def start(self) -> S3FaultProxy:
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with proxy._lock:
                    proxy._connections.add(self.connection)
                try:
                    proxy._serve(self)
                finally:
                    with proxy._lock:
                        proxy._connections.discard(self.connection)

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()
        log.info("S3 fault proxy on %s -> %s:%d", self.url, *self.upstream)
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            open_connections = list(self._connections)
        for connection in open_connections:  # kept-alive client connections: their threads end now
            try:
                connection.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it (close would not)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> S3FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
