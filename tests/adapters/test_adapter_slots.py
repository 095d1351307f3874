"""Issue 26: each adapter holds a request's slot until its response has ended.

In process, on a ManualClock: when exactly the slot is given back (WSGI:
the iterable's close(); ASGI: the last body message, a disconnect, an
exception, a WebSocket's end; http.server: the handler's return), and the
draft headers of a slot. Real servers: test_slots_servers.py.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List
from wsgiref.handlers import SimpleHandler

import http_sfv
import pytest

from limiter import Concurrency, ManualClock, RateLimiter
from limiter.adapters import asgi, wsgi
from limiter.adapters.httpserver import rate_limited
from limiter.testing._shared import T0

PEER = "203.0.113.7"
KEY = f"ip:{PEER}"


@pytest.fixture
def slots() -> RateLimiter:
    return RateLimiter(Concurrency(1, lease=30), clock=ManualClock(T0))


def free(limiter: RateLimiter) -> int:
    return limiter.peek(KEY).remaining


# -- WSGI ------------------------------------------------------------------------------


def environ(path: str = "/") -> Dict[str, Any]:
    return {"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": PEER}


def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
    return lambda data: None


def test_wsgi_holds_the_slot_until_the_server_closes_the_streamed_body(slots: RateLimiter) -> None:
    closed: List[bool] = []

    def streaming(environ: Any, start: Any) -> Iterator[bytes]:
        start("200 OK", [])
        try:
            yield b"first"
            yield b"last"
        finally:
            closed.append(True)

    app = wsgi.RateLimitMiddleware(streaming, slots)
    body = app(environ(), start_response)
    chunks = iter(body)
    assert next(chunks) == b"first"
    assert free(slots) == 0
    assert app(environ(), start_response) != body  # a 429 meanwhile
    assert list(chunks) == [b"last"]
    assert free(slots) == 0  # every chunk sent, not yet closed
    body.close()  # type: ignore[attr-defined]
    assert closed == [True] and free(slots) == 1


def test_wsgi_an_exception_in_the_app_gives_the_slot_back(slots: RateLimiter) -> None:
    def failing(environ: Any, start: Any) -> List[bytes]:
        raise RuntimeError("the app failed")

    app = wsgi.RateLimitMiddleware(failing, slots)
    with pytest.raises(RuntimeError):
        app(environ(), start_response)
    assert free(slots) == 1


def test_wsgi_a_one_chunk_body_keeps_its_length_for_the_server(slots: RateLimiter) -> None:
    # A server sets Content-Length from a body whose len() is 1 (PEP 3333); the
    # iterable that holds the slot hid the length, so such a response went out
    # without one (chunked, or the connection closed) only when it held a slot.
    def hello(environ: Any, start: Any) -> List[bytes]:
        start("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]

    out = io.BytesIO()
    request = {**environ(), "SERVER_PROTOCOL": "HTTP/1.1"}
    handler = SimpleHandler(io.BytesIO(), out, io.StringIO(), request, multithread=False)
    handler.run(wsgi.RateLimitMiddleware(hello, slots))
    head, _, body = out.getvalue().partition(b"\r\n\r\n")
    assert b"Content-Length: 5" in head.split(b"\r\n") and body == b"hello"
    assert free(slots) == 1  # the handler closed it


# -- ASGI ------------------------------------------------------------------------------


def scope(kind: str = "http") -> Dict[str, Any]:
    return {"type": kind, "method": "GET", "path": "/", "headers": [], "client": (PEER, 1)}


async def run(app: Any, messages: List[Dict[str, Any]], sent: List[Dict[str, Any]]) -> None:
    incoming = iter(messages)

    async def receive() -> Dict[str, Any]:
        return next(incoming)

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    await app(scope(), receive, send)


def test_asgi_gives_the_slot_back_after_the_last_body_message(slots: RateLimiter) -> None:
    seen: List[int] = []

    async def streaming(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        seen.append(free(slots))
        await send({"type": "http.response.body", "body": b"last"})
        seen.append(free(slots))

    sent: List[Dict[str, Any]] = []
    asyncio.run(run(asgi.RateLimitMiddleware(streaming, slots), [], sent))
    assert seen == [0, 1]
    assert [m["type"] for m in sent][:1] == ["http.response.start"]


def test_asgi_gives_the_slot_back_on_disconnect_and_on_an_exception(slots: RateLimiter) -> None:
    seen: List[int] = []

    async def listening(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "http.disconnect"
        seen.append(free(slots))
        raise RuntimeError("the client left")

    app = asgi.RateLimitMiddleware(listening, slots)
    with pytest.raises(RuntimeError):
        asyncio.run(run(app, [{"type": "http.disconnect"}], []))
    assert seen == [1] and free(slots) == 1

    async def failing(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("the app failed")

    with pytest.raises(RuntimeError):
        asyncio.run(run(asgi.RateLimitMiddleware(failing, slots), [], []))
    assert free(slots) == 1


def test_asgi_websocket_holds_the_slot_for_the_life_of_the_connection(
    slots: RateLimiter,
) -> None:
    seen: List[int] = []

    async def socket_app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        seen.append(free(slots))

    async def connect() -> None:
        async def receive() -> Dict[str, Any]:
            return {"type": "websocket.connect"}

        async def send(message: Dict[str, Any]) -> None:
            pass

        await asgi.RateLimitMiddleware(socket_app, slots)(scope("websocket"), receive, send)

    asyncio.run(connect())
    assert seen == [0] and free(slots) == 1


# -- http.server -----------------------------------------------------------------------


def test_httpserver_holds_the_slot_until_the_handler_returns(slots: RateLimiter) -> None:
    seen: List[int] = []

    @rate_limited(slots, key_func=lambda r: KEY, header_style="draft")
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            seen.append(free(slots))
            if self.path == "/boom":
                raise RuntimeError("the handler failed")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        for path in ("/", "/boom", "/"):
            connection = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            connection.close()
            assert response.status == 200
            policy = http_sfv.List()
            policy.parse(response.headers["RateLimit-Policy"].encode())
            [(item, params)] = [(i.value, dict(i.params)) for i in policy]
            assert (item, params) == ("default", {"q": 1, "qu": "concurrent-requests"})
            # Given back once the handler returned, just after the client read the end.
            end = time.monotonic() + 30
            while free(slots) != 1:
                assert time.monotonic() < end, "the slot was not given back"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert seen == [0, 0, 0]
    assert free(slots) == 1
