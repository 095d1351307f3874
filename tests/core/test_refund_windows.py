"""A refund goes only to the window that took the units (issue 22, item 2).

Across a calendar boundary, ``deduct_when``'s give-back and
``RateLimiter.refund(..., taken_at=)`` return nothing to the new window.
"""

from __future__ import annotations

import pytest

from limiter import ManualClock, MemoryStore, Quota, RateLimiter, Rule
from limiter.adapters.wsgi import RateLimitMiddleware
from limiter.core.bucket import step
from limiter.core.costs import Refund
from limiter.core.limits import Limit

MIDNIGHT = 1_700_006_400.0  # 2023-11-15 00:00:00 UTC


def test_four_failed_logins_across_midnight_on_3_per_day_give_a_429_on_the_4th():
    clock = ManualClock(MIDNIGHT - 1)  # 23:59:59
    login = RateLimiter(Quota(3, "day"), clock=clock, name="login")
    statuses = []

    def post_login(middleware):
        env = {"REQUEST_METHOD": "POST", "PATH_INFO": "/login", "REMOTE_ADDR": "6.6.6.6"}
        seen = []
        body = middleware(env, lambda status, headers, exc_info=None: seen.append(status))
        b"".join(body)
        statuses.append(seen[0][:3])

    first = [True]

    def app(environ, start_response):
        if first:
            # The first login, admitted at 23:59:59, is answered after midnight,
            # when three failed logins of the new day went in meanwhile.
            first.clear()
            clock.advance(2)
            for _ in range(3):
                post_login(middleware)
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"welcome"]
        start_response("401 Unauthorized", [("Content-Type", "text/plain")])
        return [b"wrong password"]

    middleware = RateLimitMiddleware(
        app,
        RateLimiter("1000/second", clock=clock, name="default"),
        rules=[Rule("/login", login, deduct_when=lambda status: status == 401)],
    )
    post_login(middleware)  # the 200, settled last
    post_login(middleware)  # the 4th failed login of the day
    assert statuses == ["401", "401", "401", "200", "429"]


def test_a_refund_without_taken_at_goes_to_the_current_window():
    clock = ManualClock(MIDNIGHT - 2)
    limiter = RateLimiter(Quota(100, "day"), clock=clock)
    assert limiter.check("u", 50).allowed
    clock.advance(3)
    assert limiter.check("u", 100).allowed
    assert limiter.refund("u", 50).remaining == 50  # documented: today's behaviour


def test_refund_taken_at_beside_a_token_bucket_only_spares_the_quota():
    clock = ManualClock(MIDNIGHT - 2)
    limiter = RateLimiter([Limit(1, 10, name="bucket"), Quota(10, "day")], clock=clock)
    taken = clock.now()
    assert limiter.check("u", 5).allowed
    clock.advance(3)  # the bucket refilled 3 tokens (8 left); a new day
    assert limiter.check("u", 4).allowed
    refunded = limiter.refund("u", 5, taken_at=taken)
    bucket, quota = refunded.results
    assert (bucket.remaining, quota.remaining) == (9, 6)  # the bucket refunded; the quota not


@pytest.mark.parametrize("bad", ["noon", True, None.__class__])
def test_a_bad_taken_at_is_a_type_error_naming_it(bad):
    with pytest.raises(TypeError, match="taken_at"):
        Refund(1, bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 10**400])
def test_a_non_finite_taken_at_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match="taken_at"):
        Refund(1, bad)


def test_a_refund_in_a_token_bucket_ignores_taken_at_and_stops_at_full():
    limit = Limit(1, 10)
    state = step(None, MIDNIGHT, limit, 4)[0]
    plain = step(state, MIDNIGHT, limit, Refund(2))
    tied = step(state, MIDNIGHT, limit, Refund(2, MIDNIGHT - 10**6))
    assert plain == tied
    assert step(None, MIDNIGHT, limit, Refund(5, MIDNIGHT))[1].remaining == 10
    assert repr(Refund(2, 5)) == "Refund(2.0, taken_at=5.0)"
    assert MemoryStore().apply("k", limit, Refund(1, 0.0), MIDNIGHT).remaining == 10


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", "denycache", pytest.param("redis", marks=pytest.mark.redis)]
)
def test_a_store_applies_a_refund_tied_to_the_day_before_as_nothing(kind, tmp_path, request):
    from limiter import DenyCache, SQLiteStore

    if kind == "memory":
        store = MemoryStore()
    elif kind == "redis":  # taken_at travels on the wire; the script makes the test
        from helpers.redis_servers import unique_prefix
        from limiter.backends.redis import RedisStore

        client = request.getfixturevalue("server").client()
        request.addfinalizer(client.close)
        store = RedisStore(client, prefix=unique_prefix())
    elif kind == "sqlite":
        store = SQLiteStore(str(tmp_path / "limits.db"))
    else:
        store = DenyCache(MemoryStore())
    quota = Quota(100, "day")
    assert store.apply("u", quota, 50, MIDNIGHT - 2).remaining == 50
    assert store.apply("u", quota, 100, MIDNIGHT + 1).remaining == 0  # the new day
    spared = store.apply("u", quota, Refund(50, MIDNIGHT - 2), MIDNIGHT + 1)
    assert (spared.allowed, spared.remaining) == (True, 0)
    given = store.apply("u", quota, Refund(50, MIDNIGHT + 1), MIDNIGHT + 1)
    assert given.remaining == 50
    # Taken within TIME_EPSILON (1e-6 s) before the window's start: this window's.
    assert store.apply("u", quota, Refund(1, MIDNIGHT - 5e-7), MIDNIGHT + 1).remaining == 51
    assert store.apply("u", quota, Refund(1, MIDNIGHT - 2e-6), MIDNIGHT + 1).remaining == 51
    both = store.apply_many(["a", "b"], [quota, quota], (Refund(1, MIDNIGHT - 2), 0), MIDNIGHT + 1)
    assert both.allowed
    if kind == "sqlite":
        store.close()
