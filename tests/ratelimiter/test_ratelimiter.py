"""RateLimiter, the facade: arguments, decisions, concurrency, keys, cleanup.

MemoryStore's own eviction and sweep tests are in test_memory_store.py.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from typing import List

import pytest

from limiter import Limit, ManualClock, MemoryStore, RateLimiter


class TestArguments:
    @pytest.mark.parametrize(
        "rate, burst, expected",
        [
            ("100/minute", None, Limit(100 / 60, 100)),
            ("10 per second", None, Limit(10, 10)),
            ("10/second", 3, Limit(10, 3)),
            (2.5, None, Limit(2.5, 3)),
            (0.2, None, Limit(0.2, 1)),
            (10, 20, Limit(10, 20)),
            (Limit(1, 4), None, Limit(1, 4)),
        ],
    )
    def test_rate_forms(self, rate: object, burst: object, expected: Limit) -> None:
        assert RateLimiter(rate, burst).limits == (expected,)  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "rate, burst",
        [
            (0, None),
            (-1, None),
            (math.nan, None),
            (math.inf, None),
            ("abc", None),
            ("10/fortnight", None),
            ("-5/second", None),
            (10, 0),
        ],
    )
    def test_bad_values_name_themselves(self, rate: object, burst: object) -> None:
        with pytest.raises(ValueError) as info:
            RateLimiter(rate, burst)  # type: ignore[arg-type]
        bad = burst if burst is not None else rate
        assert repr(bad) in str(info.value)

    def test_bad_store_and_clock(self) -> None:
        with pytest.raises(TypeError, match="store"):
            RateLimiter(1, store=object())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="clock"):
            RateLimiter(1, clock=object())  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "rate, burst, message",
        [
            ("10/s", "x", "burst must be an integer, got 'x'"),
            (10, 1.5, "burst must be an integer, got 1.5"),
            (10, "3", "burst must be an integer, got '3'"),
            (10, True, "burst must be an integer, got True"),
            # The type first, before "ambiguous with several limits".
            ("10/s;100/m", "x", "burst must be an integer, got 'x'"),
            ([Limit(1, 1)], "x", "burst must be an integer, got 'x'"),
            (
                [Limit(1, 1), 5],
                None,
                "each limit must be a Limit or a string like '10/second', got 5",
            ),
        ],
    )
    def test_wrong_types_are_type_errors(self, rate: object, burst: object, message: str) -> None:
        with pytest.raises(TypeError) as info:
            RateLimiter(rate, burst)  # type: ignore[arg-type]
        assert str(info.value) == message

    def test_name_must_be_a_string(self) -> None:
        with pytest.raises(TypeError) as info:
            RateLimiter(1, name=5)  # type: ignore[arg-type]
        assert str(info.value) == "name must be a str, got 5"

    @pytest.mark.parametrize("key", [None, 12, b"bytes"])
    def test_key_must_be_a_string(self, key: object) -> None:
        limiter = RateLimiter(1)
        message = f"key must be a str, got {key!r}"
        calls = [limiter.check, limiter.allow, limiter.peek, limiter.reset, limiter.storage_key]
        for method in calls:
            with pytest.raises(TypeError) as info:
                method(key)  # type: ignore[arg-type]
            assert str(info.value) == message
        with pytest.raises(TypeError, match=re.escape(message)):
            asyncio.run(limiter.acheck(key))  # type: ignore[arg-type]
        several = RateLimiter("1/s;10/m")
        with pytest.raises(TypeError, match=re.escape(message)):
            several.check(key)  # type: ignore[arg-type]


class TestDecisions:
    def test_check_allow_peek_reset(self) -> None:
        clock = ManualClock(1000.0)
        limiter = RateLimiter("3/second", clock=clock)
        assert limiter.peek("a").remaining == 3
        assert [limiter.check("a").remaining for _ in range(3)] == [2, 1, 0]
        assert limiter.allow("a") is False
        assert limiter.allow("b") is True  # keys are independent
        assert limiter.peek("a").remaining == 0
        limiter.reset("a")
        assert limiter.peek("a").remaining == 3

    def test_exact_steady_rate(self) -> None:
        clock = ManualClock(1_700_000_000.0)
        limiter = RateLimiter(10, 20, clock=clock)
        admitted = 0
        for _ in range(10_000):  # 100 requests per second for 100 seconds
            admitted += limiter.allow("ip")
            clock.advance(0.01)
        assert admitted == 20 + 10 * 100 - 1  # the burst, then 10/s (the last refill is at t=100)

    def test_cost(self) -> None:
        limiter = RateLimiter(1, 10, clock=ManualClock())
        assert limiter.check("k", cost=7).remaining == 3
        denied = limiter.check("k", cost=4)
        assert not denied.allowed and denied.retry_after == pytest.approx(1.0)
        assert limiter.check("k", cost=3).allowed
        assert limiter.check("k", cost=11).retry_after == math.inf
        with pytest.raises(ValueError, match="cost"):
            limiter.check("k", cost=-1)

    def test_threads_on_one_key_admit_exactly_burst(self) -> None:
        limiter = RateLimiter(5, 100, clock=ManualClock(1_700_000_000.0))
        admitted: List[int] = []
        barrier = threading.Barrier(16)

        def worker() -> None:
            barrier.wait()
            admitted.append(sum(limiter.allow("hot") for _ in range(2000)))

        threads = [threading.Thread(target=worker) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(admitted) == 100

    def test_gathered_async_checks_admit_exactly_burst(self) -> None:
        limiter = RateLimiter(5, 100, clock=ManualClock(1_700_000_000.0))

        async def flood() -> int:
            results = await asyncio.gather(*(limiter.acheck("hot") for _ in range(1000)))
            return sum(r.allowed for r in results)

        assert asyncio.run(flood()) == 100

        async def rest() -> tuple:
            peek = await limiter.apeek("hot")
            await limiter.areset("hot")
            return peek.remaining, (await limiter.apeek("hot")).remaining

        assert asyncio.run(rest()) == (0, 100)


class TestKeys:
    def test_limiters_sharing_a_store_do_not_collide(self) -> None:
        store = MemoryStore()
        clock = ManualClock()
        strict = RateLimiter(1, 1, store=store, clock=clock)
        loose = RateLimiter(100, 100, store=store, clock=clock)
        assert strict.allow("ip") and not strict.allow("ip")
        assert loose.peek("ip").remaining == 100
        login = RateLimiter(1, 1, store=store, clock=clock, name="login")
        assert login.allow("ip")
        assert len(store) == 2

    def test_huge_keys_are_stored_as_a_digest(self) -> None:
        store = MemoryStore()
        limiter = RateLimiter(1, 1, store=store, clock=ManualClock())
        huge = "k" * 1_000_000
        assert limiter.allow(huge)
        assert not limiter.allow(huge)
        assert limiter.allow(huge[:-1] + "x")  # a different key
        stored = limiter.storage_key(huge)
        assert len(stored) < 100 and stored.startswith("1/s\\:1:sha256:")  # name 1/s:1

    def test_default_name_follows_the_limit(self) -> None:
        assert RateLimiter("100/minute").name == "1.66667/s:100"
        shared = MemoryStore()
        assert RateLimiter(10, 20, name="api", store=shared).storage_key("1.2.3.4") == "api:1.2.3.4"
        assert RateLimiter(10, 20, name="api").storage_key("1.2.3.4") == "1.2.3.4"  # own store

    def test_no_key_of_one_limiter_is_another_limiters_on_a_shared_store(self) -> None:
        """Names may hold ":" (the default ones do): it is escaped in the namespace, so a
        client choosing its key cannot spend another limiter's bucket."""
        shared, clock = MemoryStore(), ManualClock()
        login = RateLimiter("5/minute", store=shared, clock=clock, name="login")
        admin = RateLimiter("5/minute", store=shared, clock=clock, name="login:admin")
        for _ in range(5):
            assert login.check("admin:alice").allowed  # the attacker's own key
        assert admin.check("alice").remaining == 4  # alice's bucket is untouched
        assert login.storage_key("admin:alice") == "login:admin:alice"
        assert admin.storage_key("alice") == "login\\:admin:alice"
        assert RateLimiter(10, 20, store=shared).storage_key("k") == "10/s\\:20:k"
        assert RateLimiter(1, 1, store=shared, name="a\\").storage_key(":k") == "a\\\\::k"


class TestCleanup:
    def test_start_cleanup_sweeps_and_stops_cleanly(self) -> None:
        store = MemoryStore()
        clock = ManualClock(1_700_000_000.0)
        limiter = RateLimiter(10, 10, store=store, clock=clock)
        for i in range(100):
            limiter.allow(f"ip{i}")
        clock.advance(60)
        before = threading.active_count()
        stop = limiter.start_cleanup(max_age=600, interval=3600)
        assert threading.active_count() == before + 1
        stop()  # the first sweep runs before the thread looks at stop
        stop()  # idempotent
        assert threading.active_count() == before
        assert len(store) == 0

    @pytest.mark.parametrize("interval", [0, -1, math.nan, math.inf])
    def test_start_cleanup_validates(self, interval: object) -> None:
        with pytest.raises(ValueError, match="interval"):
            RateLimiter(1).start_cleanup(None, interval)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_age"):
            RateLimiter(1).start_cleanup(-1, 1)

    def test_start_cleanup_wrong_types_are_type_errors(self) -> None:
        limiter = RateLimiter(1)
        with pytest.raises(TypeError) as info:
            limiter.start_cleanup(None, "5")  # type: ignore[arg-type]
        assert str(info.value) == "interval must be a number of seconds, got '5'"
        with pytest.raises(TypeError) as info:
            limiter.start_cleanup("60", 1)  # type: ignore[arg-type]
        assert str(info.value) == "max_age must be None or a number of seconds >= 0, got '60'"
        with pytest.raises(ValueError) as value:
            limiter.start_cleanup(math.nan, 1)
        assert str(value.value) == "max_age must be None or a number of seconds >= 0, got nan"

    def test_start_cleanup_needs_a_sweepable_store(self) -> None:
        class NoSweep:
            def apply(self, *args: object) -> None: ...

            def reset(self, key: str) -> None: ...

        with pytest.raises(TypeError, match="sweep"):
            RateLimiter(1, store=NoSweep()).start_cleanup(None, 1)  # type: ignore[arg-type]


class TestStoreCapabilities:
    """What RateLimiter finds on a store is what limiter.store declares, and nothing else."""

    class Minimal:
        """A third-party store with the three methods of ``Store`` only."""

        def __init__(self) -> None:
            self.inner = MemoryStore()
            self.calls: List[str] = []

        def apply(self, key: str, limit: Limit, cost: float, now: object) -> object:
            self.calls.append("apply")
            return self.inner.apply(key, limit, cost, now)  # type: ignore[arg-type]

        def apply_many(self, *args: object) -> object:
            return self.inner.apply_many(*args)  # type: ignore[arg-type]

        def reset(self, key: str) -> None:
            self.inner.reset(key)

        async def aapply(self, key: str, limit: Limit, cost: float, now: object) -> object:
            self.calls.append("aapply")
            return self.inner.apply(key, limit, cost, now)  # type: ignore[arg-type]

    def test_memory_store_declares_every_optional_capability(self) -> None:
        from limiter.store import Nonblocking, SupportsAllow, Sweepable, is_nonblocking

        store = MemoryStore()
        assert isinstance(store, SupportsAllow) and isinstance(store, Sweepable)
        assert isinstance(store, Nonblocking) and is_nonblocking(store)
        assert not is_nonblocking(self.Minimal())

    def test_a_minimal_store_gets_the_plain_paths(self) -> None:
        store = self.Minimal()
        limiter = RateLimiter(1, 2, store=store, clock=ManualClock())  # type: ignore[arg-type]
        assert [limiter.allow("k") for _ in range(3)] == [True, True, False]
        assert store.calls == ["apply"] * 3
        assert not limiter.nonblocking
        assert asyncio.run(limiter.acheck("j")).allowed and store.calls[-1] == "aapply"
        with pytest.raises(TypeError, match="sweep"):
            limiter.start_cleanup(None, 1)

    @pytest.mark.parametrize("flag, direct", [(True, True), (1, False), ("yes", False)])
    def test_only_nonblocking_true_skips_the_await(self, flag: object, direct: bool) -> None:
        store = self.Minimal()
        store.nonblocking = flag  # type: ignore[attr-defined]
        limiter = RateLimiter(1, 2, store=store)  # type: ignore[arg-type]
        assert limiter.nonblocking is direct
        asyncio.run(limiter.acheck("k"))
        assert store.calls == ["apply" if direct else "aapply"]

    def test_allow_uses_the_stores_allow(self) -> None:
        store = self.Minimal()
        seen: List[str] = []

        def allow(key: str, limit: Limit, cost: float, now: object) -> bool:
            seen.append(key)
            return False

        store.allow = allow  # type: ignore[attr-defined]
        limiter = RateLimiter(1, 2, store=store, name="n")  # type: ignore[arg-type]
        assert limiter.allow("k") is False and seen == ["n:k"] and store.calls == []
        assert limiter.allow("x" * 300) is False and seen[-1].startswith("n:sha256:")


# -- a rate passed where a key goes (issue 12) ---------------------------------

RATE_KEYS = ["5/minute", "10 per second", "10/second;100/hour", "0/second", "1/d"]
NOT_RATES = [
    "user/42",
    "GET /items",
    "203.0.113.7",
    "2001:db8::1",
    "5/minute;",
    "10 persec",
    "12345",
    "",
    "ip:2001:db8::/64",
]


def _rate_key_message(key: str) -> str:
    return (
        f"key {key!r} looks like a rate: pass the rate to RateLimiter({key!r}) "
        "(or a framework integration's limit()) and use a client key here"
    )


@pytest.mark.parametrize("key", RATE_KEYS)
def test_a_rate_as_key_is_refused_by_every_non_hot_entry_point(key: str) -> None:
    limiter = RateLimiter("2/second", clock=ManualClock())
    calls = [
        lambda: limiter.peek(key),
        lambda: limiter.reset(key),
        lambda: limiter.acquire(key),
        lambda: limiter.storage_key(key),
        lambda: limiter.throttle(key),
        lambda: asyncio.run(limiter.apeek(key)),
        lambda: asyncio.run(limiter.areset(key)),
        lambda: asyncio.run(limiter.aacquire(key)),
    ]
    for call in calls:
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == _rate_key_message(key)


@pytest.mark.parametrize("key", [*RATE_KEYS, " 5/minute", "\xa05/minute"])
def test_check_allow_and_acheck_refuse_a_rate_as_key_on_every_path(key: str) -> None:
    for limiter in (
        RateLimiter("2/second", clock=ManualClock()),  # the hot path
        RateLimiter("2/second", store=MemoryStore(), clock=ManualClock()),  # with a prefix
        RateLimiter("2/second;10/minute", clock=ManualClock()),  # several limits
    ):
        for call in (limiter.check, limiter.allow):
            with pytest.raises(TypeError, match="looks like a rate"):
                call(key)
        with pytest.raises(TypeError, match="looks like a rate"):
            asyncio.run(limiter.acheck(key))
        assert limiter.peek("ip:203.0.113.7").remaining == 2  # nothing was charged


@pytest.mark.parametrize("key", NOT_RATES)
def test_keys_with_a_slash_or_spaces_that_are_no_rate_stay_valid(key: str) -> None:
    for limiter in (
        RateLimiter("1/second", clock=ManualClock()),
        RateLimiter("1/second;10/minute", clock=ManualClock()),
        RateLimiter("1/second", store=MemoryStore(), clock=ManualClock()),
    ):
        assert limiter.check(key).allowed and not limiter.allow(key)
        assert limiter.peek(key).remaining == 0
        limiter.reset(key)
        assert limiter.acquire(key, timeout=0).allowed
        assert limiter.storage_key(key).endswith(key)


def test_ratelimiter_has_no_limit_attribute() -> None:
    assert not hasattr(RateLimiter, "limit")
