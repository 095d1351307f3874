"""``limiter.integrations.common``: what the Flask, FastAPI and Django integrations share.

The integrations are tested end to end in their own files; these tests pin
the shared rules: bucket scopes, limiter functions, stacked limits, methods.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Optional

import pytest

from limiter import DENIED_BODY, RateLimiter
from limiter.adapters.wsgi import request_info
from limiter.backends.memory import MemoryStore
from limiter.clock import ManualClock
from limiter.http.request import RequestInfo
from limiter.integrations.common import (
    MAX_RATES_PER_SCOPE,
    NOT_LIMITED,
    Integration,
    RouteLimit,
)

T0 = 1_700_000_000.0


def request(method: str = "GET", peer: str = "203.0.113.7", **headers: str) -> RequestInfo:
    environ: Dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": "/", "REMOTE_ADDR": peer}
    for name, value in headers.items():
        environ["HTTP_" + name.upper()] = value
    return request_info(environ)


def statuses(integration: Integration, routes: Any, n: int, **kwargs: Any) -> list:
    out = []
    for _ in range(n):
        decision = integration.decide(integration.guards(routes, "GET"), request(**kwargs))
        out.append(200 if decision.response is None else decision.response.status)
        if decision.response is None:
            decision.headers(200)
    return out


@pytest.fixture
def integration() -> Integration:
    return Integration("RateLimit", default="3/minute", clock=ManualClock(T0))


def test_each_route_limit_has_its_own_buckets_and_a_name_shares_them(integration) -> None:
    a = RouteLimit("2/minute", scope="views.a")
    b = RouteLimit("2/minute", scope="views.b")
    assert statuses(integration, [a], 3) == [200, 200, 429]
    assert statuses(integration, [b], 3) == [200, 200, 429]  # its own buckets
    shared1 = RouteLimit("2/minute", scope="search")
    shared2 = RouteLimit("2/minute", scope="search")
    assert statuses(integration, [shared1], 1) == [200]
    assert statuses(integration, [shared2], 2) == [200, 429]
    assert integration.limiter_for("2/minute", "search").name == "search|2/minute"


def test_the_default_is_one_set_of_buckets_for_views_without_limits(integration) -> None:
    assert statuses(integration, [], 3) == [200, 200, 200]
    assert statuses(integration, (), 1) == [429]
    assert Integration("RateLimit").guards([], "GET") == []  # no default: not limited


def test_a_limit_function_returning_rate_strings_picks_a_plan(integration) -> None:
    def plan(req: RequestInfo) -> str:
        return "3/minute" if req.headers.get("X-Plan") == "paid" else "1/minute"

    route = RouteLimit(plan, scope="api")
    assert statuses(integration, [route], 2) == [200, 429]
    assert statuses(integration, [route], 4, x_plan="paid") == [200, 200, 200, 429]
    assert integration.limiter_for("1/minute", "api") is integration.limiter_for("1/minute", "api")


def test_an_async_limit_function_is_awaited(integration) -> None:
    async def plan(req: RequestInfo) -> str:
        return "1/minute"

    guards = integration.guards([RouteLimit(plan, scope="api")], "GET")

    async def run() -> list:
        out = []
        for _ in range(2):
            decision = await integration.adecide(guards, request())
            out.append(200 if decision.response is None else decision.response.status)
        return out

    assert asyncio.run(run()) == [200, 429]


def test_a_limit_function_cannot_create_limiters_without_bound(integration) -> None:
    route = RouteLimit(lambda req: req.headers.get("X-Rate") or "1/second", scope="api")
    for n in range(1, MAX_RATES_PER_SCOPE + 1):
        assert statuses(integration, [route], 1, x_rate=f"{n}/hour") == [200]
    with pytest.raises(ValueError, match="more than 256 distinct rates"):
        statuses(integration, [route], 1, x_rate="9999/hour")


def test_a_limit_function_returning_something_else_is_a_type_error(integration) -> None:
    route = RouteLimit(lambda req: 5, scope="api")
    with pytest.raises(TypeError, match=r"must return a rate string or a limiter\.RateLimiter"):
        statuses(integration, [route], 1)


def test_stacked_limits_first_refusal_wins_and_the_first_limit_shows(integration) -> None:
    burst = RouteLimit("1/second", scope="v")
    hourly = RouteLimit("2/hour", scope="v")
    guards = integration.guards([burst, hourly], "GET")
    first = integration.decide(guards, request())
    assert first.response is None
    assert first.headers(200)[:2] == [("X-RateLimit-Limit", "1"), ("X-RateLimit-Remaining", "0")]
    second = integration.decide(guards, request())
    assert second.response is not None and second.response.body == DENIED_BODY
    assert ("X-RateLimit-Limit", "1") in second.response.headers


def test_methods_limit_only_those_methods(integration) -> None:
    post_only = RouteLimit("1/minute", scope="v", methods=["post"])
    assert integration.guards([post_only], "GET") == []
    assert len(integration.guards([post_only], "POST")) == 1


def test_deduct_when_is_settled_by_the_decision(integration) -> None:
    login = RouteLimit("1/minute", scope="login", deduct_when=lambda status: status == 401)
    guards = integration.guards([login], "POST")
    for _ in range(3):
        assert integration.decide(guards, request()).headers(200)[1] == (
            "X-RateLimit-Remaining",
            "1",
        )
    assert integration.decide(guards, request()).headers(401)[1] == ("X-RateLimit-Remaining", "0")
    assert integration.decide(guards, request()).response is not None


def test_disabled_limits_nothing() -> None:
    integration = Integration("RateLimit", default="1/minute", enabled=False)
    guards = integration.guards([], "GET")
    assert [integration.decide(guards, request()) for _ in range(3)] == [NOT_LIMITED] * 3


def test_the_store_may_be_a_url_or_an_object() -> None:
    store = MemoryStore()
    assert Integration("RateLimit", store=store).store is store
    assert isinstance(Integration("RateLimit", store="memory://").store, MemoryStore)


def test_a_route_limit_is_checked_when_built() -> None:
    with pytest.raises(ValueError, match="5/minnute"):
        RouteLimit("5/minnute", scope="v")
    with pytest.raises(TypeError, match="rate must be a string like '5/minute'"):
        RouteLimit(5, scope="v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="methods must be None or a list"):
        RouteLimit("5/minute", scope="v", methods="POST")
    with pytest.raises(TypeError, match="cost must be a number"):
        RouteLimit("5/minute", scope="v", cost="2")  # type: ignore[arg-type]

    async def later(status: int) -> bool:
        return True

    with pytest.raises(TypeError, match="deduct_when must be a plain function"):
        RouteLimit("5/minute", scope="v", deduct_when=later)


def test_options_are_checked_at_start_up() -> None:
    with pytest.raises(TypeError, match=r"RateLimit\(\) got an unexpected keyword argument 'cots'"):
        Integration("RateLimit", cots=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="on_error must be 'allow' or 'deny'"):
        Integration("RateLimit", on_error="open")
    with pytest.raises(ValueError, match="minnute"):
        Integration("RateLimit", default="5/minnute")


def test_a_rate_limiter_is_used_as_given(integration) -> None:
    own: Optional[RateLimiter] = RateLimiter("1/minute", clock=ManualClock(T0))
    assert statuses(integration, [RouteLimit(own, scope="v")], 2) == [200, 429]  # type: ignore[arg-type]


def test_options_of_the_default_need_a_default() -> None:
    with pytest.raises(ValueError, match="cost, rules apply to the default limit only"):
        Integration("RateLimit", cost=2, rules=[])
    with pytest.raises(TypeError, match=r"rules must be a list of limiter\.Rule"):
        Integration("RateLimit", rules="not rules")  # type: ignore[arg-type]


def test_with_several_limits_the_first_that_has_headers_shows(integration) -> None:
    skipped = RouteLimit("1/minute", scope="v", key_func=lambda r: "k")
    exempted = Integration("RateLimit", exempt=lambda r: r.method == "GET", clock=ManualClock(T0))
    guards = exempted.guards([skipped], "GET") + integration.guards(
        [RouteLimit("5/minute", scope="w")], "GET"
    )
    decision = integration.decide(guards, request())
    assert decision.headers(200)[:2] == [("X-RateLimit-Limit", "5"), ("X-RateLimit-Remaining", "4")]


def test_a_get_limit_covers_head_which_runs_the_same_view(integration) -> None:
    get_only = RouteLimit("1/minute", scope="v", methods=["get"])
    assert get_only.methods == frozenset({"GET", "HEAD"})
    assert len(integration.guards([get_only], "HEAD")) == 1
    from limiter import Rule

    rule = Rule("/x", RateLimiter("1/minute"), methods=["GET"])
    assert rule.matches("HEAD", "/x") and not rule.matches("POST", "/x")


def test_a_refusal_settles_the_deduct_when_charges_of_earlier_limits(integration) -> None:
    failures = RouteLimit("5/minute", scope="outer", deduct_when=lambda status: status == 401)
    burst = RouteLimit("1/minute", scope="inner")
    guards = integration.guards([failures, burst], "POST")
    first = integration.decide(guards, request())
    assert first.response is None
    first.headers(200)  # a success: not charged to "outer"
    for _ in range(5):  # refused by "inner": "outer" was charged, then refunded
        assert integration.decide(guards, request()).response is not None
    outer_only = integration.guards([RouteLimit("5/minute", scope="outer")], "POST")
    decision = integration.decide(outer_only, request())
    assert decision.headers(200)[1] == ("X-RateLimit-Remaining", "4")


def test_a_refusal_settles_earlier_charges_under_asyncio_too(integration) -> None:
    failures = RouteLimit("5/minute", scope="outer", deduct_when=lambda status: status == 401)
    guards = integration.guards([failures, RouteLimit("1/minute", scope="inner")], "POST")

    async def run() -> str:
        (await integration.adecide(guards, request())).headers(200)
        for _ in range(5):
            assert (await integration.adecide(guards, request())).response is not None
        outer = integration.guards([RouteLimit("5/minute", scope="outer")], "POST")
        return (await integration.adecide(outer, request())).headers(200)[1][1]

    assert asyncio.run(run()) == "4"


def test_a_route_cost_mapping_charges_each_named_limit(integration) -> None:
    with pytest.raises(TypeError, match="cost must be a number of tokens, got True"):
        RouteLimit("2/minute", scope="x", cost={"2/minute": True})
    route = RouteLimit("2/second;10/minute", scope="search", cost={"10/minute": 4})
    # The per-second limit is not named: it takes nothing; 10/minute pays 4 a request.
    assert statuses(integration, [route], 4) == [200, 200, 429, 429]
    with pytest.raises(ValueError, match="cost names no limit of this limiter: '2/minutes'"):
        RouteLimit("2/minute", scope="typo", cost={"2/minutes": 1})  # at decoration
