"""Extreme limits and costs: memory, SQLite and Redis agree on everything accepted.

Issue 9, items 1 and 3.  A limit is accepted only where every float derived
from it is finite and normal (``limiter.core.bucket``'s docstring); on every such
limit, and on costs of any type and size, the three stores must give the same
result, field for field and bit for bit: the Lua script computes the same
doubles as ``limiter.core.bucket.step``, and no value ever becomes NaN, infinite
where it should not, or the ``-9223372036854775808`` Lua prints for a NaN
integer.
"""

from __future__ import annotations

import math
import sys
import uuid
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from limiter import Limit, MemoryStore, RateLimitResult
from limiter.backends.sqlite import SQLiteStore
from limiter.core.limits import CLOCK_TOLERANCE
from limiter.testing import T0

TINY = sys.float_info.min  # the smallest accepted rate
MAX_RATE = 4.49423283715579e304  # the largest accepted rate

RATES = st.one_of(
    st.sampled_from(
        [
            *(TINY, math.nextafter(TINY, 1), 1e-300, 1e-200, 1e-100, 1e-9, 1e-3, 1 / 3, 1.0),
            *(7.3, 1e3, 2500.0, 1e9, 1e100, 1e200, 1e300, 1e304, MAX_RATE),
        ]
    ),
    st.floats(TINY, MAX_RATE),
)
BURSTS = st.one_of(
    st.sampled_from([1, 2, 3, 10, 1000, 2**31, 2**50, 2**52, 2**53 - 1, 2**53]),
    st.integers(1, 2**53),
)
#: Where the clock goes: a fraction of the window (times from T0).
MOVES = st.one_of(
    st.sampled_from([0.0, 0.0, 1e-9, 1e-3, 0.25, 0.5, 1.0, 2.0, -0.5, -1.0, -2.0]),
    st.floats(-3, 3),
)
#: A cost, as a function of the burst: every type and size a client may send.
COST_KINDS = [
    "zero",
    "one",
    "burst",
    "burst-1",
    "burst+1",
    "just-above",
    "fraction",
    "decimal",
    "float",
    "int",
    "huge-int",
    "inf",
    "huge-decimal",
    "huge-fraction",
    "tiny",
    "tiny-decimal",
]


def cost_of(kind: str, x: float, burst: int) -> Any:
    return {
        "zero": 0,
        "one": 1,
        "burst": burst,
        "burst-1": burst - 1,
        "burst+1": burst + 1,
        "just-above": burst * (1 + 2**-40),
        "fraction": Fraction(max(1, int(x * burst)), 3),
        "decimal": Decimal(repr(x * burst)),
        "float": x * burst,
        "int": int(x * burst),
        "huge-int": 10**400,
        "inf": math.inf,
        "huge-decimal": Decimal("1e999"),
        "huge-fraction": Fraction(10**400, 7),
        "tiny": 5e-324,
        "tiny-decimal": Decimal("1e-400"),
    }[kind]


OPS = st.lists(
    st.tuples(MOVES, st.sampled_from(COST_KINDS), st.floats(0, 2)), min_size=1, max_size=25
)


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteStore]:
    # No purge: a purged full bucket is a full bucket, but these tests also move
    # the clock back past such buckets, where memory still holds them.
    store = SQLiteStore(tmp_path_factory.mktemp("extreme") / "limits.db", purge_every=10**9)
    yield store
    store.close()


@pytest.fixture(scope="module")
def redis_client() -> Iterator[Any]:
    pytest.importorskip(
        "redis", reason="redis-py is not installed: pip install 'tokenlimiter[redis]'"
    )
    from helpers.redis_servers import redis_server

    for server in redis_server():  # skips with the reason when there is no redis-server
        client = server.client()
        try:
            yield client
        finally:
            client.close()


class Stores:
    """The stores under test, driven in lockstep, with every answer compared."""

    def __init__(self, sqlite: SQLiteStore, redis_client: Optional[Any]) -> None:
        self.stores: List[Any] = [MemoryStore(), sqlite]
        self.client = redis_client
        self.uid = uuid.uuid4().hex  # keys of their own: the SQLite file is shared
        self.prefix = f"x:{self.uid}:"
        if redis_client is not None:
            from limiter.backends.redis import RedisStore

            self.stores.append(RedisStore(redis_client, prefix=self.prefix))

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Any, now: float
    ) -> RateLimitResult:
        if len(keys) == 1:
            results = [store.apply(keys[0], limits[0], cost, now) for store in self.stores]
        else:
            results = [store.apply_many(keys, limits, cost, now) for store in self.stores]
        first = results[0]
        for other in results[1:]:
            assert other == first  # every field, floats bit for bit, and each of .results
        for result in (first, *first.results):
            assert 0 <= result.remaining <= result.limit  # never -9223372036854775808
            assert 0.0 <= result.reset_after < math.inf
            assert result.retry_after >= 0.0 and not math.isnan(result.retry_after)
            assert (result.retry_after == math.inf) == (
                not result.allowed and cost_above(cost, result.limit)
            )
        self._freeze(keys)
        return first

    def _freeze(self, keys: Sequence[str]) -> None:
        # Redis expires a key when its bucket is full again in real time, which
        # this test's clock ignores: make keys persistent at once.  A key that
        # expired first (a write of under a millisecond of debt) is a full
        # bucket: forget it in the other stores too, as Redis did.
        if self.client is None:
            return
        from limiter.backends.redis import redis_key

        for key in keys:
            rkey = redis_key(key, self.prefix)
            pipe = self.client.pipeline()
            pipe.exists(rkey)
            pipe.persist(rkey)
            exists, _ = pipe.execute()
            if not exists:
                for store in self.stores[:2]:
                    store.reset(key)


def cost_above(cost: Any, burst: int) -> bool:
    try:
        return bool(cost > burst)
    except TypeError:  # pragma: no cover - every cost here compares
        return False


def make_limit(rate: float, burst: int) -> Limit:
    try:
        return Limit(rate, burst)
    except ValueError:
        assume(False)  # burst / rate beyond 2**1022 seconds: rejected, nothing to compare
        raise


def run_ops(stores: Stores, limits: List[Limit], ops: List[Tuple[float, str, float]]) -> None:
    keys = [f"{{{stores.uid}}}:{i}" for i in range(len(limits))]
    window = max(limit.window for limit in limits)
    burst = min(limit.burst for limit in limits)
    where = 0.0
    for move, kind, x in ops:
        where = min(3.0, max(-3.0, where + move))
        now = T0 + where * window  # finite: window <= 2**1022 seconds
        stores.apply_many(keys, limits, cost_of(kind, x, burst), now)


SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(rate=RATES, burst=BURSTS, ops=OPS)
def test_memory_and_sqlite_agree_on_extreme_limits(
    sqlite_store: SQLiteStore, rate: float, burst: int, ops: Any
) -> None:
    run_ops(Stores(sqlite_store, None), [make_limit(rate, burst)], ops)


@SETTINGS
@given(rate=RATES, burst=BURSTS, ops=OPS)
def test_memory_sqlite_and_redis_agree_on_extreme_limits(
    sqlite_store: SQLiteStore, redis_client: Any, rate: float, burst: int, ops: Any
) -> None:
    run_ops(Stores(sqlite_store, redis_client), [make_limit(rate, burst)], ops)


@SETTINGS
@given(limits=st.lists(st.tuples(RATES, BURSTS), min_size=2, max_size=3), ops=OPS)
def test_memory_sqlite_and_redis_agree_on_several_extreme_limits(
    sqlite_store: SQLiteStore, redis_client: Any, limits: Any, ops: Any
) -> None:
    run_ops(Stores(sqlite_store, redis_client), [make_limit(r, b) for r, b in limits], ops)


# -- the examples of issue 9, on every store ----------------------------------------


def test_a_client_chosen_cost_never_raises_and_is_denied_above_burst(
    sqlite_store: SQLiteStore, redis_client: Any
) -> None:
    # X-Items: 999...9 (400 digits) raised OverflowError, and the middleware let
    # the request in.  Now: denied, retry_after = inf, nothing taken.
    stores = Stores(sqlite_store, redis_client)
    limit = Limit(10, 20)
    for cost in (int("9" * 400), 10**5000, math.inf, Decimal("1e999"), Fraction(10**400, 3)):
        result = stores.apply_many([stores.uid], [limit], cost, T0)
        assert (result.allowed, result.remaining, result.retry_after) == (False, 20, math.inf)
    assert stores.apply_many([stores.uid], [limit], Decimal(20), T0).allowed
    assert not stores.apply_many([stores.uid], [limit], 1, T0).allowed


def test_burst_near_2_53_keeps_remaining_in_range_on_every_store(
    sqlite_store: SQLiteStore, redis_client: Any
) -> None:
    # Redis formats remaining as %d below 2**53 and %.17g at 2**53; a NaN once
    # printed -9223372036854775808.  Every store agrees (Stores.apply_many).
    stores = Stores(sqlite_store, redis_client)
    for rate, slop in ((1.0, 0), (0.5, 0), (2.0**20, 0), (3.0, 2), (1e9, 2)):
        # A power-of-2 rate keeps seconds exact; other rates round a float
        # second near 2**53 tokens by a token or two (limiter.core.bucket's docstring).
        limit = Limit(rate, 2**53)
        key = f"big:{rate}:{stores.uid}"
        assert stores.apply_many([key], [limit], 0, T0).remaining == 2**53
        result = stores.apply_many([key], [limit], 1, T0)
        assert abs(result.remaining - (2**53 - 1)) <= slop
        # Not on the same key: at 2**20/s that token's debt is under a
        # millisecond, and Redis may expire it (a full bucket) before the next
        # call; a debt of 2**52 tokens is kept.
        key = f"big2:{rate}:{stores.uid}"
        result = stores.apply_many([key], [limit], 2**52, T0)
        assert abs(result.remaining - 2**52) <= slop
        result = stores.apply_many([key], [limit], 1, T0)
        assert abs(result.remaining - (2**52 - 1)) <= slop
        assert not stores.apply_many([key], [limit], 2**53, T0).allowed
        assert stores.apply_many([key], [limit], 0, T0 + 2 * limit.window).remaining == 2**53
        # float(2**53 + 1) == 2**53, yet the cost is above the burst.
        result = stores.apply_many([key], [limit], 2**53 + 1, T0 + 2 * limit.window)
        assert (result.allowed, result.retry_after) == (False, math.inf)
    # A denial once showed burst + 1 tokens left (window * rate rounded up).
    limit = Limit(1e-200, 2**53 - 1)
    result = stores.apply_many([f"odd:{stores.uid}"], [limit], 2**53, T0)
    assert (result.allowed, result.remaining) == (False, 2**53 - 1)


# -- late readings: CLOCK_TOLERANCE on every store ----------------------------------

#: Seconds a reading lags the one before it: late by up to ``CLOCK_TOLERANCE``
#: (applied at the last update), exactly that late, or later still (a clock
#: stepped back: re-anchored).
LATE = st.sampled_from(
    [
        *(0.0, 0.0, -1e-9, -0.001, -0.5, -CLOCK_TOLERANCE),
        *(-math.nextafter(CLOCK_TOLERANCE, 2), -CLOCK_TOLERANCE - 0.001, -2.0, -3600.0),
    ]
)
LATE_OPS = st.lists(
    st.tuples(MOVES, LATE, st.sampled_from(COST_KINDS), st.floats(0, 2)), min_size=1, max_size=25
)


def run_late_ops(
    stores: Stores, limits: List[Limit], ops: List[Tuple[float, float, str, float]]
) -> None:
    keys = [f"{{{stores.uid}}}:{i}" for i in range(len(limits))]
    window = max(limit.window for limit in limits)
    burst = min(limit.burst for limit in limits)
    where = 0.0
    for move, late, kind, x in ops:
        where = min(3.0, max(-3.0, where + move))
        base = T0 + where * window  # a late of -CLOCK_TOLERANCE after 0.0 is exactly at it
        stores.apply_many(keys, limits, cost_of(kind, x, burst), base + late)


@SETTINGS
@given(limits=st.lists(st.tuples(RATES, BURSTS), min_size=1, max_size=3), ops=LATE_OPS)
def test_memory_sqlite_and_redis_agree_on_late_readings(
    sqlite_store: SQLiteStore, redis_client: Any, limits: Any, ops: Any
) -> None:
    run_late_ops(Stores(sqlite_store, redis_client), [make_limit(r, b) for r, b in limits], ops)


def interleaved_readings(stores: Stores) -> None:
    """Two threads read the clock in turn and take the store's lock in reverse order.

    Each round thread A reads the clock, then thread B (100 to 400 ms later,
    well within ``CLOCK_TOLERANCE``); B's requests take effect first, then A's.
    Each sends 4 requests: more than a round refills, so the bucket is always
    drained and every store must admit exactly the burst plus the rate times
    the time from the first reading applied to the last.  Before the tolerance,
    A's readings re-anchored the bucket and that time refilled twice.
    """
    limit = Limit(10, 10)  # a token every 100 ms; drained, a key lives about 1 s in Redis
    key = f"{{{stores.uid}}}:interleaved"
    admitted = 0
    applied = []  # readings (in tenths of a second) in the order they took effect
    for k in range(60):
        a = 5 * k
        b = a + 1 + k % 4
        for tenths in (b, a):
            applied.append(tenths)
            for _ in range(4):
                admitted += stores.apply_many([key], [limit], 1, T0 + tenths / 10).allowed
    assert admitted == 10 + (max(applied) - applied[0])


def test_interleaved_readings_admit_exactly_the_rate_in_memory_and_sqlite(
    sqlite_store: SQLiteStore,
) -> None:
    interleaved_readings(Stores(sqlite_store, None))


def test_interleaved_readings_admit_exactly_the_rate_on_every_store(
    sqlite_store: SQLiteStore, redis_client: Any
) -> None:
    interleaved_readings(Stores(sqlite_store, redis_client))


# -- seconds arguments: one check (clock.finite_seconds), TypeError or ValueError --


def _seconds_entry_points() -> Dict[str, Callable[[object], object]]:
    from limiter import ManualClock, MemoryStore, RateLimiter
    from limiter.backends.denycache import DenyCache
    from limiter.backends.sqlite import SQLiteStore
    from limiter.http.headers import rate_limit_headers

    return {
        "start": lambda v: ManualClock(v),
        "seconds": lambda v: ManualClock(0.0).advance(v),  # type: ignore[arg-type]
        "t": lambda v: ManualClock(0.0).set(v),  # type: ignore[arg-type]
        "max_stale": lambda v: DenyCache(MemoryStore(), max_stale=v),  # type: ignore[arg-type]
        "timeout": lambda v: SQLiteStore(":memory:", timeout=v),  # type: ignore[arg-type]
        "interval": lambda v: RateLimiter(1).start_cleanup(None, v),  # type: ignore[arg-type]
        "now": lambda v: rate_limit_headers(RateLimiter(1).check("k"), now=v),  # type: ignore[arg-type]
    }


_BAD_SECONDS = [
    (10**400, ValueError),
    (-(10**400), ValueError),
    (float("nan"), ValueError),
    (float("inf"), ValueError),
    (Decimal("sNaN"), TypeError),
    (Decimal("1e400"), TypeError),
    (True, TypeError),
    ("5", TypeError),
]


@pytest.mark.parametrize("name", sorted(_seconds_entry_points()))
@pytest.mark.parametrize(("value", "error"), _BAD_SECONDS, ids=repr)
def test_a_bad_seconds_argument_is_a_type_or_value_error_naming_it(
    name: str, value: object, error: type
):
    with pytest.raises(error) as info:
        _seconds_entry_points()[name](value)
    message = str(info.value)
    assert message.startswith(f"{name} must be ") and len(message) < 250


def test_a_cleanup_interval_past_threading_timeout_max_is_refused():
    import threading

    from limiter import RateLimiter

    limiter = RateLimiter(1)
    with pytest.raises(
        ValueError, match=r"interval must be .*TIMEOUT_MAX.*got 18446744073709551616"
    ):
        limiter.start_cleanup(None, 2**64)
    limiter.start_cleanup(None, threading.TIMEOUT_MAX)()  # the largest accepted; stop() joins
