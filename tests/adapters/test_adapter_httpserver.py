"""The http.server decorator, on a real ThreadingHTTPServer on a loopback socket.

What every adapter must do is in test_adapter_conformance.py (AdapterConformance);
this file keeps what is particular to this adapter.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import re
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from limiter import ManualClock, MemoryStore, RateLimiter, Rule, StoreError
from limiter.adapters.httpserver import rate_limited, request_info
from limiter.http.keys import header_key

NOW = 1_700_000_000
BODY_429 = b'{"status":429,"code":"rate_limited","message":"too many requests"}'


class Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # one write per response: no Nagle / delayed-ACK stalls on keep-alive
    seen: ClassVar[list] = []

    def _reply(self):
        Hello.seen.append((self.command, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(200)
        self.send_header("X-App", "1")
        self.send_header("Content-Length", "5")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b"hello")

    do_GET = do_POST = do_HEAD = do_DELETE = _reply

    def log_message(self, format, *args):
        pass


class Server(ThreadingHTTPServer):
    request_queue_size = 64  # the default 5 drops concurrent SYNs: 1 s retransmits
    errors: ClassVar[list] = []

    def handle_error(self, request, client_address):
        # socketserver's error path for an exception out of a handler: record
        # it, then print the traceback as the default does.
        Server.errors.append(sys.exc_info()[1])
        super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(handler):
    server = Server(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def request(port, method="GET", path="/", headers=None, body=None, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        if own:
            conn.close()


def named(headers, *names):
    return [(k, v) for k, v in headers if k in names]


RL = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")


def limiter(rate="3/second", **kw):
    return RateLimiter(rate, clock=ManualClock(NOW), **kw)


def test_every_method_is_limited_including_unimplemented_ones():
    Hello.seen = []
    with serve(rate_limited(limiter("4/second"))(Hello)) as port:
        results = [
            request(port, "POST", body=b"x"),
            request(port, "DELETE"),
            request(port, "HEAD"),
            request(port, "PATCH"),  # not implemented: 501, still counted
            request(port, "GET"),
            request(port, "HEAD"),
        ]
    assert [r[0] for r in results] == [200, 200, 200, 501, 429, 429]
    assert results[5][2] == b""  # HEAD: headers only
    assert [m for m, _ in Hello.seen] == ["POST", "DELETE", "HEAD"]


def test_keep_alive_connection_and_refill():
    clock = ManualClock(NOW)
    with serve(rate_limited(RateLimiter("2/second", clock=clock))(Hello)) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            statuses = [request(port, conn=conn)[0] for _ in range(3)]
            clock.advance(0.5)
            statuses += [request(port, conn=conn)[0] for _ in range(2)]
        finally:
            conn.close()
    assert statuses == [200, 200, 429, 200, 429]


def test_limited_request_with_a_body_closes_the_connection():
    with serve(rate_limited(limiter("1/second"))(Hello)) as port:
        request(port)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            status, headers, _ = request(port, "POST", body=b"x" * 1000, conn=conn)
        finally:
            conn.close()
    assert status == 429
    assert ("Connection", "close") in headers


def test_threading_server_admits_exactly_burst_under_concurrency():
    with serve(rate_limited(limiter("20/second"))(Hello)) as port, ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda _: request(port)[0], range(40)))
    assert statuses.count(200) == 20
    assert statuses.count(429) == 20


def test_exempt_key_func_and_trusted_proxy():
    lim = limiter("1/second")
    handler = rate_limited(
        lim,
        exempt=lambda r: r.path == "/health",
        key_func=header_key("X-API-Key"),
        trusted_proxies="127.0.0.1",
        proxy_header="x-forwarded-for",
    )(Hello)
    with serve(handler) as port:
        health = [request(port, path="/health?full=1")[0] for _ in range(3)]
        keyed = [request(port, headers={"X-API-Key": "a"})[0] for _ in range(2)]
        # The client adds a Forwarded that disagrees with the proxy's header:
        # proxy_header pins the one the proxy appends, so it changes nothing.
        spoofing = {"X-Forwarded-For": "6.6.6.6, 198.51.100.4", "Forwarded": "for=1.1.1.1"}
        proxied = [request(port, headers=spoofing)[0] for _ in range(2)]
    assert health == [200, 200, 200]
    assert keyed == [200, 429]
    assert proxied == [200, 429]
    assert lim.peek("ip:198.51.100.4").remaining == 0
    assert lim.peek("ip:127.0.0.1").remaining == 1


class BrokenStore(MemoryStore):
    def apply(self, key, limit, cost, now):
        raise StoreError("down")


def test_decorated_class_keeps_its_identity_and_the_original_is_untouched():
    limited = rate_limited(limiter())(Hello)
    assert issubclass(limited, Hello)
    assert limited.__name__ == "Hello"
    assert limited.__qualname__ == Hello.__qualname__
    assert "parse_request" not in Hello.__dict__


def test_request_info_from_a_handler_over_ipv6():
    if not socket.has_ipv6:
        pytest.fail("this machine has no IPv6 loopback")
    captured = []

    class V6Server(Server):
        address_family = socket.AF_INET6

    def key(request):
        captured.append(request_info(request.native))
        return None

    handler = rate_limited(limiter(), key_func=key)(Hello)
    server = V6Server(("::1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        conn = http.client.HTTPConnection("::1", server.server_address[1], timeout=5)
        request(0, "GET", "/caf%C3%A9?q=1", headers={"X-A": "1"}, conn=conn)
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    info = captured[0]
    assert (info.method, info.path, info.peer) == ("GET", "/café", "::1")
    assert info.headers.get("x-a") == "1"


def test_bad_arguments():
    with pytest.raises(TypeError, match="BaseHTTPRequestHandler subclasses, got <class 'object'>"):
        rate_limited(limiter())(object)
    with pytest.raises(ValueError, match="'z'"):
        rate_limited(limiter(), header_style="z")
    with pytest.raises(TypeError, match=re.escape("on_error must be 'allow' or 'deny', got None")):
        rate_limited(limiter(), on_error=None)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "limiter must be a limiter.RateLimiter or a function of the request returning one,"
            " got 5"
        ),
    ):
        rate_limited(5)


def test_a_misspelled_option_names_the_decorator():
    with pytest.raises(TypeError) as info:
        rate_limited(limiter(), key_fnc=header_key("X-API-Key"))
    assert str(info.value) == (
        "rate_limited() got an unexpected keyword argument 'key_fnc' (did you mean 'key_func'?)"
    )


# -- errors: only StoreError takes the on_error path ------------------------


# Callables and store bugs that propagate, and on_error allow/deny: the
# AdapterConformance suite (tests/adapters/test_adapter_conformance.py, TestHTTPServer)
# checks them here, handle_error's record included.


def test_the_failure_log_names_the_limiter_that_failed(caplog):
    clock = ManualClock(NOW)
    default = RateLimiter("10/second", clock=clock, name="default")
    login = RateLimiter("1/second", store=BrokenStore(), clock=clock, name="login")
    handler = rate_limited(default, rules=[Rule("/login", login)])(Hello)
    with caplog.at_level(logging.WARNING, logger="limiter.adapters"), serve(handler) as port:
        status, headers, body = request(port, path="/login")
    assert (status, body, named(headers, *RL)) == (200, b"hello", [])
    assert [r.getMessage() for r in caplog.records] == [
        "rate limiter 'login' failed; allowing requests (logged once per 60s)"
    ]


def test_a_client_chosen_huge_cost_is_denied_never_admitted():
    Hello.seen = []
    lim = limiter("600/minute")
    cost = lambda r: int(r.headers.get("X-Items", "1"))  # noqa: E731
    with serve(rate_limited(lim, cost=cost)(Hello)) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            for _ in range(1000):  # keep-alive: the 429 leaves the connection usable
                status, headers, body = request(
                    port, "POST", headers={"X-Items": "9" * 400}, conn=conn
                )
                assert (status, body) == (429, BODY_429)
        finally:
            conn.close()
    assert named(headers, *RL, "Content-Type", "Content-Length") == [
        ("X-RateLimit-Limit", "600"),
        ("X-RateLimit-Remaining", "600"),
        ("X-RateLimit-Reset", str(NOW)),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(BODY_429))),
    ]
    assert Hello.seen == []
    assert lim.peek("ip:127.0.0.1").remaining == 600
