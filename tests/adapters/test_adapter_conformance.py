"""``limiter.testing.AdapterConformance`` for the three adapters of ``limiter.adapters``.

WSGI and ASGI are called in-process (environ / scope, receive, send); the
``http.server`` decorator runs on a real ``ThreadingHTTPServer`` on
127.0.0.1:0 in a thread, reached with ``http.client``.
"""

from __future__ import annotations

import asyncio
import http.client
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

import pytest

from limiter import RateLimiter
from limiter.adapters import asgi, wsgi
from limiter.adapters.httpserver import rate_limited
from limiter.http.responses import status_line
from limiter.testing._adapter_suite import AdapterConformance

Reply = Tuple[int, Sequence[Tuple[str, str]], bytes]


# -- WSGI -------------------------------------------------------------------------------


def status_of(path: str) -> int:
    """The status the conformance app answers: ``/status/<code>`` or 200."""
    return int(path[8:]) if path.startswith("/status/") else 200


def wsgi_hello(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
    status = status_line(status_of(environ["PATH_INFO"]))
    start_response(status, [("Content-Type", "text/plain"), ("X-App", "1")])
    return [] if environ["REQUEST_METHOD"] == "HEAD" else [b"hello"]


class TestWSGI(AdapterConformance):
    def make_app(self, limiter: RateLimiter, **options: Any) -> Any:
        return wsgi.RateLimitMiddleware(wsgi_hello, limiter, **options)

    def request(
        self,
        app: Any,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> Reply:
        environ = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "REMOTE_ADDR": peer or self.client_peer,
        }
        for name, value in (headers or {}).items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        seen: Dict[str, Any] = {}

        def start_response(
            status: str, headers: List[Tuple[str, str]], exc_info: Any = None
        ) -> Any:
            seen.update(status=int(status[:3]), headers=headers)
            return lambda data: None

        result = app(environ, start_response)
        try:
            body = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return seen["status"], seen["headers"], body


# -- ASGI -------------------------------------------------------------------------------


async def asgi_hello(scope: Dict[str, Any], receive: Any, send: Any) -> None:
    headers = [(b"content-type", b"text/plain"), (b"X-App", b"1")]
    status = status_of(scope["path"])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    body = b"" if scope["method"] == "HEAD" else b"hello"
    await send({"type": "http.response.body", "body": body})


class TestASGI(AdapterConformance):
    awaits = True

    def make_app(self, limiter: RateLimiter, **options: Any) -> Any:
        return asgi.RateLimitMiddleware(asgi_hello, limiter, **options)

    def request(
        self,
        app: Any,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> Reply:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
            "client": (peer or self.client_peer, 50000),
        }
        sent: List[Dict[str, Any]] = []

        async def receive() -> Dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(app(scope, receive, send))
        start, *bodies = sent
        assert start["type"] == "http.response.start"
        headers_ = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start["headers"]]
        return start["status"], headers_, b"".join(m.get("body", b"") for m in bodies)


# -- http.server ------------------------------------------------------------------------


class Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(status_of(self.path))
        self.send_header("Content-Type", "text/plain")
        self.send_header("X-App", "1")
        self.send_header("Content-Length", "5")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b"hello")

    do_POST = do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, handler: Type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.errors: List[BaseException] = []
        #: Released once per connection whose handler returned (a held slot is given back then).
        self.finished = threading.Semaphore(0)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.01})
        self.thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # its errors recorded
        finally:
            self.finished.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # An exception out of a handler: record it (instead of printing it).
        error = sys.exc_info()[1]
        assert error is not None
        self.errors.append(error)


class TestHTTPServer(AdapterConformance):
    # http.client cannot choose the source address: every request comes from
    # the loopback address, which the proxy test trusts as the proxy.
    client_peer = proxy_peer = "127.0.0.1"

    def make_app(self, limiter: RateLimiter, **options: Any) -> Server:
        return Server(rate_limited(limiter, **options)(Hello))

    def close_app(self, app: Server) -> None:
        app.shutdown()
        app.server_close()
        app.thread.join()

    def request(
        self,
        app: Server,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> Reply:
        assert peer in (None, "127.0.0.1")
        conn = http.client.HTTPConnection("127.0.0.1", app.server_address[1], timeout=10)
        try:
            conn.request(method, path, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()
            # The handler may still run after the client read the response: wait
            # for it, so the next request finds what this one left (its slot back).
            assert app.finished.acquire(timeout=10), "the handler did not return"

    def expect_error(self, app: Server, error: Type[BaseException]) -> None:
        # socketserver's error path: handle_error, then the connection is
        # closed without a response (no 429, no fail-open 200).
        with pytest.raises(http.client.RemoteDisconnected):
            self.request(app)
        assert [type(e) for e in app.errors] == [error]
