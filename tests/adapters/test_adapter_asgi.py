"""The ASGI middleware, called in-process with scope / receive / send.

What every adapter must do is in test_adapter_conformance.py (AdapterConformance);
this file keeps what is particular to this adapter.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re

import pytest

from limiter import DENIED_BODY, ManualClock, MemoryStore, RateLimiter, Rule, StoreError
from limiter.adapters.asgi import RateLimitMiddleware, request_info
from limiter.adapters.wsgi import RateLimitMiddleware as WSGIMiddleware
from limiter.http.keys import header_key
from limiter.http.responses import UNAVAILABLE_BODY

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
    app = RateLimitMiddleware(
        inner, limiter("1/second"), trusted_proxies="203.0.113.7", proxy_header="x-forwarded-for"
    )
    run(app, s)
    run(app, s)
    assert s == before
    assert inner.scopes == [s]
    assert inner.scopes[0] is s


def test_repeated_request_headers_are_all_seen():
    lim = limiter("1/second")
    app = RateLimitMiddleware(
        App(), lim, trusted_proxies=["10.0.0.0/8"], proxy_header="x-forwarded-for"
    )
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


def test_bad_options_value_and_type_errors():
    with pytest.raises(ValueError, match="'nope'"):
        RateLimitMiddleware(App(), limiter(), header_style="nope")
    with pytest.raises(
        TypeError,
        match=re.escape("header_style must be one of 'x', 'draft', 'both' or None, got 5"),
    ):
        RateLimitMiddleware(App(), limiter(), header_style=5)
    with pytest.raises(TypeError, match=re.escape("on_error must be 'allow' or 'deny', got 1")):
        RateLimitMiddleware(App(), limiter(), on_error=1)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "limiter must be a limiter.RateLimiter or a function of the request returning one,"
            " got '10/second'"
        ),
    ):
        RateLimitMiddleware(App(), "10/second")
    with pytest.raises(TypeError, match=re.escape("app must be an ASGI callable, got 'app'")):
        RateLimitMiddleware("app", limiter())


def test_a_misspelled_option_names_the_middleware():
    message = (
        "RateLimitMiddleware() got an unexpected keyword argument 'key_fnc'"
        " (did you mean 'key_func'?)"
    )
    with pytest.raises(TypeError) as info:
        RateLimitMiddleware(App(), limiter(), key_fnc=header_key("X-API-Key"))
    assert str(info.value) == message
    # As Starlette's add_middleware / Middleware(...) calls it: keywords only.
    with pytest.raises(TypeError) as info:
        RateLimitMiddleware(app=App(), limiter=limiter(), key_fnc=header_key("X-API-Key"))
    assert str(info.value) == message


# -- errors: only StoreError takes the on_error path ------------------------


class AppBug(Exception):
    pass


def fail(*args):
    raise AppBug("bug in the app's callable")


class BuggyStore(MemoryStore):
    """A store with a bug (not an outage): the in-memory path, called directly."""

    def apply(self, key, limit, cost, now):
        raise RuntimeError("bug in the store")


class BuggyAsyncStore(MemoryStore):
    nonblocking = False  # awaited, like a network store

    async def aapply(self, key, limit, cost, now):
        raise RuntimeError("bug in the store")


@pytest.mark.parametrize("on_error", ["allow", "deny"])
def test_only_store_error_takes_the_on_error_path(on_error):
    # The app's own callables fail: the exception leaves the app call (the
    # server answers 500), as one from the app would; nothing was sent.
    for option in ("key_func", "cost", "exempt", "on_limited"):
        inner = App()
        app = RateLimitMiddleware(inner, limiter("1/second"), on_error=on_error, **{option: fail})
        if option == "on_limited":
            assert status_of(run(app)) == 200  # on_limited runs for a limited request only
        sent = []

        async def send(message, sent=sent):
            sent.append(message)

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        for s in (scope(), ws_scope()):
            with pytest.raises(AppBug):
                asyncio.run(app(s, receive, send))
        assert sent == []
        assert len(inner.scopes) == (1 if option == "on_limited" else 0)
    # Any exception of the limiter call that is not a StoreError propagates,
    # on the direct (in-memory) path and on the awaited one, http and websocket.
    for store in (BuggyStore(), BuggyAsyncStore()):
        app = RateLimitMiddleware(App(), limiter(store=store), on_error=on_error)
        for s in (scope(), ws_scope()):
            with pytest.raises(RuntimeError, match="bug in the store"):
                run(app, s, CONNECT)
    # A StoreError is the store being down: on_error decides, as before.
    app = RateLimitMiddleware(App(), limiter(store=BrokenStore()), on_error=on_error)
    assert status_of(run(app)) == (200 if on_error == "allow" else 503)


def test_the_failure_log_names_the_limiter_that_failed(caplog):
    clock = ManualClock(NOW)
    default = RateLimiter("10/second", clock=clock, name="default")
    login = RateLimiter("1/second", store=BrokenStore(), clock=clock, name="login")
    app = RateLimitMiddleware(App(), default, rules=[Rule("/login", login)])
    with caplog.at_level(logging.WARNING, logger="limiter.adapters"):
        sent = run(app, scope(path="/login"))
    assert sent[0] == {"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]}
    assert [r.getMessage() for r in caplog.records] == [
        "rate limiter 'login' failed; allowing requests (logged once per 60s)"
    ]
    assert caplog.records[0].exc_info[0] is StoreError


def test_a_client_chosen_huge_cost_is_denied_never_admitted():
    inner = App()
    lim = limiter("600/minute")
    app = RateLimitMiddleware(inner, lim, cost=lambda r: int(r.headers.get("X-Items", "1")))
    s = scope(method="POST", headers=[(b"x-items", b"9" * 400)])
    for _ in range(1000):
        sent = run(app, s)
        assert [m.get("status") for m in sent] == [429, None]
        assert sent[1] == {"type": "http.response.body", "body": BODY_429}
    assert sent[0]["headers"] == [
        (b"X-RateLimit-Limit", b"600"),
        (b"X-RateLimit-Remaining", b"600"),
        (b"X-RateLimit-Reset", str(NOW).encode()),
        (b"Content-Type", b"application/json"),
        (b"Content-Length", str(len(BODY_429)).encode()),
    ]
    assert inner.scopes == []
    assert lim.peek("ip:203.0.113.7").remaining == 600
