"""Fuzzing the three adapters with spec-valid requests from a hostile client.

Every request is one a conforming server could hand over: a WSGI environ
(PEP 3333), an ASGI ``http`` or ``websocket`` scope, or the bytes of an
HTTP/1.1 request read by a real ``BaseHTTPRequestHandler`` (in-process, on
an in-memory socket).  The client controls everything it can: header names
and latin-1 values (huge ones, many repeats, garbage ``X-Forwarded-For`` and
``Forwarded``), the method, the path (percent-encoded, non-ASCII, invalid
UTF-8), the peer address (IPv4, IPv6, none, garbage) and, through a cost
callable, the cost (ints of any size, floats up to inf, ``Fraction``,
``Decimal``, 0).  The store may be down (``StoreError``).

Whatever it sends, no exception escapes, and the answer is exactly one of:
the app's own 200, the 429 with ``DENIED_BODY``, or the 503 with
``UNAVAILABLE_BODY``, in the sequence a reference limiter predicts.
"""

from __future__ import annotations

import asyncio
import io
from decimal import Decimal
from fractions import Fraction
from http.server import BaseHTTPRequestHandler
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import quote_from_bytes

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from limiter import DENIED_BODY, ManualClock, MemoryStore, RateLimiter, Rule, StoreError
from limiter.adapters import asgi, wsgi
from limiter.adapters.httpserver import rate_limited
from limiter.core.costs import validate_cost
from limiter.http.keys import header_key
from limiter.http.responses import UNAVAILABLE_BODY

NOW = 1_700_000_000.0
RATE, BURST = 1, 2
REPEAT = 3  # the same request, three times: the third meets an emptier bucket
TRUSTED = ["10.0.0.0/8", "fd00::/8", "unix"]
HELLO = b"hello"
RL_NAMES = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")

# -- the request a client may send -------------------------------------------

TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# RFC 9110 field-value characters: HTAB, SP, VCHAR, obs-text (latin-1).
VALUE_CHARS = "\t" + "".join(map(chr, range(0x20, 0x7F))) + "".join(map(chr, range(0x80, 0x100)))

tokens = st.text(alphabet=TCHAR, min_size=1, max_size=20)
plain_values = st.text(alphabet=VALUE_CHARS, max_size=80).map(lambda v: v.strip(" \t"))
huge_values = st.builds(
    lambda chunk, n: (chunk * n)[:60_000],  # under http.server's 65536-byte line limit
    st.text(alphabet=VALUE_CHARS.strip(), min_size=1, max_size=8),
    st.integers(1_000, 20_000),
)
addresses = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]:{8080}"),
    st.ip_addresses(v=4).map(lambda a: f"{a}:443"),
    st.sampled_from(["10.0.0.7", "10.1.2.3", "fd00::9", "unknown", "_hidden", "_x:_y"]),
    st.text(alphabet=VALUE_CHARS, max_size=30).map(lambda v: v.strip(" \t")),
)
xff_values = st.lists(addresses, max_size=6).map(", ".join)
forwarded_values = st.lists(
    st.tuples(
        st.sampled_from(["for", "FOR", "by", "proto", "host", "x"]),
        addresses.map(lambda a: f'"{a}"' if ":" in a and '"' not in a else a),
    ).map("=".join),
    max_size=5,
).map(lambda pairs: ", ".join(";".join(pairs[i : i + 2]) for i in range(0, len(pairs), 2)))

header_lines = st.one_of(
    st.tuples(tokens, plain_values),
    st.tuples(st.sampled_from(["X-Forwarded-For", "x-forwarded-for"]), xff_values),
    st.tuples(st.sampled_from(["Forwarded", "forwarded"]), forwarded_values),
    st.tuples(st.sampled_from(["X-API-Key", "X-Items"]), plain_values),
)
headers = st.builds(
    lambda lines, repeated, times, huge: lines + [repeated] * times + huge,
    st.lists(header_lines, max_size=12),
    header_lines,
    st.integers(0, 60),  # many repeats of one line
    st.lists(
        st.tuples(st.sampled_from(["X-API-Key", "X-Forwarded-For", "X-Big"]), huge_values),
        max_size=2,
    ),
)

methods = st.one_of(st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"]), tokens)
path_bytes = st.one_of(
    st.sampled_from([b"/", b"/health", b"/api", b"/api/items/7", b"/caf\xc3\xa9", b"/%2F"]),
    st.lists(
        st.one_of(st.binary(max_size=12), st.text(max_size=8).map(lambda t: t.encode("utf-8"))),
        max_size=5,
    ).map(lambda segments: b"/" + b"/".join(segments)),
)
peers = st.one_of(
    st.none(),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
    st.sampled_from(["10.0.0.1", "10.200.3.4", "fd00::1", "127.0.0.1", "::1", "fe80::1%eth0"]),
    st.text(max_size=40),  # garbage, as a custom server might report
)
costs = st.one_of(
    st.integers(0, 4),
    st.integers(min_value=0, max_value=10**400),
    st.floats(min_value=0, allow_nan=False, allow_infinity=True),
    st.fractions(min_value=0, max_value=10**30),
    # (allow_infinity=True with min_value=0 also yields Decimal("-Infinity"))
    st.decimals(min_value=0, allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [0, 0.0, 10**400, Fraction(10**400, 3), Decimal("1e400"), Decimal("1e-400"), Decimal("inf")]
    ),
)


class Settings:
    """One example's server side: the store may be down; on_error; the pinned header."""

    def __init__(self, cost: object, store_down: bool, on_error: str, proxy_header: str) -> None:
        self.cost = cost
        self.store_down = store_down
        self.on_error = on_error
        self.proxy_header = proxy_header

    def __repr__(self) -> str:
        return (
            f"Settings(cost={self.cost!r:.80}, store_down={self.store_down}, "
            f"on_error={self.on_error!r}, proxy_header={self.proxy_header!r})"
        )


class FlakyStore(MemoryStore):
    def __init__(self, down: bool) -> None:
        super().__init__()
        self.down = down

    def apply(self, key, limit, cost, now):
        if self.down:
            raise StoreError("backend down")
        return super().apply(key, limit, cost, now)


def guard_options(s: Settings) -> Tuple[RateLimiter, Dict[str, Any]]:
    clock = ManualClock(NOW)
    store = FlakyStore(s.store_down)
    default = RateLimiter(RATE, BURST, store=store, clock=clock, name="default")
    api = RateLimiter(RATE, BURST, store=store, clock=clock, name="api")
    return default, {
        "rules": [Rule("/api/*", api, key_func=header_key("X-API-Key"))],
        "exempt": lambda request: request.path == "/health",
        "cost": lambda request: s.cost,
        "trusted_proxies": TRUSTED,
        "proxy_header": s.proxy_header,
        "on_error": s.on_error,
    }


def expected(s: Settings, path: str) -> List[int]:
    """The statuses of REPEAT identical requests, from a reference limiter."""
    statuses = _expected(s, path)
    event(f"statuses {statuses}")  # shown by pytest --hypothesis-show-statistics
    return statuses


def _expected(s: Settings, path: str) -> List[int]:
    if path == "/health":
        return [200] * REPEAT  # exempt: the store is not even asked
    if s.store_down:
        return [200 if s.on_error == "allow" else 503] * REPEAT
    reference = RateLimiter(RATE, BURST, clock=ManualClock(NOW))
    cost = validate_cost(s.cost)
    return [200 if reference.check("k", cost).allowed else 429 for _ in range(REPEAT)]


def check_response(
    s: Settings,
    path: str,
    status: int,
    head: bool,
    hdrs: List[Tuple[str, str]],
    body: bytes,
    app_body: bytes = HELLO,
) -> None:
    """One response: the app's (``app_body``, with rate-limit headers when it was
    limited at all), or exactly the 429 or the 503 (no body for ``HEAD``)."""
    names = [name for name, _ in hdrs]
    for name, value in hdrs:
        assert isinstance(name, str) and isinstance(value, str)
        assert "\r" not in value and "\n" not in value
        value.encode("latin-1")
    limited = path != "/health" and not s.store_down
    if status == 200:
        assert body == app_body
        assert all(name in names for name in RL_NAMES) == limited
        assert any(name in names for name in RL_NAMES) == limited
    elif status == 429:
        assert body == (b"" if head else DENIED_BODY)
        assert ("Content-Length", str(len(DENIED_BODY))) in hdrs
    else:
        assert status == 503
        assert body == (b"" if head else UNAVAILABLE_BODY)
        assert [n for n in names if n in RL_NAMES] == []


request_settings = st.builds(
    Settings,
    costs,
    st.booleans(),
    st.sampled_from(["allow", "deny"]),
    st.sampled_from(["x-forwarded-for", "forwarded"]),
)

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

# -- WSGI ---------------------------------------------------------------------


def wsgi_hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [HELLO]


def make_environ(method: str, raw_path: bytes, lines: List[Tuple[str, str]], peer: Optional[str]):
    env: Dict[str, Any] = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": raw_path.decode("latin-1"),  # PEP 3333: the raw bytes, as latin-1
        "QUERY_STRING": "a=1&b=%FF",
        "SERVER_NAME": "example.org",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    if peer is not None:
        env["REMOTE_ADDR"] = peer
    for name, value in lines:
        upper = name.upper().replace("-", "_")
        var = upper if upper in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + upper
        # Servers join repeated fields with ", " (RFC 9110 5.3).
        env[var] = env[var] + ", " + value if var in env else value
    return env


@FUZZ
@given(request_settings, methods, path_bytes, headers, peers)
def test_wsgi(s, method, raw_path, lines, peer):
    limiter, options = guard_options(s)
    app = wsgi.RateLimitMiddleware(wsgi_hello, limiter, **options)
    path = raw_path.decode("utf-8", "replace")  # what the adapter makes of PATH_INFO
    statuses = []
    for _ in range(REPEAT):
        seen: Dict[str, Any] = {}

        def start_response(status, hdrs, exc_info=None, seen=seen):
            seen.update(status=status, headers=hdrs)
            return lambda data: None

        body = b"".join(app(make_environ(method, raw_path, lines, peer), start_response))
        status = int(seen["status"][:3])
        check_response(s, path, status, method == "HEAD", seen["headers"], body)
        statuses.append(status)
    assert statuses == expected(s, path)


# -- ASGI ---------------------------------------------------------------------


async def asgi_hello(scope, receive, send):
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]})
        await send({"type": "http.response.body", "body": HELLO})
    else:
        await receive()
        await send({"type": "websocket.accept"})


def make_scope(kind, method, raw_path, lines, peer, extensions):
    scope: Dict[str, Any] = {
        "type": kind,
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "scheme": "http" if kind == "http" else "ws",
        # ASGI: percent-decoded, UTF-8 decoded (servers replace invalid bytes).
        "path": raw_path.decode("utf-8", "replace"),
        "raw_path": quote_from_bytes(raw_path, safe="/").encode("ascii"),
        "query_string": b"a=1",
        "root_path": "",
        "headers": [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in lines],
        "client": None if peer is None else [peer, 50000],
        "server": ["127.0.0.1", 8000],
    }
    if kind == "http":
        scope["method"] = method.upper()
    elif extensions:
        scope["extensions"] = {"websocket.http.response": {}}
    return scope


@FUZZ
@given(request_settings, methods, path_bytes, headers, peers, st.booleans(), st.booleans())
def test_asgi(s, method, raw_path, lines, peer, websocket, extension):
    limiter, options = guard_options(s)
    app = asgi.RateLimitMiddleware(asgi_hello, limiter, **options)
    path = raw_path.decode("utf-8", "replace")
    kind = "websocket" if websocket else "http"

    async def one() -> List[Dict[str, Any]]:
        sent: List[Dict[str, Any]] = []
        incoming = [
            {"type": "websocket.connect"}
            if websocket
            else {"type": "http.request", "body": b"", "more_body": False}
        ]

        async def receive():
            return incoming.pop(0) if incoming else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        await app(make_scope(kind, method, raw_path, lines, peer, extension), receive, send)
        return sent

    async def run_all() -> List[List[Dict[str, Any]]]:
        return [await one() for _ in range(REPEAT)]

    statuses = []
    for sent in asyncio.run(run_all()):
        if websocket:
            first = sent[0]
            if first == {"type": "websocket.accept"}:
                status = 200
            elif first["type"] == "websocket.close":
                assert not extension and first == {"type": "websocket.close", "code": 1013}
                status = 503 if s.store_down else 429
            else:
                assert extension and first["type"] == "websocket.http.response.start"
                status = first["status"]
                body = sent[1]["body"]
                assert body == (DENIED_BODY if status == 429 else UNAVAILABLE_BODY)
            assert len(sent) == (2 if first["type"] == "websocket.http.response.start" else 1)
        else:
            start, end = sent
            status = start["status"]
            hdrs = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in start["headers"]]
            if status == 200:
                hdrs = [(n, v) for n, v in hdrs if n != "x-app"]
            check_response(s, path, status, method.upper() == "HEAD", hdrs, end["body"])
            assert start["type"] == "http.response.start" and end["type"] == "http.response.body"
        statuses.append(status)
    assert statuses == expected(s, path)


# -- http.server ---------------------------------------------------------------


class InMemorySocket:
    """What StreamRequestHandler needs of a connected socket: the request bytes in, sendall out."""

    def __init__(self, data: bytes) -> None:
        self._in = io.BytesIO(data)
        self.out = io.BytesIO()

    def makefile(self, mode: str, bufsize: int = -1) -> io.BytesIO:
        assert "r" in mode  # wbufsize 0: the handler writes through sendall
        return self._in

    def sendall(self, data: bytes) -> None:
        self.out.write(data)


class Hello(BaseHTTPRequestHandler):
    def _reply(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(HELLO)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(HELLO)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # every method the client invents is served
            return self._reply
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def http_exchange(handler, method, target, lines, peer) -> Tuple[int, List[Tuple[str, str]], bytes]:
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in lines)
    sock = InMemorySocket((head + "\r\n").encode("latin-1"))
    address = "" if peer is None else (peer, 50000)  # AF_UNIX peers are ""
    handler(sock, address, None)  # handles the request in __init__, as socketserver does
    raw_head, _, body = sock.out.getvalue().partition(b"\r\n\r\n")
    status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
    hdrs = [tuple(line.split(": ", 1)) for line in header_lines]
    return int(status_line.split()[1]), hdrs, body  # type: ignore[return-value]


@FUZZ
@given(request_settings, methods, path_bytes, headers, peers, st.booleans())
def test_http_server(s, method, raw_path, lines, peer, absolute):
    limiter, options = guard_options(s)
    handler = rate_limited(limiter, **options)(Hello)
    # Some Python versions collapse a leading "//" in the target: avoid it.
    raw_path = b"/" + raw_path.lstrip(b"/")
    target = quote_from_bytes(raw_path, safe="/")
    if absolute:
        target = "http://example.org" + target
    path = raw_path.decode("utf-8", "replace")
    head = method == "HEAD"
    statuses = []
    for _ in range(REPEAT):
        status, hdrs, body = http_exchange(handler, method, target, lines, peer)
        check_response(s, path, status, head, hdrs, body, b"" if head else HELLO)
        statuses.append(status)
    assert statuses == expected(s, path)
