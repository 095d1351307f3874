"""The adapters' ``cost=`` as a mapping of limit names to costs (``limiter.http.guard``).

A mapping given as ``cost=`` is checked when the adapter is built (against
its limiter and each rule's limiter it applies to); one returned by a cost
function is checked when returned, before the store is asked, and a bad one
propagates as a bad number does.  ``deduct_when`` gives the same mapping
back.  In-process for WSGI and ASGI, then over real servers (uvicorn and
waitress in threads, sharing the test's ManualClock).
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from helpers.servers import uvicorn_running, waitress_running
from limiter import (
    DENIED_BODY,
    ManualClock,
    MemoryStore,
    RateLimiter,
    RequestInfo,
    Rule,
    StoreError,
)
from limiter.adapters.asgi import RateLimitMiddleware as ASGIMiddleware
from limiter.adapters.httpserver import rate_limited
from limiter.adapters.wsgi import RateLimitMiddleware as WSGIMiddleware
from limiter.http.guard import Guard
from limiter.http.keys import header_key

NOW = 1_700_000_000
LIMITS = {"requests": "3/minute", "tokens": "100/minute"}
COST = {"requests": 1, "tokens": 40}
POLICY = '"requests";q=3;w=60, "tokens";q=100;w=60'
# 3 requests and 100 tokens a minute, 40 tokens a call: the tokens refuse the third.
EXPECTED = [
    ("200", '"requests";r=2;t=20, "tokens";r=60;t=1', None),
    ("200", '"requests";r=1;t=20, "tokens";r=20;t=1', None),
    # 20 tokens short at 100 a minute: 12 s ("requests" would wait 20 s for 2 more: no t).
    ("429", '"requests";r=1, "tokens";r=20;t=1', "12"),
]


def limiter(clock=None, limits=LIMITS, **kwargs):
    return RateLimiter(limits, clock=clock or ManualClock(NOW), **kwargs)


def budgets(lim, key="ip:203.0.113.7"):
    return [r.remaining for r in lim.peek(key).results]


# -- WSGI, in-process -------------------------------------------------------------


def hello(environ, start_response):
    status = environ.get("HTTP_X_STATUS", "200 OK")
    start_response(status, [("Content-Type", "text/plain")])
    return [b"hello"]


def environ(**extra):
    env = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "203.0.113.7"}
    env.update(extra)
    return env


def call(app, env=None):
    seen = {}

    def start_response(status, headers, exc_info=None):
        seen.update(status=status, headers=headers)

    body = b"".join(app(environ() if env is None else env, start_response))
    return seen["status"][:3], dict(seen["headers"]), body


def test_a_mapping_charges_each_limit_its_own_amount():
    lim = limiter()
    app = WSGIMiddleware(hello, lim, cost=COST, header_style="draft")
    for status, ratelimit, retry in EXPECTED:
        got, headers, body = call(app)
        assert (got, headers["RateLimit"], headers.get("Retry-After")) == (
            status,
            ratelimit,
            retry,
        )
        assert headers["RateLimit-Policy"] == POLICY
    assert body == DENIED_BODY
    assert budgets(lim) == [1, 20]  # the refused call took nothing


def test_a_limit_the_mapping_leaves_out_is_charged_nothing():
    lim = limiter()
    app = WSGIMiddleware(hello, lim, cost={"tokens": 10})
    assert [call(app)[0] for _ in range(11)] == ["200"] * 10 + ["429"]
    assert budgets(lim) == [3, 0]


def test_the_mapping_checked_is_the_mapping_charged():
    lim = limiter()
    cost = dict(COST)
    app = WSGIMiddleware(hello, lim, cost=cost)
    cost["nope"] = 1  # too late: the middleware kept what it checked
    cost["tokens"] = 1
    assert call(app)[0] == "200"
    assert budgets(lim) == [2, 60]


@pytest.mark.parametrize(
    ("cost", "error", "message"),
    [
        (
            {"request": 1},
            ValueError,
            "cost names no limit of this limiter: 'request' (limits: 'requests', 'tokens')",
        ),
        (
            {"tokens": -1},
            ValueError,
            "cost of limit 'tokens': cost must be a number of tokens >= 0",
        ),
        ({"tokens": "1"}, TypeError, "cost of limit 'tokens': cost must be a number of tokens"),
        ({"tokens": True}, TypeError, "cost of limit 'tokens': cost must be a number of tokens"),
    ],
)
def test_a_bad_mapping_fails_at_start_up_on_every_adapter(cost, error, message):
    lim = limiter(name="api")

    async def asgi_app(scope, receive, send):  # never called
        raise AssertionError

    builders = [
        lambda: WSGIMiddleware(hello, lim, cost=cost),
        lambda: ASGIMiddleware(asgi_app, lim, cost=cost),
        lambda: rate_limited(lim, cost=cost),
        lambda: Guard(lim, cost=cost),
    ]
    for build in builders:
        with pytest.raises(error, match=re.escape(f"limiter 'api': {message}")):
            build()


def test_a_mapping_is_checked_against_each_rule_limiter_it_applies_to():
    store = MemoryStore()
    api = RateLimiter(LIMITS, store=store, name="api")
    login = RateLimiter("5/minute", store=store, name="login")
    with pytest.raises(ValueError, match=re.escape("limiter 'login': cost names no limit")):
        WSGIMiddleware(hello, api, cost=COST, rules=[Rule("/login", login)])
    # A rule with a cost of its own never gets the mapping.
    app = WSGIMiddleware(hello, api, cost=COST, rules=[Rule("/login", login, cost=2)])
    assert call(app, environ(PATH_INFO="/login"))[0] == "200"
    assert login.peek("ip:203.0.113.7").remaining == 3
    assert call(app)[0] == "200"
    assert budgets(api) == [2, 60]


class BrokenStore(MemoryStore):
    """A store whose backend is down."""

    def apply(self, key, limit, cost, now):
        raise StoreError("connection refused")

    def apply_many(self, keys, limits, cost, now):
        raise StoreError("connection refused")


def test_a_mapping_with_a_limiter_function_is_checked_per_request():
    clock = ManualClock(NOW)
    metered = RateLimiter(LIMITS, store=MemoryStore(), clock=clock, name="metered")
    # Its store is down: the bad mapping must still be the app's error, not on_error's.
    plain = RateLimiter("5/minute", store=BrokenStore(), clock=clock, name="plain")

    def plan(request):
        return plain if request.headers.get("X-Plan") == "plain" else metered

    app = WSGIMiddleware(hello, plan, cost=COST)  # not known yet: no error at start-up
    assert call(app)[0] == "200"
    assert budgets(metered) == [2, 60]
    with pytest.raises(ValueError, match="cost names no limit of this limiter: 'requests'"):
        call(app, environ(HTTP_X_PLAN="plain"))


def test_a_cost_function_may_return_a_mapping():
    lim = limiter()
    app = WSGIMiddleware(
        hello, lim, cost=lambda r: {"requests": 1, "tokens": int(r.headers.get("X-Tokens"))}
    )
    assert call(app, environ(HTTP_X_TOKENS="70"))[0] == "200"
    assert call(app, environ(HTTP_X_TOKENS="31"))[0] == "429"
    assert call(app, environ(HTTP_X_TOKENS="30"))[0] == "200"
    assert budgets(lim) == [1, 0]


@pytest.mark.parametrize("on_error", ["allow", "deny"])
@pytest.mark.parametrize("store", [MemoryStore, BrokenStore])
def test_a_bad_mapping_from_a_cost_function_is_the_apps_error(on_error, store):
    # As a bad number is: it propagates, whatever on_error says, and even
    # when the store is down (the mapping is checked before the store is asked).
    for limits in (LIMITS, "3/minute"):
        lim = RateLimiter(limits, store=store(), clock=ManualClock(NOW))
        name = lim.limits[0].name
        for bad, error in (
            ({"nope": 1}, ValueError),
            ({name: -1}, ValueError),
            ({name: "1"}, TypeError),
            ([1, 40], TypeError),  # a list is no mapping, nor a number
        ):
            app = WSGIMiddleware(hello, lim, on_error=on_error, cost=lambda r, b=bad: b)
            with pytest.raises(error, match="cost"):
                call(app)


def test_deduct_when_gives_the_same_mapping_back():
    lim = limiter()
    app = WSGIMiddleware(hello, lim, cost=COST, deduct_when=lambda status: status == 401)
    assert call(app)[0] == "200"
    assert budgets(lim) == [3, 100]  # not charged: both given back
    assert call(app, environ(HTTP_X_STATUS="401 Unauthorized"))[0] == "401"
    assert budgets(lim) == [2, 60]


def test_a_number_cost_keeps_the_peer_path_and_a_mapping_gives_the_same_outcomes():
    number = Guard(limiter(), cost=2)
    assert number.cost == 2.0 and number.cost.__class__ is float
    assert number.peer_decider() is not None
    lim = limiter()
    mapped = Guard(lim, cost=COST)
    assert mapped.peer_decider() is not None
    request = RequestInfo("GET", "/", peer="203.0.113.7")
    peer = mapped.peer_decider()
    outcomes = [peer("203.0.113.7", request, lambda r: r) for _ in range(2)]
    outcomes.append(mapped.decide(request))
    assert [o[0] if isinstance(o, tuple) else 200 for o in outcomes] == [200, 200, 429]
    assert budgets(lim) == [1, 20]


# -- ASGI, in-process ----------------------------------------------------------------


async def asgi_hello(scope, receive, send):
    status = 200
    for name, value in scope["headers"]:
        if name == b"x-status":
            status = int(value)
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


def asgi_call(app, headers=()):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": list(headers),
        "client": ("203.0.113.7", 5000),
    }
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}


class AsyncOnlyStore:
    """An AsyncStore (no sync apply) that yields to the loop, like a network store."""

    def __init__(self):
        self.inner = MemoryStore()

    async def aapply(self, key, limit, cost, now):
        await asyncio.sleep(0)
        return self.inner.apply(key, limit, cost, now)

    async def aapply_many(self, keys, limits, cost, now):
        await asyncio.sleep(0)
        return self.inner.apply_many(keys, limits, cost, now)

    async def areset(self, key):
        self.inner.reset(key)


def apeek(lim):
    result = asyncio.run(lim.apeek("ip:203.0.113.7"))
    return [r.remaining for r in result.results]


@pytest.mark.parametrize("store", [None, AsyncOnlyStore])
def test_asgi_charges_a_mapping_and_gives_it_back(store):
    lim = limiter(store=None if store is None else store())
    app = ASGIMiddleware(asgi_hello, lim, cost=COST, header_style="draft")
    for status, ratelimit, retry in EXPECTED:
        got, headers = asgi_call(app)
        assert (got, headers["RateLimit"], headers.get("Retry-After")) == (
            int(status),
            ratelimit,
            retry,
        )
    lim = limiter(store=None if store is None else store())
    app = ASGIMiddleware(asgi_hello, lim, cost=COST, deduct_when=lambda status: status == 401)
    assert asgi_call(app)[0] == 200
    assert apeek(lim) == [3, 100]
    assert asgi_call(app, [(b"x-status", b"401")])[0] == 401
    assert apeek(lim) == [2, 60]


def test_asgi_awaits_a_cost_function_returning_a_mapping():
    lim = limiter(store=AsyncOnlyStore())

    async def cost(request):
        return {"tokens": 60}

    app = ASGIMiddleware(asgi_hello, lim, cost=cost)
    assert [asgi_call(app)[0] for _ in range(2)] == [200, 429]
    assert apeek(lim) == [3, 40]

    async def bad(request):
        return {"token": 60}

    app = ASGIMiddleware(asgi_hello, lim, cost=bad)
    with pytest.raises(ValueError, match="cost names no limit of this limiter: 'token'"):
        asgi_call(app)


# -- real servers ----------------------------------------------------------------------


@pytest.mark.servers
def test_uvicorn_charges_named_costs():
    clock = ManualClock(NOW)
    lim = limiter(clock)
    app = ASGIMiddleware(asgi_hello, lim, cost=COST, header_style="draft")
    with uvicorn_running(app) as url, httpx.Client(base_url=url) as client:
        responses = [client.get("/") for _ in range(3)]
        assert [
            (str(r.status_code), r.headers["RateLimit"], r.headers.get("Retry-After"))
            for r in responses
        ] == EXPECTED
        assert responses[2].content == DENIED_BODY
        clock.advance(12)
        assert client.get("/").status_code == 200
    assert budgets(lim, "ip:127.0.0.1") == [0, 0]


@pytest.mark.servers
def test_waitress_charges_named_costs_and_gives_them_back():
    clock = ManualClock(NOW)
    lim = limiter(clock)
    app = WSGIMiddleware(
        hello,
        lim,
        key_func=header_key("X-API-Key"),
        cost=lambda r: {"requests": 1, "tokens": int(r.headers.get("X-Tokens", "40"))},
        deduct_when=lambda status: status < 500,
        header_style="draft",
    )
    # The shared launcher: a close() that pulls the socket from under select() is expected.
    with (
        waitress_running(app, threads=4) as url,
        httpx.Client(base_url=url, headers={"X-API-Key": "k"}) as client,
    ):
        responses = [client.get("/") for _ in range(3)]
        assert [
            (str(r.status_code), r.headers["RateLimit"], r.headers.get("Retry-After"))
            for r in responses
        ] == EXPECTED
        # A failed call (5xx) is given back whole: both limits.
        failed = client.get("/", headers={"X-Tokens": "20", "X-Status": "503 Unavailable"})
        assert failed.status_code == 503
        assert failed.headers["RateLimit"] == '"requests";r=1;t=20, "tokens";r=20;t=1'
        assert client.get("/", headers={"X-Tokens": "20"}).status_code == 200
        assert client.get("/", headers={"X-Tokens": "0"}).status_code == 429  # requests
    assert budgets(lim, "x-api-key:k") == [0, 0]


def test_asgi_checks_a_mapping_against_an_async_limiter_functions_choice():
    clock = ManualClock(NOW)
    metered = RateLimiter(LIMITS, store=MemoryStore(), clock=clock, name="metered")
    plain = RateLimiter("5/minute", store=BrokenStore(), clock=clock, name="plain")

    async def plan(request):
        return plain if request.headers.get("X-Plan") == "plain" else metered

    app = ASGIMiddleware(asgi_hello, plan, cost=COST, on_error="deny")
    assert asgi_call(app)[0] == 200
    assert budgets(metered) == [2, 60]
    with pytest.raises(ValueError, match="cost names no limit of this limiter: 'requests'"):
        asgi_call(app, [(b"x-plan", b"plain")])
