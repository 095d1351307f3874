"""Decision events: ``RateLimiter(on_decision=...)`` (issue 13 item 1)."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

from limiter import RateLimiter
from limiter.adapters.wsgi import RateLimitMiddleware
from limiter.backends.memory import MemoryStore
from limiter.clock import ManualClock
from limiter.events import DecisionEvent, Outcome
from limiter.store import StoreError

T0 = 1_700_000_000.0


class Down(MemoryStore):
    def apply(self, key, limit, cost, now):  # type: ignore[no-untyped-def]
        raise StoreError("down")


def test_every_decision_is_reported_once_with_its_fields() -> None:
    events: List[DecisionEvent] = []
    clock = ManualClock(T0)
    limiter = RateLimiter("2/second", clock=clock, name="api", on_decision=events.append)
    assert [limiter.check("k").allowed, limiter.allow("k"), limiter.allow("k")] == [
        True,
        True,
        False,
    ]
    assert [e.outcome for e in events] == ["allowed", "allowed", "denied"]
    first = events[0]
    assert (first.limiter, first.policy, first.cost, first.key, first.at) == (
        "api",
        "2/second",
        1,
        "k",
        T0,
    )
    assert first.result is not None and first.result.remaining == 1
    assert first.store_seconds >= 0.0
    assert events[2].outcome is Outcome.DENIED and str(events[2].outcome) == "denied"
    # Peeks, refunds and resets are no decisions.
    limiter.peek("k")
    limiter.refund("k")
    limiter.reset("k")
    assert len(events) == 3


def test_acheck_reports_once_for_memory_and_for_an_async_path() -> None:
    events: List[DecisionEvent] = []
    limiter = RateLimiter("1/second", clock=ManualClock(T0), on_decision=events.append)

    async def run() -> None:
        await limiter.acheck("k")
        await limiter.acheck("k")

    asyncio.run(run())
    assert [e.outcome for e in events] == ["allowed", "denied"]


def test_a_store_error_is_reported_then_raised() -> None:
    events: List[DecisionEvent] = []
    limiter = RateLimiter("1/second", store=Down(), on_decision=events.append)
    with pytest.raises(StoreError):
        limiter.check("k")
    assert [(e.outcome, e.result, e.policy) for e in events] == [(Outcome.ERROR, None, "")]


def test_the_adapters_decisions_are_observed() -> None:
    events: List[DecisionEvent] = []
    limiter = RateLimiter("1/second", clock=ManualClock(T0), on_decision=events.append)

    def hello(environ, start_response):  # type: ignore[no-untyped-def]
        start_response("200 OK", [])
        return [b"hi"]

    app = RateLimitMiddleware(hello, limiter)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "203.0.113.7"}
    for _ in range(3):
        app(dict(environ), lambda *args: None)
    assert [(e.outcome, e.key) for e in events] == [
        ("allowed", "ip:203.0.113.7"),
        ("denied", "ip:203.0.113.7"),
        ("denied", "ip:203.0.113.7"),
    ]


def test_a_shadowed_limiter_shares_buckets_and_reports_shadow_denials() -> None:
    events: List[DecisionEvent] = []
    limiter = RateLimiter("1/second", clock=ManualClock(T0), on_decision=events.append)
    shadow = limiter.shadowed()
    assert shadow is not limiter and shadow.shadowed() is shadow
    assert shadow.check("k").allowed and not shadow.check("k").allowed
    assert not limiter.check("k").allowed  # the same bucket
    assert [e.outcome for e in events] == ["allowed", "shadow_denied", "denied"]
    assert shadow.shadow and not limiter.shadow and limiter.shadowed() is shadow  # made once


def test_without_an_observer_the_methods_are_the_class_ones() -> None:
    limiter = RateLimiter("1/second")
    assert "check" not in vars(limiter) and "allow" not in vars(limiter)
    with pytest.raises(TypeError, match="on_decision must be callable or None, got 5"):
        RateLimiter("1/second", on_decision=5)  # type: ignore[arg-type]
