"""Per-route rules in all three adapters, with the documented example end to end.

POST /login: 5/minute by IP; /api/*: 100/minute by X-API-Key; the rest 1000/hour by IP.
"""

from __future__ import annotations

import asyncio
import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from limiter import ManualClock, MemoryStore, RateLimiter, Rule
from limiter.adapters import asgi, wsgi
from limiter.adapters.httpserver import rate_limited
from limiter.http.keys import header_key

NOW = 1_700_000_000.0
Response = Tuple[int, Dict[str, str]]
Call = Callable[[str, str, Dict[str, str], str], Response]


def rule_table(clock: ManualClock) -> Tuple[RateLimiter, List[Rule]]:
    store = MemoryStore()
    login = RateLimiter("5/minute", store=store, clock=clock, name="login")
    api = RateLimiter("100/minute", store=store, clock=clock, name="api")
    default = RateLimiter("1000/hour", store=store, clock=clock, name="default")
    rules = [
        Rule("/login", login, methods=["POST"]),
        Rule("/api/*", api, key_func=header_key("X-API-Key")),
    ]
    return default, rules


def wsgi_caller(clock: ManualClock) -> Call:
    default, rules = rule_table(clock)

    def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    mw = wsgi.RateLimitMiddleware(app, default, rules=rules)

    def call(
        method: str, path: str, headers: Dict[str, str], ip: str
    ) -> Tuple[int, Dict[str, str]]:
        environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "REMOTE_ADDR": ip}
        environ.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()})
        got: List[Any] = []
        body = b"".join(mw(environ, lambda status, hdrs, exc_info=None: got.extend([status, hdrs])))
        assert body in (
            b"ok",
            b'{"status":429,"code":"rate_limited","message":"too many requests"}',
        )
        return int(got[0][:3]), dict(got[1])

    return call


def asgi_caller(clock: ManualClock) -> Call:
    default, rules = rule_table(clock)

    async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    mw = asgi.RateLimitMiddleware(app, default, rules=rules)

    def call(
        method: str, path: str, headers: Dict[str, str], ip: str
    ) -> Tuple[int, Dict[str, str]]:
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": (ip, 50000),
        }
        sent: List[Dict[str, Any]] = []

        async def receive() -> Dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(mw(scope, receive, send))
        start = sent[0]
        return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}

    return call


@pytest.fixture
def httpserver_caller() -> Iterator[Callable[[ManualClock], Call]]:
    servers: List[ThreadingHTTPServer] = []

    def make(clock: ManualClock) -> Call:
        default, rules = rule_table(clock)

        # The peer is always 127.0.0.1 here, so trust it as a proxy and let
        # X-Forwarded-For stand for the client address under test.
        @rate_limited(
            default, rules=rules, trusted_proxies=["127.0.0.1"], proxy_header="x-forwarded-for"
        )
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]

        def call(
            method: str, path: str, headers: Dict[str, str], ip: str
        ) -> Tuple[int, Dict[str, str]]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request(method, path, headers={**headers, "X-Forwarded-For": ip})
                response = conn.getresponse()
                response.read()
                return response.status, dict(response.getheaders())
            finally:
                conn.close()

        return call

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def exercise(call: Call, clock: ManualClock) -> None:
    a, b = "198.51.100.1", "198.51.100.2"
    # POST /login: 5 a minute per IP.
    assert [call("POST", "/login", {}, a)[0] for _ in range(6)] == [200] * 5 + [429]
    status, headers = call("POST", "/login", {}, a)
    assert (status, headers["Retry-After"], headers["X-RateLimit-Limit"]) == (429, "12", "5")
    assert call("POST", "/login", {}, b)[0] == 200  # another IP, its own bucket
    # Dot segments and doubled slashes meet the same rule: a server that serves files
    # resolves them, so they must not fall through to the looser default limiter.
    for path in ("/x/../login", "//login", "/./login", "/../login"):
        status, headers = call("POST", path, {}, a)
        assert (status, headers["X-RateLimit-Limit"]) == (429, "5"), path
    # GET /login is not the rule's method: the default 1000/hour by IP.
    status, headers = call("GET", "/login", {}, a)
    assert (status, headers["X-RateLimit-Limit"]) == (200, "1000")
    # /api/*: 100 a minute per API key, whatever the IP.
    key1 = {"X-API-Key": "k1"}
    codes = [call("GET", f"/api/items/{i}", key1, a if i % 2 else b)[0] for i in range(101)]
    assert codes == [200] * 100 + [429]
    status, headers = call("GET", "/api", {"X-API-Key": "k2"}, a)
    assert (status, headers["X-RateLimit-Remaining"]) == (200, "99")
    # /api/* without a key falls back to the client IP, in the api limiter.
    status, headers = call("GET", "/api/items", {}, b)
    assert (status, headers["X-RateLimit-Limit"], headers["X-RateLimit-Remaining"]) == (
        200,
        "100",
        "99",
    )
    # Everything else: the default limiter; its bucket for IP a already paid 1.
    status, headers = call("GET", "/apiary", {}, a)
    assert (status, headers["X-RateLimit-Limit"], headers["X-RateLimit-Remaining"]) == (
        200,
        "1000",
        "998",
    )
    # A minute later the login bucket has refilled.
    clock.advance(60)
    assert call("POST", "/login", {}, a)[0] == 200


def test_rules_in_wsgi() -> None:
    clock = ManualClock(NOW)
    exercise(wsgi_caller(clock), clock)


def test_rules_in_asgi() -> None:
    clock = ManualClock(NOW)
    exercise(asgi_caller(clock), clock)


def test_rules_in_http_server(httpserver_caller: Callable[[ManualClock], Call]) -> None:
    clock = ManualClock(NOW)
    exercise(httpserver_caller(clock), clock)


def test_rule_cost_number_and_callable_and_exempt() -> None:
    clock = ManualClock(NOW)
    default = RateLimiter(1, 10, clock=clock, name="default")
    export = RateLimiter(1, 10, clock=clock, name="export")
    rules = [
        Rule("/export", export, cost=4),
        Rule("/batch", default, cost=lambda request: int(request.headers.get("X-Items", "1"))),
    ]

    def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    mw = wsgi.RateLimitMiddleware(
        app, default, rules=rules, exempt=lambda request: request.path == "/health"
    )

    def call(path: str, items: Optional[str] = None) -> Dict[str, str]:
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": "203.0.113.1"}
        if items is not None:
            environ["HTTP_X_ITEMS"] = items
        got: List[Any] = []
        mw(environ, lambda status, headers, exc_info=None: got.extend([status, headers]))
        return {"status": got[0][:3], **dict(got[1])}

    assert call("/export")["X-RateLimit-Remaining"] == "6"
    assert call("/export")["X-RateLimit-Remaining"] == "2"
    assert call("/export")["status"] == "429"
    assert call("/batch", "7")["X-RateLimit-Remaining"] == "3"
    assert call("/other")["X-RateLimit-Remaining"] == "2"
    assert call("/health") == {"status": "200"}  # exempt: no limiter, no headers


def test_rule_cost_mapping_charges_each_limit_its_amount() -> None:
    clock = ManualClock(NOW)
    default = RateLimiter(1, 10, clock=clock, name="default")
    llm = RateLimiter({"requests": "10/minute", "tokens": "100/minute"}, clock=clock, name="llm")
    with pytest.raises(ValueError, match=r"cost names no limit of this limiter: 'tokenz'"):
        Rule("/complete", llm, cost={"tokenz": 40})  # loud at start-up
    with pytest.raises(TypeError, match="cost of limit 'tokens'"):
        Rule("/complete", llm, cost={"tokens": True})
    given = {"requests": 1, "tokens": 40}
    rules = [Rule("/complete", llm, cost=given)]
    given["tokens"] = 1  # the rule keeps the mapping it checked

    def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    mw = wsgi.RateLimitMiddleware(app, default, rules=rules)

    def status() -> str:
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/complete", "REMOTE_ADDR": "192.0.2.9"}
        got: List[Any] = []
        mw(environ, lambda status, headers, exc_info=None: got.extend([status, headers]))
        return str(got[0][:3])

    assert [status() for _ in range(3)] == ["200", "200", "429"]  # 100 tokens pay for 2
    remaining = llm.peek("ip:192.0.2.9").results
    assert [r.remaining for r in remaining] == [8, 20]


def test_rules_refuse_limiters_that_would_share_keys() -> None:
    store = MemoryStore()
    a = RateLimiter("5/minute", store=store)
    b = RateLimiter("5/minute", store=store)

    def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        return []

    with pytest.raises(ValueError, match="share the store"):
        wsgi.RateLimitMiddleware(app, a, rules=[Rule("/login", b)])
    with pytest.raises(TypeError, match=r"rules must be a list of limiter\.Rule, got \[\("):
        wsgi.RateLimitMiddleware(app, a, rules=[("/login", b)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"rules must be a list of limiter\.Rule, got Rule\("):
        wsgi.RateLimitMiddleware(app, a, rules=Rule("/login", b))  # type: ignore[arg-type]
