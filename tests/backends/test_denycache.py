"""DenyCache: repeated denials answered in this process, with the store's own answers.

Over ``ManualClock`` timelines every check through the wrapper is compared
with the same check on a bare store (MemoryStore and a throwaway Redis): the
results field for field and the headers of every style, while the store
behind the wrapper is asked only when a denial's ``retry_after`` (or
``max_stale``) has run out.  Then the edges: other costs and limits, peeks,
refunds and resets, the entry bound under a flood, the fallback, threads,
asyncio, and the URL option.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from limiter import (
    Charge,
    DenyCache,
    Limit,
    Lockout,
    ManualClock,
    MemoryStore,
    RateLimiter,
    RateLimitResult,
    StoreError,
    store_from_url,
)
from limiter.core.costs import Refund
from limiter.events import DecisionEvent, Outcome
from limiter.http.headers import rate_limit_headers
from limiter.testing import T0
from limiter.testing._store_suite import StoreConformance

STYLES = ("x", "draft", "both")


class Counting:
    """A store that counts the calls that reach it (the stand-in for round trips)."""

    nonblocking = True

    def __init__(self, inner: Any = None) -> None:
        self.inner = MemoryStore() if inner is None else inner
        self.calls = 0

    def apply(self, key: str, limit: Limit, cost: float, now: Optional[float]) -> RateLimitResult:
        self.calls += 1
        result: RateLimitResult = self.inner.apply(key, limit, cost, now)
        return result

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: float, now: Optional[float]
    ) -> RateLimitResult:
        self.calls += 1
        result: RateLimitResult = self.inner.apply_many(keys, limits, cost, now)
        return result

    def reset(self, key: str) -> None:
        self.calls += 1
        self.inner.reset(key)


def headers(result: RateLimitResult, now: float) -> List[List[Tuple[str, str]]]:
    return [rate_limit_headers(result, now=now, style=style) for style in STYLES]


def pair(
    rate: str, store: Any = None, clock: Optional[ManualClock] = None, **cache: Any
) -> Tuple[RateLimiter, RateLimiter, Counting, ManualClock]:
    """A bare limiter and one through a DenyCache, on separate stores, one clock."""
    clock = ManualClock(T0) if clock is None else clock
    counting = Counting(store)
    bare = RateLimiter(rate, store=MemoryStore(), clock=clock)
    cached = RateLimiter(rate, store=DenyCache(counting, **cache), clock=clock)
    return bare, cached, counting, clock


def same_timeline(
    bare: RateLimiter, cached: RateLimiter, clock: ManualClock, cost: float, dt: float, n: int
) -> List[RateLimitResult]:
    """``n`` checks ``dt`` apart on both limiters: identical results and headers each time."""
    results = []
    for _ in range(n):
        expected, got = bare.check("k", cost), cached.check("k", cost)
        assert got == expected, clock.now()
        assert headers(got, clock.now()) == headers(expected, clock.now())
        results.append(got)
        clock.advance(dt)
    return results


# -- the same answers, fewer store calls ----------------------------------------------------


def store_calls_expected(results: List[RateLimitResult]) -> int:
    """One call per admission, and one per run of denials (its first)."""
    runs = sum(not r.allowed and (i == 0 or results[i - 1].allowed) for i, r in enumerate(results))
    return sum(r.allowed for r in results) + runs


@pytest.mark.parametrize(
    ("rate", "cost"),
    [("10/second", 1), ("2/second", 1), ("5/second", 2), ("3/second;20/minute", 1)],
)
def test_a_denied_key_gets_the_stores_answers_with_one_call_per_retry_window(
    rate: str, cost: float
) -> None:
    bare, cached, counting, clock = pair(rate)
    # The burst at one instant, then a check every 0.01 s for 2 s.
    results = same_timeline(bare, cached, clock, cost, 0.0, 12)
    results += same_timeline(bare, cached, clock, cost, 0.01, 200)
    assert counting.calls == store_calls_expected(results)
    assert (
        sum(not r.allowed for r in results)
        > 4 * counting.calls - sum(r.allowed for r in results) * 4
        or len(results) > 3 * counting.calls
    )


def test_the_fields_follow_time_as_the_stores_do() -> None:
    """t, t+0.1, ... until admitted again: retry_after and reset_after shrink, remaining stays."""
    _, cached, counting, clock = pair("1/second", max_stale=None)
    assert cached.check("k").allowed
    first = cached.check("k")
    assert (first.allowed, first.remaining) == (False, 0)
    calls = counting.calls
    seen = [first]
    while True:
        clock.advance(0.1)
        got = cached.check("k")
        if got.allowed:
            break
        seen.append(got)
    assert counting.calls == calls + 1  # only the admission went to the store
    assert [r.remaining for r in seen] == [0] * len(seen)
    assert [r.retry_after for r in seen] == pytest.approx(
        [1 - 0.1 * i for i in range(10)], abs=1e-6
    )
    assert all(r.reset_after == r.retry_after for r in seen)


def test_exact_fields_and_headers_against_the_bare_store_step_by_step() -> None:
    for rate, cost in (("1/second", 1), ("4/second", 3), ("5 per 7 seconds", 2)):
        bare, cached, _, clock = pair(rate, max_stale=None)
        same_timeline(bare, cached, clock, cost, 0.0, 6)
        same_timeline(bare, cached, clock, cost, 0.1, 80)


def test_a_cost_above_the_burst_is_remembered_up_to_max_stale() -> None:
    bare, cached, counting, clock = pair("10/second", max_stale=2.0)
    results = same_timeline(bare, cached, clock, 11, 0.1, 50)  # 5 s
    assert all(r.retry_after == math.inf for r in results)
    assert counting.calls == 3  # at 0, 2 and 4 s


@pytest.mark.parametrize("max_stale", [0.25, 1.0])
def test_max_stale_bounds_how_long_a_denial_is_replayed(max_stale: float) -> None:
    bare, cached, counting, clock = pair("1/minute", max_stale=max_stale)
    same_timeline(bare, cached, clock, 1, 0.0, 2)
    assert counting.calls == 2
    same_timeline(bare, cached, clock, 1, 0.05, 200)  # 10 s
    # A call per max_stale (give or take a step: ManualClock's sums round).
    assert 10 / (max_stale + 0.05) - 1 <= counting.calls - 2 <= 10 / max_stale + 1


def test_several_limits_are_replayed_with_every_limits_result() -> None:
    bare, cached, counting, clock = pair("2/second;5/minute", max_stale=None)
    results = same_timeline(bare, cached, clock, 1, 0.25, 80)
    denials = [r for r in results if not r.allowed]
    assert {r.policy for r in denials} == {"2/second", "5/minute"}
    assert all(len(r.results) == 2 for r in denials)
    # 5 admissions, and a call when the per-second limit lets go (then the minute one denies).
    assert counting.calls < 12


# -- only the same check is replayed --------------------------------------------------------


def test_another_cost_is_not_confused_with_the_denied_one() -> None:
    _, cached, counting, _ = pair("4/second")
    assert cached.check("k", 3).allowed
    assert not cached.check("k", 3).allowed
    calls = counting.calls
    assert not cached.check("k", 3).allowed
    assert counting.calls == calls  # replayed
    assert cached.check("k", 1).allowed  # one token is there: the store is asked
    assert counting.calls == calls + 1
    assert not cached.check("k", 1).allowed
    assert cached.check("k", 3).remaining == 0
    assert counting.calls == calls + 3  # the cost-3 entry was dropped by the admission


def test_peeks_and_other_limits_go_to_the_store() -> None:
    clock = ManualClock(T0)
    counting = Counting()
    cache = DenyCache(counting)
    one, other = Limit(1, 1), Limit(2, 1)
    assert cache.apply("k", one, 1, T0).allowed
    assert not cache.apply("k", one, 1, T0).allowed
    calls = counting.calls
    assert not cache.apply("k", one, 1, T0 + 0.5).allowed
    assert counting.calls == calls
    assert cache.apply("k", one, 0, T0 + 0.5).allowed  # a peek
    assert not cache.apply("k", one, 1.0, T0 + 0.5).allowed  # 1.0 == 1: replayed
    assert counting.calls == calls + 1
    cache.apply("k", one, 1, None)  # another clock (the store's): asked
    assert counting.calls == calls + 2
    assert not cache.apply("k", other, 1, T0 + 0.5).allowed  # another limit: asked
    assert counting.calls == calls + 3
    del clock


def test_an_earlier_now_goes_to_the_store() -> None:
    counting = Counting()
    cache = DenyCache(counting)
    limit = Limit(1, 1)
    cache.apply("k", limit, 1, T0 + 10)
    denied = cache.apply("k", limit, 1, T0 + 10)
    calls = counting.calls
    assert cache.apply("k", limit, 1, T0 + 9.5) == counting.inner.apply("k", limit, 1, T0 + 9.5)
    assert counting.calls == calls + 1
    assert not denied.allowed


def test_a_denial_before_a_refunds_now_goes_to_the_store() -> None:
    """The store applies a denial at an earlier now at the latest time it saw (the
    clock tolerance), a refund's too: a replay from the earlier now would count the
    debt down 0.185 s too soon (hypothesis found it)."""
    counting = Counting()
    cache = DenyCache(counting)
    limit = Limit(0.5, 18)
    cache.apply("k", limit, Charge(50), T0)
    cache.apply("k", limit, Refund(2), T0 + 1.748)
    denied = cache.apply("k", limit, 1, T0 + 1.232)  # 0.516 s before the refund
    calls = counting.calls
    again = cache.apply("k", limit, 1, T0 + 1.417)
    assert again == counting.inner.apply("k", limit, 1, T0 + 1.417)
    assert counting.calls == calls + 1
    assert not denied.allowed and again.reset_after == denied.reset_after


def test_a_call_far_behind_the_latest_now_forgets_the_keys_denial() -> None:
    """More than CLOCK_TOLERANCE behind, the store re-anchors the bucket even on a
    denial (bucket.py rule 7): the denial remembered at the later now would deny a
    check the store admits (found by a deep property run)."""
    bare, cache = MemoryStore(), DenyCache(MemoryStore())
    limit = Limit(1.0, 5)
    for store in (bare, cache):
        store.apply("k", limit, 5, T0)
    for now in (T0 + 0.5, T0 - 1.9, T0 + 1.45):  # denied, denied (re-anchored), admitted
        assert cache.apply("k", limit, 3, now) == bare.apply("k", limit, 3, now)
    assert bare.apply("j", limit, 5, T0) == cache.apply_many(["j"], [limit], 5, T0).results[0]
    assert not cache.apply_many(["j"], [limit], 3, T0 + 0.5).allowed  # remembered
    cache.apply("j", limit, 3, T0 - 1.9)  # another entry of j's: forgotten too
    assert cache.apply_many(["j"], [limit], 3, T0 + 1.45).allowed


def test_a_breach_after_the_lock_ended_drops_the_remembered_lockout() -> None:
    """A lockout's refusal remembered, then a breach the store counts after the lock
    ended: a call 0.2 s behind (applied at the store's later time) is not replayed
    as still locked out."""
    limits = [Limit(1, 1, name="a"), Lockout(2, 3.0, 5.0)]
    keys = ["k|a", "k|lockout"]
    bare, cache = MemoryStore(), DenyCache(MemoryStore())
    calls = [(1000.0, 1), (1000.1, 1), (1000.2, 1), (1004.5, 1), (1005.3, 2), (1005.1, 1)]
    seen = []
    for now, cost in calls:
        expected = bare.apply_many(keys, limits, cost, now)
        assert cache.apply_many(keys, limits, cost, now) == expected, now
        seen.append((expected.allowed, expected.locked_out))
    # locked at 1000.2 until 1005.2; the last is admitted, applied at 1005.3
    locked, refused = (False, True), (False, False)
    assert seen == [(True, False), refused, locked, locked, refused, (True, False)]


def test_a_charge_beside_a_lockout_drops_the_remembered_refusal() -> None:
    """``charge`` applies the limits' keys without the lockout's, so the entry under all
    of them was kept, and replayed the bucket as it was before the charge."""
    answers = []
    for store in (MemoryStore(), DenyCache(MemoryStore(), max_stale=None)):
        clock = ManualClock(1000.0)
        limiter = RateLimiter(
            Limit(1, 3), lockout=Lockout(1, 10, 2), clock=clock, store=store, name="x"
        )
        limiter.check("k", 3)
        assert limiter.check("k", 3).locked_out  # the breach locks it for 2 s
        clock.advance(0.1)
        assert limiter.check("k", 3).locked_out  # remembered by the cache
        assert limiter.charge("k", 100).allowed  # the bucket now owes one burst: 6 s
        clock.advance(0.1)
        answers.append(limiter.check("k", 3))
    assert answers[1] == answers[0]
    assert round(answers[0].retry_after, 6) == 5.9


@pytest.mark.parametrize("lift", ["reset", "refund"])
def test_a_reset_or_refund_through_the_wrapper_lifts_the_denial(lift: str) -> None:
    _, cached, _, clock = pair("1/minute")
    many = RateLimiter("1/minute;10/hour", store=DenyCache(MemoryStore()), clock=clock)
    for limiter in (cached, many):  # apply, then apply_many
        assert limiter.check("k").allowed and not limiter.check("k").allowed
        lifted = getattr(limiter, lift)("k")
        if lift == "refund" and limiter is cached:
            assert lifted.allowed
        assert limiter.check("k").allowed


def test_a_reset_elsewhere_is_seen_within_max_stale() -> None:
    """Another process resets the shared key: denied here until the deadline, no longer."""
    clock = ManualClock(T0)
    shared = MemoryStore()
    here = RateLimiter("1/minute", store=DenyCache(shared, max_stale=1.0), clock=clock)
    there = RateLimiter("1/minute", store=shared, clock=clock)
    assert here.check("k").allowed and not here.check("k").allowed
    there.reset("k")
    clock.advance(0.9)
    assert not here.check("k").allowed  # stale: bounded by max_stale
    clock.advance(0.1)
    assert here.check("k").allowed


def test_a_denial_in_flight_during_a_reset_is_not_remembered() -> None:
    limit = Limit(1, 1)

    class ResetMidway(Counting):
        def apply(self, *args: Any) -> RateLimitResult:
            result = super().apply(*args)
            cache.reset("k")  # lands after the store answered, before the wrapper notes it
            return result

    inner = ResetMidway()
    cache = DenyCache(inner)
    inner.inner.apply("k", limit, 1, T0)
    assert not cache.apply("k", limit, 1, T0).allowed
    assert len(cache) == 0
    assert DenyCache(inner).apply("k", limit, 1, T0).allowed


# -- bounds, failures, observers ------------------------------------------------------------


def test_a_flood_of_distinct_denied_keys_stays_within_max_keys() -> None:
    counting = Counting(MemoryStore(max_keys=10))
    cache = DenyCache(counting, max_keys=1000)
    limiter = RateLimiter("1/second", store=cache, clock=ManualClock(T0))
    most = 0
    for i in range(100_000):
        assert not limiter.check(f"ip:{i}", 2).allowed  # above the burst: denied
        most = max(most, len(cache))
    assert most == len(cache) == 1000
    calls = counting.calls
    assert not limiter.check("ip:99999", 2).allowed  # the newest are still there
    assert not limiter.check("ip:0", 2).allowed  # the oldest were dropped
    assert counting.calls == calls + 1


def test_expired_entries_make_room_first() -> None:
    clock = ManualClock(T0)
    counting = Counting()
    cache = DenyCache(counting, max_keys=3, max_stale=None)
    short, long = Limit(10, 1), Limit(1 / 60, 1)
    cache.apply("old-long", long, 1, T0)
    cache.apply("old-long", long, 1, T0)
    cache.apply("short", short, 1, T0)
    cache.apply("short", short, 1, T0)  # denied for 0.1 s
    cache.apply("long", long, 1, T0)
    cache.apply("long", long, 1, T0)
    assert len(cache) == 3
    cache.apply("new", long, 1, T0 + 1)
    cache.apply("new", long, 1, T0 + 1)  # full: "short" has expired and goes, not "old-long"
    calls = counting.calls
    assert not cache.apply("old-long", long, 1, T0 + 1).allowed
    assert counting.calls == calls
    del clock


def test_store_errors_pass_through_unchanged() -> None:
    error = StoreError("down")

    class Down:
        def apply(self, *args: Any) -> RateLimitResult:
            raise error

        def apply_many(self, *args: Any) -> RateLimitResult:
            raise error

        def reset(self, key: str) -> None:
            raise error

    limiter = RateLimiter("1/second", store=DenyCache(Down()))
    for call in (lambda: limiter.check("k"), lambda: limiter.reset("k")):
        with pytest.raises(StoreError) as caught:
            call()
        assert caught.value is error


def test_answers_of_the_fallback_are_not_remembered() -> None:
    class OnFallback(Counting):
        using_fallback = True

    counting = OnFallback()
    limiter = RateLimiter("1/minute", store=DenyCache(counting), clock=ManualClock(T0))
    assert limiter.store.using_fallback  # type: ignore[union-attr]
    assert limiter.check("k").allowed
    for _ in range(3):
        assert not limiter.check("k").allowed
    assert counting.calls == 4


def test_observers_see_replayed_denials_as_denials() -> None:
    events: List[DecisionEvent] = []
    limiter = RateLimiter(
        "1/minute", store=DenyCache(MemoryStore()), clock=ManualClock(T0), on_decision=events.append
    )
    for _ in range(4):
        limiter.check("k")
    assert [e.outcome for e in events] == [Outcome.ALLOWED] + [Outcome.DENIED] * 3
    assert [e.result for e in events[2:]] == [events[1].result] * 2


def test_concurrent_checks_admit_exactly_burst() -> None:
    counting = Counting()
    limiter = RateLimiter("50/minute", store=DenyCache(counting), clock=ManualClock(T0))
    admitted = []

    def hammer() -> None:
        admitted.append(sum(limiter.check("k").allowed for _ in range(500)))

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(admitted) == 50
    assert counting.calls < 50 + 8 * 3


def test_capabilities_follow_the_wrapped_store() -> None:
    class AsyncOnly:
        async def aapply(self, *args: Any) -> RateLimitResult:
            return MemoryStore().apply(*args)

        async def aapply_many(self, *args: Any) -> RateLimitResult:
            return MemoryStore().apply_many(*args)

        async def areset(self, key: str) -> None:
            pass

    cache = DenyCache(AsyncOnly())
    assert cache.apply is None and cache.nonblocking is False  # type: ignore[comparison-overlap]
    limiter = RateLimiter("1/second", store=cache)
    with pytest.raises(TypeError, match="async only"):
        limiter.check("k")
    assert asyncio.run(limiter.acheck("k")).allowed
    memory = DenyCache(MemoryStore())
    assert memory.nonblocking is True and memory.aapply is not None
    assert memory.ping is None and memory.close is None  # type: ignore[comparison-overlap]
    assert "MemoryStore" in repr(memory)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_keys": 0}, ValueError, "max_keys must be an integer >= 1, got 0"),
        ({"max_keys": 2.5}, TypeError, "got 2.5"),
        ({"max_keys": True}, TypeError, "got True"),
        ({"max_stale": 0}, ValueError, "max_stale .* got 0"),
        ({"max_stale": math.nan}, ValueError, "got nan"),
        ({"max_stale": "1"}, TypeError, "got '1'"),
    ],
)
def test_bad_arguments_name_the_value(kwargs: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        DenyCache(MemoryStore(), **kwargs)


def test_a_store_that_is_no_store_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Store or AsyncStore, got 42"):
        DenyCache(42)


def test_bad_costs_still_reach_the_store() -> None:
    limiter = RateLimiter("1/minute", store=DenyCache(MemoryStore()), clock=ManualClock(T0))
    limiter.check("k")
    limiter.check("k")
    for cost, error in ((-1, ValueError), (math.nan, ValueError), (True, TypeError)):
        with pytest.raises(error):
            limiter.check("k", cost)


# -- a property test against the bare store --------------------------------------------------


@given(
    rate=st.sampled_from([0.5, 1.0, 3.0, 10.0, 100 / 60, 7.3]),
    burst=st.integers(1, 12),
    second=st.booleans(),
    ops=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.001, 0.01, 0.1, 0.25, 1 / 3, 1.0, 2.5, -0.5, -2.5]),
            st.sampled_from([1, 1, 1, 2, 3, 0.5, 40]),
        ),
        min_size=1,
        max_size=60,
    ),
)
def test_matches_the_bare_store(
    rate: float, burst: int, second: bool, ops: List[Tuple[float, float]]
) -> None:
    """Same decisions, same integers and headers; floats equal but for a rounding."""
    limits = [Limit(rate, burst, "a")] + ([Limit(rate / 7, burst * 3, "b")] if second else [])
    keys = ["{k}|a", "{k}|b"][: len(limits)]
    bare, cache = MemoryStore(), DenyCache(MemoryStore(), max_stale=None)
    now = T0
    for dt, cost in ops:
        now += dt
        expected = bare.apply_many(keys, limits, cost, now)
        got = cache.apply_many(keys, limits, cost, now)
        for e, g in zip((expected, *expected.results), (got, *got.results)):
            assert (g.allowed, g.limit, g.remaining, g.window, g.policy) == (
                e.allowed,
                e.limit,
                e.remaining,
                e.window,
                e.policy,
            )
            assert g.reset_after == pytest.approx(e.reset_after, rel=1e-12, abs=1e-12)
            assert g.retry_after == pytest.approx(e.retry_after, rel=1e-12, abs=1e-12)
        assert headers(got, now) == headers(expected, now)


# -- the Store contract, through the wrapper ------------------------------------------------


class TestDenyCacheOverMemory(StoreConformance):
    def make_store(self) -> DenyCache:
        return DenyCache(MemoryStore())


# -- the URL option -------------------------------------------------------------------------


def test_the_url_option_wraps_a_shared_store() -> None:
    pytest.importorskip("redis")
    store = store_from_url("redis://127.0.0.1:1/0?deny_cache=100&deny_cache_max_stale=0.5")
    assert isinstance(store, DenyCache)
    assert (store.max_keys, store.max_stale) == (100, 0.5)
    assert type(store.store).__name__ == "RedisStore"
    store = store_from_url("redis://127.0.0.1:1/0?deny_cache=7&deny_cache_max_stale=none")
    assert (store.max_keys, store.max_stale) == (7, None)
    store = store_from_url("redis://127.0.0.1:1/0", deny_cache=5, deny_cache_max_stale=2)
    assert (store.max_keys, store.max_stale) == (5, 2.0)
    assert type(store_from_url("redis://127.0.0.1:1/0?deny_cache=5", deny_cache=None)).__name__ == (
        "RedisStore"
    )
    # close() reaches the RedisStore, which closes its own connections (none yet here).
    assert callable(store.close)
    store.close()
    store.close()


def test_the_url_option_on_sqlite(tmp_path: Any) -> None:
    store = store_from_url(f"sqlite:///{tmp_path}/a.db?deny_cache=10")
    try:
        assert isinstance(store, DenyCache) and store.max_keys == 10
        limiter = RateLimiter("1/minute", store=store, clock=ManualClock(T0))
        assert [limiter.allow("k") for _ in range(3)] == [True, False, False]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("deny_cache=0", "deny_cache must be an integer >= 1, got '0'"),
        ("deny_cache=many", "deny_cache must be an integer >= 1, got 'many'"),
        ("deny_cache=5&deny_cache_max_stale=-1", "deny_cache_max_stale must be .* got '-1'"),
        ("deny_cache_max_stale=1", "deny_cache_max_stale needs deny_cache"),
    ],
)
def test_a_bad_url_option_is_a_value_error_at_start_up(query: str, match: str) -> None:
    pytest.importorskip("redis")
    with pytest.raises(ValueError, match=match):
        store_from_url(f"redis://127.0.0.1:1/0?{query}")


def test_memory_urls_take_no_deny_cache() -> None:
    with pytest.raises(ValueError, match="unknown query parameter 'deny_cache'"):
        store_from_url("memory://?deny_cache=10")


# -- a real Redis -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rclient(server: Any) -> Iterator[Any]:
    client = server.client()
    yield client
    client.close()


def script_calls(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


@pytest.mark.redis
class TestRedis:
    @pytest.fixture(autouse=True)
    def _client(self, rclient: Any) -> None:
        from helpers.redis_servers import unique_prefix
        from limiter.backends.redis import RedisStore

        self.client = rclient
        self.store: Callable[[], Any] = lambda: RedisStore(rclient, prefix=unique_prefix())

    @pytest.mark.parametrize(("rate", "cost"), [("2/second", 1), ("3/second;20/minute", 1)])
    def test_same_answers_and_headers_as_the_bare_store_with_one_call_per_window(
        self, rate: str, cost: float
    ) -> None:
        clock = ManualClock(T0)
        bare = RateLimiter(rate, store=self.store(), clock=clock)
        cached = RateLimiter(rate, store=DenyCache(self.store()), clock=clock)
        windows = 0
        before = script_calls(self.client)
        for step in range(150):  # 0.01 s apart: 1.5 s
            expected = bare.check("k", cost)
            got = cached.check("k", cost)
            assert got == expected, step
            assert headers(got, clock.now()) == headers(expected, clock.now())
            windows += got.allowed  # each admission ends a retry window
            clock.advance(0.01)
        calls = script_calls(self.client) - before - 150  # the bare limiter's
        # One call per admission, plus one per denied window (its first denial).
        assert calls <= 2 * windows + 1
        assert calls < 30

    def test_many_keys_at_most_one_script_call_per_key_per_retry_window(self) -> None:
        clock = ManualClock(T0)
        limiter = RateLimiter("1/second", store=DenyCache(self.store()), clock=clock)
        before = script_calls(self.client)
        admitted = 0
        for _ in range(100):
            for key in ("a", "b", "c"):
                admitted += limiter.check(key).allowed
            clock.advance(0.02)  # 2 s in all: two windows per key
        assert admitted == 3 * 2
        # Each key: one call per admission, one per retry window (its first denial).
        assert script_calls(self.client) - before == admitted + 3 * 2

    def test_server_time_replays_never_admit_late_nor_deny_early(self) -> None:
        limiter = RateLimiter("1/minute", store=DenyCache(self.store()))  # Redis TIME
        assert limiter.check("k").allowed
        first = limiter.check("k")
        before = script_calls(self.client)
        replayed = [limiter.check("k") for _ in range(50)]
        assert script_calls(self.client) == before
        assert all(not r.allowed and r.remaining == 0 for r in replayed)
        assert all(0 < r.retry_after <= first.retry_after for r in replayed)
        assert replayed[-1].retry_after > first.retry_after - 5

    def test_the_url_option(self, server: Any) -> None:
        store = store_from_url(f"{server.url}?deny_cache=10&prefix=dc-url:")
        limiter = RateLimiter("1/minute", store=store, name="u")
        limiter.reset("k")
        before = script_calls(self.client)
        assert [limiter.allow("k") for _ in range(20)] == [True] + [False] * 19
        assert script_calls(self.client) - before == 2
        store.ping()
        store.store.client.close()


@pytest.mark.redis
@pytest.mark.usefixtures("class_event_loop")
class TestAsyncRedis:
    loop: asyncio.AbstractEventLoop
    port: int

    def test_acheck_replays_denials_with_the_stores_answers(self, rclient: Any) -> None:
        import redis.asyncio

        from helpers.redis_servers import unique_prefix
        from limiter.backends.redis import AsyncRedisStore

        client = redis.asyncio.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        clock = ManualClock(T0)
        cache = DenyCache(AsyncRedisStore(client, prefix=unique_prefix()))
        assert cache.apply is None  # type: ignore[comparison-overlap]
        cached = RateLimiter("2/second", store=cache, clock=clock)
        bare = RateLimiter(
            "2/second", store=AsyncRedisStore(client, prefix=unique_prefix()), clock=clock
        )

        async def run() -> int:
            before = script_calls(rclient)
            admitted = 0
            for _ in range(100):
                expected = await bare.acheck("k")
                got = await cached.acheck("k")
                assert got == expected
                admitted += got.allowed
                clock.advance(0.01)
            await cached.areset("k")
            assert (await cached.acheck("k")).allowed
            await client.aclose() if hasattr(client, "aclose") else await client.close()
            return script_calls(rclient) - before - 100 - admitted

        extra = self.loop.run_until_complete(run())
        assert extra <= 2 + 3  # a denial per window (2 s: 2 tokens a second, ~3 windows)


@pytest.mark.redis
class TestDenyCacheOverRedis(StoreConformance):
    @pytest.fixture(autouse=True)
    def _client(self, rclient: Any) -> None:
        self.client = rclient

    def make_store(self) -> DenyCache:
        from helpers.redis_servers import unique_prefix
        from limiter.backends.redis import RedisStore

        return DenyCache(RedisStore(self.client, prefix=unique_prefix()))


class _Key(str):
    """A str subclass, as a framework's "safe string" type can be."""


@pytest.mark.parametrize("forget", ["reset", "refund"])
def test_a_str_subclass_key_is_never_replayed_after_a_reset_through_the_wrapper(
    forget: str,
) -> None:
    cache = DenyCache(MemoryStore())
    limit = Limit(1, 1)
    assert cache.apply(_Key("k"), limit, 1, T0).allowed
    assert not cache.apply(_Key("k"), limit, 1, T0).allowed
    if forget == "reset":
        cache.reset(_Key("k"))
    else:
        from limiter.core.costs import Refund

        cache.apply(_Key("k"), limit, Refund(1), T0)
    # The store admits "k" now; so must the wrapper, whichever str the key is.
    assert cache.store.apply("k", limit, 0, T0 + 0.1).remaining == 1
    assert cache.apply("k", limit, 1, T0 + 0.1).allowed


# -- lockouts, per-limit costs, charges (issue 15) ---------------------------------------------

LOCK_KEYS = ["{u}:bucket", "{u}:lock"]


def lockout_limits(breaches: int = 3, duration: float = 100.0) -> Tuple[Limit, ...]:
    return (Limit(1, 2, "bucket"), Lockout(breaches=breaches, within=60, duration=duration))


def test_with_a_lockout_every_ordinary_denial_reaches_the_store() -> None:
    # Each denial is a breach: replaying one would hide it from the store, and
    # the key would never be locked out.
    counting = Counting()
    cache, bare = DenyCache(counting, max_stale=None), MemoryStore()
    limits = lockout_limits(breaches=4)
    for i in range(6):
        now = T0 + i * 0.01
        got = cache.apply_many(LOCK_KEYS, limits, 1, now)
        assert got == bare.apply_many(LOCK_KEYS, limits, 1, now), i
    assert counting.calls == 6  # 2 admissions, 4 denials (the fourth locks)
    assert got.locked_out
    # Without the lockout the same denials are replayed.
    plain = DenyCache(Counting())
    for i in range(6):
        plain.apply_many(LOCK_KEYS[:1], limits[:1], 1, T0 + i * 0.01)
    assert plain.store.calls == 3


def test_a_locked_out_key_is_replayed_until_its_retry_after_then_asked() -> None:
    counting = Counting()
    cache, bare = DenyCache(counting, max_stale=None), MemoryStore()
    limits = lockout_limits()
    for _ in range(5):  # 2 admitted, 3 breaches: locked out until T0 + 100
        locked = cache.apply_many(LOCK_KEYS, limits, 1, T0)
        assert locked == bare.apply_many(LOCK_KEYS, limits, 1, T0)
    assert locked.locked_out and counting.calls == 5
    for t in (0.0, 1.0, 50.0, 99.5, 99.999):  # the lockout's fields, the bucket's peek: exact
        expected = bare.apply_many(LOCK_KEYS, limits, 1, T0 + t)
        got = cache.apply_many(LOCK_KEYS, limits, 1, T0 + t)
        assert got == expected and got.kind == "lockout", t
        assert [r.__class__ for r in got.results] == [r.__class__ for r in expected.results]
        assert headers(got, T0 + t) == headers(expected, T0 + t)
    assert counting.calls == 5
    # Within TIME_EPSILON of its end the lockout no longer refuses: the store
    # decides (an admission here, a breach it must count otherwise).
    almost = cache.apply_many(LOCK_KEYS, limits, 1, T0 + 100 - 5e-7)
    assert almost == bare.apply_many(LOCK_KEYS, limits, 1, T0 + 100 - 5e-7)
    assert almost.allowed and counting.calls == 6


def test_a_lockout_replay_is_bounded_by_max_stale() -> None:
    counting = Counting()
    cache = DenyCache(counting, max_stale=1.0)
    limits = lockout_limits()
    for _ in range(5):
        cache.apply_many(LOCK_KEYS, limits, 1, T0)
    calls = counting.calls
    assert cache.apply_many(LOCK_KEYS, limits, 1, T0 + 0.9).locked_out
    assert counting.calls == calls
    assert cache.apply_many(LOCK_KEYS, limits, 1, T0 + 1.0).locked_out  # asked again
    assert counting.calls == calls + 1


@pytest.mark.parametrize("key", LOCK_KEYS)
def test_a_reset_through_the_wrapper_drops_a_remembered_lockout(key: str) -> None:
    counting = Counting()
    cache, bare = DenyCache(counting, max_stale=None), MemoryStore()
    limits = lockout_limits()
    for _ in range(5):
        cache.apply_many(LOCK_KEYS, limits, 1, T0)
        bare.apply_many(LOCK_KEYS, limits, 1, T0)
    assert len(cache) == 1
    cache.reset(key)
    bare.reset(key)
    assert len(cache) == 0
    calls = counting.calls
    got = cache.apply_many(LOCK_KEYS, limits, 1, T0 + 10)
    assert got == bare.apply_many(LOCK_KEYS, limits, 1, T0 + 10)
    assert counting.calls == calls + 1
    # The lockout's key lifts it; the bucket's alone does not.
    assert got.locked_out is (key == LOCK_KEYS[0])


def test_a_lockout_alone_reports_its_status_through_the_wrapper() -> None:
    counting = Counting()
    cache, bare = DenyCache(counting, max_stale=None), MemoryStore()
    limits = lockout_limits(breaches=1)
    for store in (cache, bare):
        store.apply_many(LOCK_KEYS, limits, 3, T0)  # above the burst: a breach, locked
    for t in (1.0, 1.0, 99.0):
        got = cache.apply(LOCK_KEYS[1], limits[1], 1, T0 + t)
        assert got == bare.apply(LOCK_KEYS[1], limits[1], 1, T0 + t)
        assert got.locked_out and got.retry_after == pytest.approx(100 - t, abs=1e-6)
    assert counting.calls == 2  # the first status check, then replays


def test_per_limit_costs_and_charges_go_to_the_store_and_are_never_remembered() -> None:
    counting = Counting()
    cache, bare = DenyCache(counting, max_stale=None), MemoryStore()
    keys = ["{u}:requests", "{u}:tokens"]
    limits = (Limit(1, 10, "requests"), Limit(100, 1000, "tokens"))
    for cost in [(1, 350)] * 4 + [[1, 350], (0, 1), Charge(5), (Charge(1), 2), (0, 0)]:
        got = cache.apply_many(keys, limits, cost, T0)
        assert got == bare.apply_many(keys, limits, cost, T0), cost
    assert counting.calls == 9 and len(cache) == 0
    for cost in (Charge(2), Charge(10**400)):
        assert cache.apply("{u}:requests", limits[0], cost, T0) == bare.apply(
            "{u}:requests", limits[0], cost, T0
        )
    assert counting.calls == 11 and len(cache) == 0
    with pytest.raises(ValueError, match="cost"):
        cache.apply_many(keys, limits, (1, 2, 3), T0)  # the store's error, unchanged


def test_a_charge_drops_the_keys_remembered_denial() -> None:
    # A charge empties the bucket further: the remembered debt is out of date.
    counting = Counting()
    cache, bare = DenyCache(counting, max_stale=None), MemoryStore()
    limit = Limit(1, 2)
    for cost in (2, 1, Charge(2), 1):
        assert cache.apply("k", limit, cost, T0) == bare.apply("k", limit, cost, T0)
    assert counting.calls == 4
    later = cache.apply("k", limit, 1, T0 + 1)  # replayed from the charge's denial
    assert later == bare.apply("k", limit, 1, T0 + 1) and not later.allowed
    assert counting.calls == 4


def test_a_refund_among_per_limit_costs_drops_every_entry_of_its_keys() -> None:
    counting = Counting()
    cache = DenyCache(counting, max_stale=None)
    keys = ["{u}:a", "{u}:b"]
    limits = (Limit(1, 1), Limit(1, 5))
    for _ in range(2):
        cache.apply_many(keys, limits, 1, T0)
        cache.apply(keys[0], limits[0], 1, T0)
    assert len(cache) == 2  # the pair's denial and the single key's
    calls = counting.calls
    refunded = cache.apply_many(keys, limits, (Refund(1), 0), T0)
    assert refunded.allowed and len(cache) == 0 and counting.calls == calls + 1
    assert cache.apply(keys[0], limits[0], 1, T0).allowed  # asked: the token is back
