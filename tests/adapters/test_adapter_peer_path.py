"""The adapters' fast path (``Guard.decide_peer``) answers exactly as the full one.

A guard whose decision needs only the client address (no ``key_func``,
``exempt``, rules, ...) keys requests with one dict lookup and builds the
request view only for ``on_limited``.  Each test sends one sequence of
requests to an adapter on that path and to a twin forced onto the full path
(an ``exempt`` that exempts nothing), and compares every status, header and
body.
"""

from __future__ import annotations

import asyncio
import io
from http.server import BaseHTTPRequestHandler
from typing import Any, Dict, List, Optional, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st

from limiter import ManualClock, RateLimiter, Response
from limiter.adapters import asgi, wsgi
from limiter.adapters.httpserver import rate_limited
from limiter.http.guard import Guard

NOW = 1_700_000_000.5
PEERS = [
    "203.0.113.7",
    "203.0.113.8",
    "2001:db8::1",
    "2001:db8::2",  # same /64 as the one above: the same key
    "::ffff:203.0.113.7",  # IPv4-mapped: the key of 203.0.113.7
    "10.0.0.1",  # a trusted proxy when proxies are trusted
    "",
    "not an address",
    None,
]
XFF = [None, "198.51.100.1", "198.51.100.1, 10.0.0.2", "garbage", ""]
Config = Dict[str, Any]
Sent = List[Tuple[int, int, Optional[str], Optional[str]]]  # (ticks, peer, xff, method)

configs = st.fixed_dictionaries(
    {
        "header_style": st.sampled_from(["x", "draft", "both", None]),
        "mode": st.sampled_from(["enforce", "shadow"]),
        "trusted": st.booleans(),
        "on_limited": st.booleans(),
    }
)
requests = st.lists(
    st.tuples(
        st.integers(0, 3),  # clock ticks of 0.25 s before the request
        st.integers(0, len(PEERS) - 1),
        st.sampled_from(XFF),
        st.sampled_from(["GET", "HEAD"]),
    ),
    min_size=1,
    max_size=12,
)


def custom_on_limited(request: Any, result: Any, headers: List[Tuple[str, str]]) -> Response:
    # Reads the request view, which the fast path builds only for this call.
    body = f"{request.method} {request.path} {request.peer}".encode()
    return Response(418, [*headers, ("X-Path", request.path)], body)


def options(config: Config, fast: bool) -> Tuple[RateLimiter, ManualClock, Dict[str, Any]]:
    clock = ManualClock(NOW)
    limiter = RateLimiter(2, 3, clock=clock)
    opts: Dict[str, Any] = {"header_style": config["header_style"], "mode": config["mode"]}
    if config["trusted"]:
        opts.update(trusted_proxies=["10.0.0.0/8"], proxy_header="x-forwarded-for")
    if config["on_limited"]:
        opts["on_limited"] = custom_on_limited
    if not fast:
        opts["exempt"] = lambda request: False  # same decisions, the full path
    return limiter, clock, opts


def run_asgi(config: Config, sent: Sent, fast: bool) -> List[Any]:
    limiter, clock, opts = options(config, fast)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"a", b"1")]})
        await send({"type": "http.response.body", "body": b"hello"})

    middleware = asgi.RateLimitMiddleware(app, limiter, **opts)
    assert (middleware._decide_peer is not None) == fast
    out: List[Any] = []

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Dict[str, Any]) -> None:
        out.append(message)

    async def main() -> None:
        for ticks, peer, xff, method in sent:
            clock.advance(ticks * 0.25)
            headers = [(b"host", b"x")]
            if xff is not None:
                headers.append((b"x-forwarded-for", xff.encode("latin-1")))
            address = PEERS[peer]
            await middleware(
                {
                    "type": "http",
                    "method": method,
                    "path": "/p",
                    "headers": headers,
                    "client": None if address is None else (address, 1234),
                },
                receive,
                send,
            )

    asyncio.run(main())
    return out


def run_wsgi(config: Config, sent: Sent, fast: bool) -> List[Any]:
    limiter, clock, opts = options(config, fast)

    def app(environ: Any, start_response: Any) -> List[bytes]:
        start_response("200 OK", [("A", "1")])
        return [b"hello"]

    middleware = wsgi.RateLimitMiddleware(app, limiter, **opts)
    assert (middleware._decide_peer is not None) == fast
    out: List[Any] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        out.append((status, list(headers)))

    for ticks, peer, xff, method in sent:
        clock.advance(ticks * 0.25)
        environ: Dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": "/p"}
        if PEERS[peer] is not None:
            environ["REMOTE_ADDR"] = PEERS[peer]
        if xff is not None:
            environ["HTTP_X_FORWARDED_FOR"] = xff
        out.append(b"".join(middleware(environ, start_response)))
    return out


class _Socket:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.out = io.BytesIO()

    def makefile(self, mode: str, bufsize: int = -1) -> Any:
        return io.BytesIO(self.raw) if "r" in mode else self.out

    def sendall(self, data: bytes) -> None:
        self.out.write(data)


def run_httpserver(config: Config, sent: Sent, fast: bool) -> List[bytes]:
    limiter, clock, opts = options(config, fast)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("A", "1")
            self.end_headers()
            self.wfile.write(b"hello")

        do_HEAD = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def date_time_string(self, timestamp: Any = None) -> str:
            return "today"  # the two runs must not differ by the Date header

    limited = rate_limited(limiter, **opts)(Handler)
    guard: Guard = limited.limiter_guard  # type: ignore[attr-defined]
    assert (guard.peer_decider() is not None) == fast
    out: List[bytes] = []
    for ticks, peer, xff, method in sent:
        clock.advance(ticks * 0.25)
        raw = f"{method} /p HTTP/1.0\r\nHost: x\r\n"
        if xff is not None:
            raw += f"X-Forwarded-For: {xff}\r\n"
        sock = _Socket((raw + "\r\n").encode("latin-1"))
        address = PEERS[peer]
        limited(sock, ("" if address is None else address, 1234), None)
        out.append(sock.out.getvalue())
    return out


@settings(max_examples=150, deadline=None)
@given(configs, requests)
def test_asgi_fast_path_answers_as_the_full_path(config: Config, sent: Sent) -> None:
    assert run_asgi(config, sent, fast=True) == run_asgi(config, sent, fast=False)


@settings(max_examples=150, deadline=None)
@given(configs, requests)
def test_wsgi_fast_path_answers_as_the_full_path(config: Config, sent: Sent) -> None:
    assert run_wsgi(config, sent, fast=True) == run_wsgi(config, sent, fast=False)


@settings(max_examples=60, deadline=None)
@given(configs, requests)
def test_httpserver_fast_path_answers_as_the_full_path(config: Config, sent: Sent) -> None:
    assert run_httpserver(config, sent, fast=True) == run_httpserver(config, sent, fast=False)


def test_fast_path_keys_and_headers_exactly() -> None:
    # Two peers of one IPv6 /64 share a bucket; an IPv4 peer has its own.
    clock = ManualClock(NOW)
    out: List[Any] = []

    def app(environ: Any, start_response: Any) -> List[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        out.append((status, dict(headers)))

    middleware = wsgi.RateLimitMiddleware(app, RateLimiter(1, 2, clock=clock))
    for peer in ["2001:db8::1", "2001:db8::2", "2001:db8::3", "203.0.113.7"]:
        middleware({"REQUEST_METHOD": "GET", "REMOTE_ADDR": peer}, start_response)
    assert [(s, h.get("X-RateLimit-Remaining"), h.get("Retry-After")) for s, h in out] == [
        ("200 OK", "1", None),
        ("200 OK", "0", None),
        ("429 Too Many Requests", "0", "1"),
        ("200 OK", "1", None),
    ]
    assert out[0][1]["X-RateLimit-Limit"] == "2"
    assert out[0][1]["X-RateLimit-Reset"] == str(int(NOW) + 2)  # 1.0 s to refill, rounded up
