"""A Refund or Charge inside a cost mapping follows the scalar rule (issue 22, item 16).

Through the WSGI middleware, called in-process: a cost function's mapping or
a Rule's ``cost=`` mapping holding a ``Refund`` is refused as a scalar one is
(``ValueError`` naming it), and a ``Charge`` is the plain cost it is alone.
"""

from __future__ import annotations

import pytest

from limiter import ManualClock, RateLimiter, Rule
from limiter.adapters.wsgi import RateLimitMiddleware
from limiter.core.costs import Charge, Refund


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def statuses(middleware, n, path="/"):
    seen = []
    for _ in range(n):
        env = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": "203.0.113.7"}
        b"".join(middleware(env, lambda status, headers, exc_info=None: seen.append(status[:3])))
    return seen


def test_a_cost_function_answering_a_refund_in_a_mapping_is_refused_like_a_scalar_one():
    limiter = RateLimiter("3/hour", clock=ManualClock(1_000.0))
    scalar = RateLimitMiddleware(hello, limiter, cost=lambda request: Refund(1))
    with pytest.raises(ValueError, match=r"Refund\(1\.0\)"):
        statuses(scalar, 1)
    mapped = RateLimitMiddleware(hello, limiter, cost=lambda request: {"3/hour": Refund(1)})
    with pytest.raises(ValueError, match=r"cost of limit '3/hour'.*Refund\(1\.0\)"):
        statuses(mapped, 1)
    # Nothing was given back or taken: the plain requests still get exactly 3.
    plain = RateLimitMiddleware(hello, limiter)
    assert statuses(plain, 10) == ["200"] * 3 + ["429"] * 7


def test_a_rule_cost_mapping_holding_a_refund_is_refused_at_start_up():
    limiter = RateLimiter("3/hour", clock=ManualClock(1_000.0))
    with pytest.raises(ValueError, match=r"cost of limit '3/hour'.*Refund\(200\.0\)"):
        Rule("/", limiter, cost={"3/hour": Refund(200)})
    with pytest.raises(ValueError, match=r"cost of limit '3/hour'.*Refund\(200\.0\)"):
        RateLimitMiddleware(hello, limiter, cost={"3/hour": Refund(200)})


def test_a_charge_in_a_mapping_is_a_plain_cost_denied_when_the_bucket_is_empty():
    limiter = RateLimiter("3/hour", clock=ManualClock(1_000.0))
    rule = Rule("/", limiter, cost={"3/hour": Charge(1)})
    assert statuses(RateLimitMiddleware(hello, limiter, rules=[rule]), 10) == (
        ["200"] * 3 + ["429"] * 7
    )
    other = RateLimiter("3/hour", clock=ManualClock(1_000.0))
    by_function = RateLimitMiddleware(hello, other, cost=lambda request: {"3/hour": Charge(1)})
    assert statuses(by_function, 10) == ["200"] * 3 + ["429"] * 7
