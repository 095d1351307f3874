"""``limiter.http.options.Options``: every adapter option checked once, no probe guard."""

from __future__ import annotations

import pytest

from limiter import RateLimiter, Rule
from limiter.http.guard import Guard
from limiter.http.options import Options
from limiter.integrations.common import Integration


def test_options_are_checked_without_a_limiter() -> None:
    options = Options({"cost": 2, "header_style": "draft", "mode": "shadow"})
    assert (options.cost, options.header_style, options.mode) == (2.0, "draft", "shadow")
    assert options.cost.__class__ is float and not options.is_async
    with pytest.raises(ValueError, match="on_error must be 'allow' or 'deny', got 'ignore'"):
        Options({"on_error": "ignore"})
    with pytest.raises(
        TypeError, match=r"MyAdapter\(\) got an unexpected keyword argument 'key_fnc'"
    ):
        Options({"key_fnc": None}, owner="MyAdapter")


def test_options_are_read_only() -> None:
    options = Options()
    with pytest.raises(AttributeError, match="read-only"):
        options.cost = 3  # type: ignore[misc]


def test_a_sync_adapter_refuses_async_callables_when_the_options_are_built() -> None:
    async def key(request: object) -> str:
        return "k"

    assert Options({"key_func": key}).is_async
    with pytest.raises(TypeError, match="WSGI cannot await"):
        Options({"key_func": key}, sync="WSGI")


def test_a_cost_mapping_is_checked_against_the_limiters_it_goes_to() -> None:
    api = RateLimiter("10/second", name="api")
    mapping = {"10/second": 1}
    with pytest.raises(ValueError, match="limiter 'login'"):
        Options({"cost": mapping, "rules": [Rule("/login", RateLimiter(5, name="login"))]})
    assert Options({"cost": mapping}, limiter=api).cost == {"10/second": 1.0}
    assert Options({"cost": mapping}).cost == {"10/second": 1.0}  # no limiter: values only
    with pytest.raises(ValueError, match="cost names no limit of this limiter"):
        Guard(RateLimiter(1), Options({"cost": mapping}))  # the guard checks its own


def test_guard_takes_options_or_keywords_not_both() -> None:
    limiter = RateLimiter("10/second")
    by_keywords = Guard(limiter, header_style="both")
    by_options = Guard(limiter, Options({"header_style": "both"}))
    assert by_keywords.header_style == by_options.header_style == "both"
    with pytest.raises(TypeError, match="Guard takes an Options or keyword options"):
        Guard(limiter, Options(), header_style="x")  # type: ignore[call-arg]


def test_an_integration_without_a_default_checks_its_options_once() -> None:
    with pytest.raises(TypeError, match=r"RateLimit\(\) got an unexpected keyword argument"):
        Integration("RateLimit", header_styl="x")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="header style must be one of"):
        Integration("RateLimit", header_style="nope")


def get_remote_address() -> str:  # flask-limiter's key function: no argument
    return "127.0.0.1"


def test_a_key_func_or_deduct_when_of_the_wrong_shape_is_refused_when_built() -> None:
    """Every adapter and ``Rule``, not only the integrations: a ``key_func`` that cannot take
    the request, or a ``deduct_when`` taking a response, failed each request with a 500."""
    from limiter.adapters.asgi import RateLimitMiddleware as ASGI
    from limiter.adapters.wsgi import RateLimitMiddleware as WSGI

    limiter = RateLimiter("5/minute")
    key = r"^key_func must take the request .* get_remote_address\(\) cannot \(flask-limiter's"
    for build in (
        lambda: WSGI(lambda environ, start: [], limiter, key_func=get_remote_address),
        lambda: ASGI(lambda scope, receive, send: None, limiter, key_func=get_remote_address),
        lambda: Options({"key_func": get_remote_address}),
        lambda: Rule("/api", limiter, key_func=get_remote_address),
    ):
        with pytest.raises(TypeError, match=key):
            build()

    def charged(response: object) -> bool:
        return True

    with pytest.raises(
        TypeError,
        match=r"^deduct_when gets the status code \(an int\): deduct_when=lambda status: "
        r"status >= 400, not the response; .*charged\(\) takes 'response' \(flask-limiter",
    ):
        WSGI(lambda environ, start: [], limiter, deduct_when=charged)
    with pytest.raises(TypeError, match=r"status >= 400; .*<lambda>\(\) cannot take one argument$"):
        Rule("/api", limiter, deduct_when=lambda: True)
    # What they may be stays as it was: one argument, any name but a response's.
    assert Options({"key_func": lambda request: "k", "deduct_when": lambda status: True})


def test_a_class_is_no_limiter_function() -> None:
    """The class passed for an instance was taken as a function of the request, and built
    from each request (a 500 each time); a ``Rule`` already refused it."""
    from limiter.adapters.wsgi import RateLimitMiddleware

    wrong = (
        r"^limiter must be a limiter\.RateLimiter or a function of the request returning "
        r"one, got <class 'limiter\.ratelimiter\.RateLimiter'>$"
    )
    with pytest.raises(TypeError, match=wrong):
        RateLimitMiddleware(lambda environ, start: [], RateLimiter)
    with pytest.raises(TypeError, match=wrong):
        Rule("/api", RateLimiter)


def test_callbacks_of_the_wrong_shape_are_refused_when_built() -> None:
    """``on_limited`` (flask-limiter's ``on_breach(limit)`` takes one), ``exempt`` and a
    ``cost`` function (flask-limiter's take none) were called per request: a 500, for
    ``on_limited`` at the first refusal only."""
    limiter = RateLimiter("5/minute")
    cases = [
        (
            {"on_limited": lambda breach: None},
            r"^on_limited must take \(request, result, headers\)",
        ),
        ({"exempt": lambda: False}, r"^exempt must take the request \(a limiter\.RequestInfo\)"),
        ({"cost": lambda: 1}, r"^cost must take the request \(a limiter\.RequestInfo\); "),
    ]
    for options, message in cases:
        with pytest.raises(TypeError, match=message + r".*<lambda>\(\) cannot$"):
            Options(options)
    with pytest.raises(TypeError, match=r"^limiter must take the request .*<lambda>\(\) cannot$"):
        Rule("/api", lambda: limiter)
    with pytest.raises(TypeError, match=r"^cost must take the request .*<lambda>\(\) cannot$"):
        Rule("/api", limiter, cost=lambda: 2)
    # The right shapes, and what cannot be read (a builtin), pass as before.
    Options({"on_limited": lambda request, result, headers: None, "exempt": lambda r: False})
    Options({"cost": len, "exempt": bool})
