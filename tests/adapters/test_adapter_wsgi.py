"""The WSGI middleware, called in-process with environ dicts (PEP 3333).

What every adapter must do is in test_adapter_conformance.py (AdapterConformance);
this file keeps what is particular to this adapter.
"""

from __future__ import annotations

import gc
import io
import logging
import re
import sys
import tracemalloc
from decimal import Decimal
from fractions import Fraction
from wsgiref.util import setup_testing_defaults
from wsgiref.validate import validator

import pytest

from limiter import DENIED_BODY, ManualClock, MemoryStore, RateLimiter, Rule, StoreError
from limiter.adapters.wsgi import RateLimitMiddleware, request_info
from limiter.http.keys import header_key
from limiter.http.responses import UNAVAILABLE_BODY

NOW = 1_700_000_000
BODY_429 = b'{"status":429,"code":"rate_limited","message":"too many requests"}'


def hello(environ, start_response):
    hello.calls += 1
    start_response("200 OK", [("Content-Type", "text/plain"), ("X-App", "1")])
    return [b"hello"]


hello.calls = 0


def environ(peer="203.0.113.7", method="GET", path="/", **extra):
    env = {"REQUEST_METHOD": method, "PATH_INFO": path, "SCRIPT_NAME": ""}
    if peer is not None:
        env["REMOTE_ADDR"] = peer
    env.update(extra)
    return env


def call(app, env=None):
    seen = {}

    def start_response(status, headers, exc_info=None):
        seen.update(status=status, headers=headers, exc_info=exc_info)
        return lambda data: None

    result = app(environ() if env is None else env, start_response)
    try:
        body = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    return seen["status"], seen["headers"], body


def limiter(rate="3/second", **kw):
    return RateLimiter(rate, clock=ManualClock(NOW), **kw)


def test_admits_exactly_burst_then_429_with_exact_response():
    hello.calls = 0
    app = RateLimitMiddleware(hello, limiter())
    statuses = [call(app)[0] for _ in range(3)]
    assert statuses == ["200 OK"] * 3
    status, headers, body = call(app)
    assert status == "429 Too Many Requests"
    assert body == BODY_429 == DENIED_BODY
    assert headers == [
        ("X-RateLimit-Limit", "3"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", str(NOW + 1)),
        ("Retry-After", "1"),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(BODY_429))),
    ]
    assert hello.calls == 3  # the limited request never reached the app


def test_allowed_headers_are_appended_after_the_apps_own():
    app = RateLimitMiddleware(hello, limiter())
    status, headers, body = call(app)
    assert (status, body) == ("200 OK", b"hello")
    assert headers == [
        ("Content-Type", "text/plain"),
        ("X-App", "1"),
        ("X-RateLimit-Limit", "3"),
        ("X-RateLimit-Remaining", "2"),
        ("X-RateLimit-Reset", str(NOW + 1)),
    ]


def test_the_apps_header_list_is_not_modified():
    app_headers = [("Content-Type", "text/plain")]

    def app(environ, start_response):
        start_response("200 OK", app_headers)
        return [b""]

    call(RateLimitMiddleware(app, limiter()))
    assert app_headers == [("Content-Type", "text/plain")]


def test_head_429_has_headers_but_no_body():
    app = RateLimitMiddleware(hello, limiter("1/second"))
    call(app, environ(method="HEAD"))
    status, headers, body = call(app, environ(method="HEAD"))
    assert status.startswith("429")
    assert body == b""
    assert ("Content-Length", str(len(BODY_429))) in headers


def test_exc_info_passes_through():
    received = []

    def failing(environ, start_response):
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            start_response("500 Internal Server Error", [], sys.exc_info())
        return [b"err"]

    def start_response(status, headers, exc_info=None):
        received.append(exc_info)

    RateLimitMiddleware(failing, limiter())(environ(), start_response)
    assert received[0][0] is RuntimeError


def test_the_apps_iterable_is_returned_unchanged_and_not_consumed():
    consumed = []

    class Body:
        closed = False

        def __iter__(self):
            consumed.append(True)
            yield b"x"

        def close(self):
            Body.closed = True

    body = Body()

    def app(environ, start_response):
        start_response("200 OK", [])
        return body

    result = RateLimitMiddleware(app, limiter())(environ(), lambda s, h, e=None: None)
    assert result is body
    assert consumed == []
    result.close()  # the server's job; it reaches the app's object
    assert Body.closed


def test_pep3333_validator_is_satisfied():
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    wrapped = validator(RateLimitMiddleware(validator(app), limiter("1/second")))
    for expected in ("200 OK", "429 Too Many Requests"):
        env = {}
        setup_testing_defaults(env)
        env["wsgi.input"] = io.BytesIO()
        env["wsgi.errors"] = io.StringIO()
        env["QUERY_STRING"] = ""
        status, _, _ = call(wrapped, env)
        assert status == expected


def test_no_remote_addr_uses_the_fallback_key():
    lim = limiter("1/second")
    app = RateLimitMiddleware(hello, lim)
    assert call(app, environ(peer=None))[0] == "200 OK"
    assert call(app, environ(peer=""))[0][:3] == "429"
    assert lim.peek("ip:unknown").remaining == 0


def test_trusted_proxy_headers():
    lim = limiter("1/second")
    app = RateLimitMiddleware(
        hello, lim, trusted_proxies=["10.0.0.0/8"], proxy_header="x-forwarded-for"
    )
    env = environ(peer="10.0.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.4")
    assert call(app, env)[0] == "200 OK"
    assert lim.peek("ip:198.51.100.4").remaining == 0
    assert lim.peek("ip:10.0.0.1").remaining == 1


def test_proxy_header_pins_the_header_the_proxy_appends():
    # The proxy appends X-Forwarded-For; the client adds a Forwarded of its own
    # that disagrees.  The key is still the address the proxy saw.
    lim = limiter("1/second")
    app = RateLimitMiddleware(
        hello, lim, trusted_proxies=["10.0.0.0/8"], proxy_header="x-forwarded-for"
    )
    env = environ(
        peer="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.4", HTTP_FORWARDED="for=1.1.1.1"
    )
    assert call(app, env)[0] == "200 OK"
    assert call(app, env)[0] == "429 Too Many Requests"
    assert lim.peek("ip:198.51.100.4").remaining == 0
    assert lim.peek("ip:10.0.0.1").remaining == 1  # not the proxy's bucket
    assert lim.peek("ip:1.1.1.1").remaining == 1
    # With trusted proxies the header is required: which one the proxy appends
    # is not something the middleware may guess.
    with pytest.raises(ValueError, match="proxy_header="):
        RateLimitMiddleware(hello, limiter(), trusted_proxies=["10.0.0.0/8"])


def test_a_1mb_api_key_costs_a_short_stored_key():
    store = MemoryStore()
    lim = RateLimiter("5/second", store=store, clock=ManualClock(NOW))
    app = RateLimitMiddleware(hello, lim, key_func=header_key("X-API-Key"))
    huge = "k" * 1_000_000
    call(app, environ(HTTP_X_API_KEY=huge))  # warm-up: first-use allocations
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        env = environ(HTTP_X_API_KEY=huge[:-1] + "j")
        assert call(app, env)[0] == "200 OK"
        del env
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(store) == 2
    assert kept < 10_000
    assert len(lim.storage_key("x-api-key:" + huge)) < 100


def test_limiters_sharing_a_store_do_not_collide():
    store = MemoryStore()
    clock = ManualClock(NOW)  # a real clock would refill a token after a 1 s stall
    a = RateLimitMiddleware(hello, RateLimiter("1/second", store=store, name="a", clock=clock))
    b = RateLimitMiddleware(hello, RateLimiter("1/second", store=store, name="b", clock=clock))
    assert [call(a)[0][:3], call(b)[0][:3], call(a)[0][:3]] == ["200", "200", "429"]


class BrokenStore(MemoryStore):
    """A store whose backend is down."""

    def apply(self, key, limit, cost, now):
        raise StoreError("connection refused")


def test_store_failure_fails_open_by_default_and_logs_once(caplog):
    app = RateLimitMiddleware(hello, RateLimiter("1/second", store=BrokenStore()))
    with caplog.at_level(logging.WARNING, logger="limiter.adapters"):
        results = [call(app) for _ in range(3)]
    assert [r[0] for r in results] == ["200 OK"] * 3
    assert results[0][1] == [("Content-Type", "text/plain"), ("X-App", "1")]
    assert len(caplog.records) == 1
    assert "connection refused" in caplog.text


def test_store_failure_with_deny_is_a_503():
    app = RateLimitMiddleware(hello, RateLimiter("1/second", store=BrokenStore()), on_error="deny")
    status, headers, body = call(app)
    assert status == "503 Service Unavailable"
    assert body == UNAVAILABLE_BODY
    assert body == (
        b'{"status":503,"code":"rate_limiter_unavailable","message":"rate limiter unavailable"}'
    )
    assert headers == [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]


def test_key_func_errors_propagate():
    app = RateLimitMiddleware(hello, limiter(), key_func=lambda r: 42)
    with pytest.raises(TypeError, match="42"):
        call(app)


def test_request_info_from_environ():
    env = environ(
        peer="::1",
        method="POST",
        path="/caf\xc3\xa9",
        SCRIPT_NAME="/api",
        HTTP_X_API_KEY="k",
        CONTENT_TYPE="application/json",
    )
    info = request_info(env)
    assert (info.method, info.path, info.peer) == ("POST", "/api/café", "::1")
    assert info.headers.get("x-api-key") == "k"
    assert info.headers.get_all("X-Api-Key") == ["k"]
    assert info.headers.get("Content-Type") == "application/json"
    assert info.headers.get("missing") is None
    assert info.headers.get_all("missing") == []
    assert info.native is env


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"header_style": "y"}, "must be one of 'x', 'draft', 'both' or None, got 'y'"),
        ({"on_error": "ignore"}, "on_error must be 'allow' or 'deny', got 'ignore'"),
        ({"ipv6_prefix": 200}, "ipv6_prefix must be"),
        ({"trusted_proxies": ["nope"]}, "'nope'"),
        ({"cost": -1}, "cost must be a number of tokens >= 0, got -1"),
        ({"cost": float("nan")}, "cost must be a number of tokens >= 0, got nan"),
    ],
)
def test_bad_option_values_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RateLimitMiddleware(hello, limiter(), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_error": 1}, "on_error must be 'allow' or 'deny', got 1"),
        ({"header_style": 5}, "header_style must be one of 'x', 'draft', 'both' or None, got 5"),
        ({"rules": "x"}, "rules must be a list of limiter.Rule, got 'x'"),
        ({"rules": 5}, "rules must be a list of limiter.Rule, got 5"),
        ({"key_func": 5}, "key_func must be callable or None, got 5"),
        ({"exempt": "yes"}, "exempt must be callable or None, got 'yes'"),
        ({"on_limited": 3}, "on_limited must be callable or None, got 3"),
        ({"cost": "2"}, "cost must be a number of tokens, got '2'"),
        ({"cost": True}, "cost must be a number of tokens, got True"),
    ],
)
def test_bad_option_types_are_type_errors(kwargs, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        RateLimitMiddleware(hello, limiter(), **kwargs)


def test_wrong_limiter_or_app_types_are_type_errors():
    with pytest.raises(
        TypeError,
        match=re.escape(
            "limiter must be a limiter.RateLimiter or a function of the request returning one,"
            " got '10/s'"
        ),
    ):
        RateLimitMiddleware(hello, "10/s")
    with pytest.raises(TypeError, match=re.escape("app must be a WSGI callable, got None")):
        RateLimitMiddleware(None, limiter())


def test_a_misspelled_option_names_the_middleware():
    with pytest.raises(TypeError) as info:
        RateLimitMiddleware(hello, limiter(), key_fnc=header_key("X-API-Key"))
    assert str(info.value) == (
        "RateLimitMiddleware() got an unexpected keyword argument 'key_fnc'"
        " (did you mean 'key_func'?)"
    )
    with pytest.raises(TypeError) as info:
        RateLimitMiddleware(hello, limiter(), zzz=1)
    assert str(info.value) == "RateLimitMiddleware() got an unexpected keyword argument 'zzz'"


# -- errors: only StoreError takes the on_error path ------------------------


@pytest.mark.parametrize("on_error", ["allow", "deny"])
def test_a_bad_cost_value_is_the_apps_bug_not_a_store_failure(on_error):
    # A cost callable returning a non-number or NaN propagates, whatever
    # on_error says. (Raising callables, store bugs and on_error allow/deny:
    # AdapterConformance, tests/adapters/test_adapter_conformance.py.)
    for bad, error in (("3", TypeError), (float("nan"), ValueError), (-1, ValueError)):
        app = RateLimitMiddleware(hello, limiter(), on_error=on_error, cost=lambda r, b=bad: b)
        with pytest.raises(error, match="cost must be a number of tokens"):
            call(app)


def test_the_failure_log_names_the_limiter_that_failed(caplog):
    clock = ManualClock(NOW)
    default = RateLimiter("10/second", clock=clock, name="default")
    login = RateLimiter("1/second", store=BrokenStore(), clock=clock, name="login")
    app = RateLimitMiddleware(hello, default, rules=[Rule("/login", login)])
    with caplog.at_level(logging.WARNING, logger="limiter.adapters"):
        status, headers, _ = call(app, environ(path="/login"))
        assert call(app, environ(path="/other"))[0] == "200 OK"
    assert (status, headers) == ("200 OK", [("Content-Type", "text/plain"), ("X-App", "1")])
    assert [r.getMessage() for r in caplog.records] == [
        "rate limiter 'login' failed; allowing requests (logged once per 60s)"
    ]
    assert caplog.records[0].exc_info[0] is StoreError


def test_a_client_chosen_huge_cost_is_denied_never_admitted():
    # The old docs example: the client chooses the cost.  400 digits used to
    # overflow in the bucket, which the middleware took for a store failure
    # and, with on_error="allow", admitted: 1000 of 1000.
    hello.calls = 0
    lim = limiter("600/minute")
    app = RateLimitMiddleware(hello, lim, cost=lambda r: int(r.headers.get("X-Items", "1")))
    huge = "9" * 400
    for _ in range(1000):
        status, headers, body = call(app, environ(method="POST", HTTP_X_ITEMS=huge))
        assert (status, body) == ("429 Too Many Requests", BODY_429)
    assert headers == [  # can never pass: no Retry-After
        ("X-RateLimit-Limit", "600"),
        ("X-RateLimit-Remaining", "600"),
        ("X-RateLimit-Reset", str(NOW)),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(BODY_429))),
    ]
    assert hello.calls == 0
    assert lim.peek("ip:203.0.113.7").remaining == 600  # nothing taken


def test_a_cost_callable_may_return_any_real_number():
    # int of any size, float, Fraction, Decimal: a cost above the burst is
    # denied (429, no Retry-After, nothing taken), never an error, never admitted.
    costs = [
        (Fraction(3, 2), "8"),
        (Decimal("2.5"), "7"),
        (10**400, None),
        (float("inf"), None),
        (Decimal("1e400"), None),
        (Fraction(10**400, 3), None),
    ]
    for cost, remaining in costs:
        app = RateLimitMiddleware(hello, limiter("10/second"), cost=lambda r, c=cost: c)
        status, headers, body = call(app)
        if remaining is None:
            assert (status, body) == ("429 Too Many Requests", BODY_429), cost
            assert dict(headers)["X-RateLimit-Remaining"] == "10"
            assert "Retry-After" not in dict(headers)
        else:
            assert (status, body) == ("200 OK", b"hello"), cost
            assert dict(headers)["X-RateLimit-Remaining"] == remaining


def test_deduct_when_holds_tokens_while_in_flight_so_concurrency_cannot_overshoot():
    """50 concurrent failed logins against "3/minute": 3 reach the app, 47 get a 429.

    The cost is taken when a request is admitted and given back only when its
    response is not charged, so requests in flight cannot all pass on the same
    tokens, however many an attacker keeps in flight, and whatever the clock does.
    """
    import threading

    from limiter import Rule

    clock = ManualClock(1_000.0)
    login = RateLimiter("3/minute", clock=clock, name="login")
    inside = threading.Semaphore(0)
    release = threading.Event()

    def app(environ, start_response):
        inside.release()
        assert release.wait(10)
        start_response("401 Unauthorized", [("Content-Type", "text/plain")])
        return [b"wrong password"]

    def statuses_of_a_burst(n):
        middleware = RateLimitMiddleware(
            app,
            RateLimiter("1000/second", clock=clock, name="default"),
            rules=[Rule("/login", login, deduct_when=lambda status: status == 401)],
        )
        seen = []

        def one():
            environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/login", "REMOTE_ADDR": "6.6.6.6"}
            middleware(environ, lambda status, headers, exc_info=None: seen.append(status[:3]))

        threads = [threading.Thread(target=one) for _ in range(n)]
        for thread in threads:
            thread.start()
        refused = 0
        while refused < n and not inside.acquire(timeout=0.01):  # wait for the refusals
            refused = seen.count("429")
        release.set()
        for thread in threads:
            thread.join(10)
        release.clear()
        while inside.acquire(blocking=False):
            pass
        return sorted(seen)

    assert statuses_of_a_burst(50) == ["401"] * 3 + ["429"] * 47
    clock.advance(20)  # one token back
    assert statuses_of_a_burst(50) == ["401"] + ["429"] * 49
    clock.advance(60)
    assert statuses_of_a_burst(50) == ["401"] * 3 + ["429"] * 47


def test_an_async_exempt_hidden_behind_a_plain_function_is_an_error_not_an_open_door():
    async def is_internal(request):
        return False

    app = RateLimitMiddleware(
        hello, RateLimiter("1/minute", clock=ManualClock()), exempt=lambda r: is_internal(r)
    )
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "6.6.6.6"}
    with pytest.raises(TypeError, match="exempt returned an awaitable"):
        app(environ, lambda *args: None)


def test_shadow_mode_logs_would_be_denials_at_most_once_per_interval(caplog):
    import logging

    from limiter.http import guard as common

    app = RateLimitMiddleware(
        hello, RateLimiter("1/second", clock=ManualClock(), name="trial"), mode="shadow"
    )
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "6.6.6.6"}
    with caplog.at_level(logging.WARNING, logger="limiter.adapters"):
        statuses = []
        for _ in range(5):
            app(dict(environ), lambda status, headers, exc_info=None: statuses.append(status))
    assert statuses == ["200 OK"] * 5
    assert [r.getMessage() for r in caplog.records] == [
        "rate limiter 'trial' (shadow mode) would have refused 1 request(s) "
        f"(logged at most once per {common.SHADOW_LOG_INTERVAL:g}s)"
    ]
    with pytest.raises(ValueError, match="mode must be 'enforce' or 'shadow', got 'dry-run'"):
        RateLimitMiddleware(hello, RateLimiter("1/second"), mode="dry-run")
