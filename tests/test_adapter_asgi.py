"""The ASGI middleware, called in-process with scope / receive / send."""

from __future__ import annotations

import asyncio
import copy
import logging

import pytest

from limiter import ManualClock, MemoryStore, RateLimiter, StoreError
from limiter.adapters import DENIED_BODY, UNAVAILABLE_BODY
from limiter.adapters.asgi import RateLimitMiddleware, request_info
from limiter.adapters.wsgi import RateLimitMiddleware as WSGIMiddleware
from limiter.keys import header_key

NOW = 1_700_000_000
BODY_429 = b'{"status":429,"code":"rate_limited","message":"too many requests"}'


class App:
    """An ASGI app recording what reached it."""

    def __init__(self):
        self.scopes = []

    async def __call__(self, scope, receive, send):
        self.scopes.append(scope)
        if scope["type"] == "http":
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]}
            )
            await send({"type": "http.response.body", "body": b"hello"})
        elif scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept"})
        elif scope["type"] == "lifespan":
            message = await receive()
            await send({"type": message["type"] + ".complete"})


def scope(peer=("203.0.113.7", 5000), method="GET", path="/", headers=(), kind="http", **extra):
    s = {
        "type": kind,
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": list(headers),
        "client": peer,
    }
    if kind == "websocket":
        del s["method"]
    s.update(extra)
    return s


def run(app, s=None, incoming=({"type": "http.request", "body": b"", "more_body": False},)):
    sent = []
    queue = list(incoming)

    async def receive():
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope() if s is None else s, receive, send))
    return sent


def status_of(sent):
    return sent[0]["status"]


def limiter(rate="3/second", **kw):
    return RateLimiter(rate, clock=ManualClock(NOW), **kw)


def test_admits_exactly_burst_then_429_with_exact_response():
    inner = App()
    app = RateLimitMiddleware(inner, limiter())
    assert [status_of(run(app)) for _ in range(3)] == [200, 200, 200]
    sent = run(app)
    assert sent == [
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"X-RateLimit-Limit", b"3"),
                (b"X-RateLimit-Remaining", b"0"),
                (b"X-RateLimit-Reset", str(NOW + 1).encode()),
                (b"Retry-After", b"1"),
                (b"Content-Type", b"application/json"),
                (b"Content-Length", str(len(BODY_429)).encode()),
            ],
        },
        {"type": "http.response.body", "body": BODY_429},
    ]
    assert DENIED_BODY == BODY_429
    assert len(inner.scopes) == 3


def test_allowed_headers_are_appended_and_the_apps_message_is_not_modified():
    start = {"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]}

    async def inner(scope, receive, send):
        await send(start)
        await send({"type": "http.response.body", "body": b"hi"})

    sent = run(RateLimitMiddleware(inner, limiter()))
    assert sent[0]["headers"] == [
        (b"x-app", b"1"),
        (b"X-RateLimit-Limit", b"3"),
        (b"X-RateLimit-Remaining", b"2"),
        (b"X-RateLimit-Reset", str(NOW + 1).encode()),
    ]
    assert start == {"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]}
    assert sent[1] == {"type": "http.response.body", "body": b"hi"}


def test_the_scope_is_never_mutated():
    s = scope(headers=[(b"x-forwarded-for", b"1.2.3.4")])
    before = copy.deepcopy(s)
    inner = App()
    app = RateLimitMiddleware(inner, limiter("1/second"), trusted_proxies="203.0.113.7")
    run(app, s)
    run(app, s)
    assert s == before
    assert inner.scopes == [s]
    assert inner.scopes[0] is s


def test_head_429_has_no_body():
    app = RateLimitMiddleware(App(), limiter("1/second"))
    run(app, scope(method="HEAD"))
    sent = run(app, scope(method="HEAD"))
    assert status_of(sent) == 429
    assert sent[1] == {"type": "http.response.body", "body": b""}


def test_repeated_request_headers_are_all_seen():
    lim = limiter("1/second")
    app = RateLimitMiddleware(App(), lim, trusted_proxies=["10.0.0.0/8"])
    headers = [(b"x-forwarded-for", b"6.6.6.6"), (b"x-forwarded-for", b"198.51.100.4, 10.0.0.9")]
    run(app, scope(peer=("10.0.0.1", 1), headers=headers))
    assert lim.peek("ip:198.51.100.4").remaining == 0
    info = request_info(scope(headers=[(b"x-a", b"1"), (b"X-A", b"2"), (b"x-b", b"3")]))
    assert info.headers.get_all("X-A") == ["1", "2"]
    assert info.headers.get("x-a") == "1, 2"


def test_request_info_from_scope():
    info = request_info(scope(peer=None, method="PUT", path="/café", headers=[(b"a", b"\xe9")]))
    assert (info.method, info.path, info.peer) == ("PUT", "/café", None)
    assert info.headers.get("A") == "é"
    assert request_info(scope(peer=("::1", 1, 0, 0))).peer == "::1"


def test_no_client_uses_the_fallback_key():
    lim = limiter("1/second")
    app = RateLimitMiddleware(App(), lim)
    assert status_of(run(app, scope(peer=None))) == 200
    assert status_of(run(app, scope(peer=None))) == 429
    assert lim.peek("ip:unknown").remaining == 0


def test_lifespan_and_unknown_scopes_pass_through_untouched():
    inner = App()
    lim = limiter("1/second")
    app = RateLimitMiddleware(inner, lim)
    life = {"type": "lifespan", "asgi": {"version": "3.0"}}
    sent = run(app, life, incoming=[{"type": "lifespan.startup"}])
    assert sent == [{"type": "lifespan.startup.complete"}]
    other = {"type": "custom.protocol"}
    run(app, other, incoming=[])
    assert inner.scopes == [life, other]
    assert lim.peek("ip:unknown").remaining == 1


class AsyncOnlyStore:
    """An AsyncStore (no sync apply) that yields to the loop, like a network store."""

    def __init__(self):
        self.inner = MemoryStore()
        self.calls = 0

    async def aapply(self, key, limit, cost, now):
        self.calls += 1
        await asyncio.sleep(0)
        return self.inner.apply(key, limit, cost, now)

    async def aapply_many(self, keys, limits, cost, now):
        await asyncio.sleep(0)
        return self.inner.apply_many(keys, limits, cost, now)

    async def areset(self, key):
        self.inner.reset(key)


def test_http_uses_the_async_store():
    store = AsyncOnlyStore()
    app = RateLimitMiddleware(App(), limiter("2/second", store=store))
    assert [status_of(run(app)) for _ in range(3)] == [200, 200, 429]
    assert store.calls == 3


def test_async_only_store_is_refused_by_sync_adapters():
    with pytest.raises(ValueError, match="async only"):
        WSGIMiddleware(App(), limiter(store=AsyncOnlyStore()))


def ws_scope(extensions=None, peer=("203.0.113.7", 1)):
    s = scope(kind="websocket", peer=peer)
    if extensions is not None:
        s["extensions"] = extensions
    return s


CONNECT = [{"type": "websocket.connect"}]


def test_websocket_limited_with_http_response_extension():
    inner = App()
    app = RateLimitMiddleware(inner, limiter("1/second"))
    ext = {"websocket.http.response": {}}
    assert run(app, ws_scope(ext), CONNECT) == [{"type": "websocket.accept"}]
    sent = run(app, ws_scope(ext), CONNECT)
    assert sent[0]["type"] == "websocket.http.response.start"
    assert sent[0]["status"] == 429
    assert (b"Retry-After", b"1") in sent[0]["headers"]
    assert sent[1] == {"type": "websocket.http.response.body", "body": BODY_429}
    assert len(inner.scopes) == 1


def test_websocket_limited_without_extension_is_closed_before_accept():
    app = RateLimitMiddleware(App(), limiter("1/second"))
    run(app, ws_scope(), CONNECT)
    assert run(app, ws_scope({}), CONNECT) == [{"type": "websocket.close", "code": 1013}]
    assert run(app, ws_scope(), CONNECT) == [{"type": "websocket.close", "code": 1013}]


def test_websocket_client_gone_before_connect_sends_nothing():
    app = RateLimitMiddleware(App(), limiter("1/second"))
    run(app, ws_scope(), CONNECT)
    assert run(app, ws_scope(), [{"type": "websocket.disconnect", "code": 1006}]) == []


def test_exempt_key_func_and_cost():
    app = RateLimitMiddleware(
        App(),
        limiter("10/second"),
        exempt=lambda r: r.path.startswith("/health"),
        key_func=header_key("X-API-Key"),
        cost=lambda r: 10 if r.method == "POST" else 1,
    )
    for _ in range(3):
        sent = run(app, scope(path="/health"))
        assert sent[0]["headers"] == [(b"x-app", b"1")]
    key = [(b"x-api-key", b"k")]
    assert status_of(run(app, scope(method="POST", headers=key))) == 200
    assert status_of(run(app, scope(headers=key))) == 429
    assert status_of(run(app, scope())) == 200  # another bucket: the client IP


class BrokenStore(MemoryStore):
    nonblocking = False  # a network store, awaited like Redis

    async def aapply(self, key, limit, cost, now):
        raise StoreError("redis is down")


def test_store_failure_allow_and_deny(caplog):
    with caplog.at_level(logging.WARNING, logger="limiter.adapters"):
        app = RateLimitMiddleware(App(), limiter(store=BrokenStore()))
        sent = run(app)
        assert sent[0] == {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"x-app", b"1")],
        }
    assert "redis is down" in caplog.text
    deny = RateLimitMiddleware(App(), limiter(store=BrokenStore()), on_error="deny")
    sent = run(deny)
    assert status_of(sent) == 503
    assert sent[1]["body"] == UNAVAILABLE_BODY
    assert (b"Content-Type", b"application/json") in sent[0]["headers"]


def test_bad_options_are_value_errors():
    with pytest.raises(ValueError, match="'nope'"):
        RateLimitMiddleware(App(), limiter(), header_style="nope")
    with pytest.raises(ValueError, match="limiter"):
        RateLimitMiddleware(App(), "10/second")
