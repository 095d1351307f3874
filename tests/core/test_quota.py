"""Calendar quotas (``limiter.Quota``): windows at calendar boundaries in a time zone.

Midnight in UTC and Europe/Paris, the 23- and 25-hour days of a daylight-saving
change, month ends (a leap February), ISO weeks, atomicity beside a token
bucket, every store (memory, SQLite, a throwaway Redis), threads, and the Lua
script checked against ``Quota.step`` on random sequences.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.redis_state import check_stored
from limiter import Limit, ManualClock, MemoryStore, Quota, RateLimiter, SQLiteStore
from limiter.core.bucket import step
from limiter.core.costs import Charge, Refund
from limiter.core.limits import CLOCK_TOLERANCE, TIME_EPSILON
from limiter.core.many import step_all
from limiter.core.state import keep_until
from limiter.http.headers import rate_limit_headers

PARIS = timezone(timedelta(hours=1))  # Europe/Paris in winter (CET)
PARIS_SUMMER = timezone(timedelta(hours=2))  # CEST


def ts(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, tz: Any = timezone.utc
) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=tz).timestamp()


def drain(limiter: RateLimiter, key: str = "k") -> int:
    """How many cost-1 checks pass before the first denial (at most 1000)."""
    for n in range(1000):
        if not limiter.check(key).allowed:
            return n
    return 1000


# -- windows ------------------------------------------------------------------


def test_day_quota_resets_at_midnight_utc() -> None:
    clock = ManualClock(ts(2024, 5, 10, 22, 0))
    limiter = RateLimiter(Quota(3, per="day"), clock=clock)
    assert drain(limiter) == 3
    denied = limiter.check("k")
    assert (denied.allowed, denied.remaining, denied.limit) == (False, 0, 3)
    assert denied.retry_after == 2 * 3600  # exactly to midnight UTC
    assert denied.reset_after == 2 * 3600
    assert denied.window == 86400
    clock.advance(2 * 3600 - 1)
    assert not limiter.check("k").allowed  # one second before midnight
    clock.advance(1)
    assert drain(limiter) == 3  # midnight: a fresh day


def test_day_quota_resets_at_midnight_in_paris() -> None:
    clock = ManualClock(ts(2024, 1, 15, 20, 0))  # 21:00 in Paris
    limiter = RateLimiter(Quota(5, per="day", tz="Europe/Paris"), clock=clock)
    assert drain(limiter) == 5
    assert limiter.check("k").retry_after == 3 * 3600  # to 00:00 Paris = 23:00 UTC
    clock.advance(3 * 3600 - 0.5)
    assert not limiter.check("k").allowed
    clock.advance(0.5)
    assert drain(limiter) == 5
    # A UTC quota on the same instants is still in its old day.
    assert Quota(5, per="day").bounds(ts(2024, 1, 15, 23, 0))[1] == ts(2024, 1, 16)


def test_waiting_exactly_retry_after_gets_in() -> None:
    clock = ManualClock(ts(2024, 1, 15, 20, 0) + 0.123456789)
    limiter = RateLimiter(Quota(1, per="hour", tz="Europe/Paris"), clock=clock)
    assert limiter.check("k").allowed
    denied = limiter.check("k")
    clock.advance(denied.retry_after)
    assert limiter.check("k").allowed


@pytest.mark.parametrize(
    ("midnight", "hours"),
    [
        (ts(2024, 3, 31, tz=PARIS), 23),  # clocks go forward at 02:00
        (ts(2024, 10, 27, tz=PARIS_SUMMER), 25),  # clocks go back at 03:00
    ],
)
def test_daylight_saving_days_last_23_and_25_hours(midnight: float, hours: int) -> None:
    clock = ManualClock(midnight)
    limiter = RateLimiter(Quota(2, per="day", tz="Europe/Paris"), clock=clock)
    assert drain(limiter) == 2
    denied = limiter.check("k")
    assert denied.retry_after == hours * 3600
    assert denied.window == hours * 3600
    clock.advance(hours * 3600 - 1)
    assert not limiter.check("k").allowed
    clock.advance(1)
    assert drain(limiter) == 2


def test_month_end_and_leap_february() -> None:
    clock = ManualClock(ts(2024, 1, 31, 23, 0))
    limiter = RateLimiter(Quota(2, per="month"), clock=clock)
    assert drain(limiter) == 2
    assert limiter.check("k").retry_after == 3600
    clock.advance(3600)  # Feb 1st, 2024: a leap year
    assert drain(limiter) == 2
    denied = limiter.check("k")
    assert denied.retry_after == denied.window == 29 * 86400
    clock.advance(29 * 86400)  # March 1st
    assert drain(limiter) == 2
    assert limiter.check("k").window == 31 * 86400
    assert Quota(1, per="month").bounds(ts(2023, 2, 10)) == (ts(2023, 2, 1), ts(2023, 3, 1))
    assert Quota(1, per="month").bounds(ts(2023, 12, 31, 23)) == (ts(2023, 12, 1), ts(2024, 1, 1))


def test_week_starts_monday_midnight() -> None:
    sunday = ts(2024, 6, 9, 23, 30, tz=PARIS_SUMMER)  # Sunday 23:30 in Paris
    clock = ManualClock(sunday)
    limiter = RateLimiter(Quota(1, per="week", tz="Europe/Paris"), clock=clock)
    assert limiter.check("k").allowed
    denied = limiter.check("k")
    assert denied.retry_after == 1800
    assert denied.window == 7 * 86400
    clock.advance(1800)  # Monday 00:00
    assert limiter.check("k").allowed
    assert limiter.check("k").retry_after == 7 * 86400


def test_hour_quota_and_half_hour_zone() -> None:
    # India is UTC+05:30: its hours start at half past UTC hours.
    q = Quota(1, per="hour", tz="Asia/Kolkata")
    assert q.bounds(ts(2024, 1, 1, 10, 45)) == (ts(2024, 1, 1, 10, 30), ts(2024, 1, 1, 11, 30))


# -- cost rules ---------------------------------------------------------------


def test_peek_refund_and_cost_above_count() -> None:
    clock = ManualClock(ts(2024, 5, 10, 12))
    limiter = RateLimiter(Quota(10, per="day"), clock=clock)
    assert limiter.check("k", 0).remaining == 10  # a peek takes nothing
    assert limiter.check("k", 7).remaining == 3
    big = limiter.check("k", 11)
    assert (big.allowed, big.retry_after, big.remaining) == (False, math.inf, 3)
    assert not limiter.check("k", 4).allowed
    assert limiter.check("k", 4).retry_after == 12 * 3600
    limiter.refund("k", 2)
    assert limiter.check("k", 0).remaining == 5
    limiter.refund("k", 100)  # gives back at most what was used
    assert limiter.check("k", 0).remaining == 10
    assert limiter.check("k", 2.5).remaining == 7


def test_a_refund_on_a_fresh_window_stores_nothing() -> None:
    q = Quota(3, per="day")
    state, result = q.step(None, ts(2024, 1, 1), Refund(2))
    assert state is None and result.allowed and result.remaining == 3


def test_clock_stepped_back_keeps_what_was_used() -> None:
    q = Quota(3, per="day")
    state = None
    for _ in range(3):
        state, _ = step(state, ts(2024, 1, 2, 12), q)
    # Back into the previous day: the used units move with it, nothing is granted.
    state, result = step(state, ts(2024, 1, 1, 12), q)
    assert not result.allowed and result.retry_after == 12 * 3600
    assert state is not None and state.imag == ts(2024, 1, 2)
    # A reading just before midnight applied after one from the next day counts there.
    late = step(complex(3 * 2.0**-600, ts(2024, 1, 3)), ts(2024, 1, 2) - 0.2, q)[1]
    assert not late.allowed and late.retry_after == pytest.approx(86400.2)
    assert CLOCK_TOLERANCE == 1.0


def test_state_expires_at_the_window_end() -> None:
    q = Quota(5, per="day", tz="Europe/Paris")
    state, _ = step(None, ts(2024, 3, 31, 5), q, 3)
    assert state is not None
    assert keep_until(state) == ts(2024, 4, 1, tz=PARIS_SUMMER)  # what every store expires by
    store = MemoryStore()
    store.apply("k", q, 1, ts(2024, 3, 31, 5))
    assert store.sweep(ts(2024, 3, 31, 21, 59)) == 0
    assert store.sweep(ts(2024, 3, 31, 22, 0)) == 1  # midnight in Paris


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((0,), ValueError),
        ((-5,), ValueError),
        ((2**53 + 1,), ValueError),
        ((1.5,), TypeError),
        (("10",), TypeError),
        ((True,), TypeError),
        ((10, "fortnight"), ValueError),
        ((10, "day", "Mars/Olympus"), ValueError),
        ((10, "day", "../etc"), ValueError),
        ((10, "day", 3), TypeError),
        ((10, "day", "UTC", 'bad"name'), ValueError),
    ],
)
def test_bad_input_names_the_value(args: Any, error: type) -> None:
    with pytest.raises(error, match=repr(args[-1]).strip("'") if args[-1] != "../etc" else "etc"):
        Quota(*args)


def test_equality_repr_and_names() -> None:
    assert Quota(10, per="month") == Quota(10, per="month", name="other")
    assert Quota(10, per="month") != Quota(10, per="month", tz="Europe/Paris")
    assert Quota(10, per="day") != Limit(10 / 86400, 10)
    assert len({Quota(1), Quota(1), Quota(2)}) == 2
    assert repr(Quota(10)) == "Quota(10, per='day', tz='UTC', name='10/day')"
    assert Quota(10, tz="Europe/Paris").name == "10/day Europe/Paris"
    with pytest.raises(AttributeError):
        Quota(10).count = 3  # type: ignore[misc]
    limiter = RateLimiter([Quota(5), Quota(5, tz="Europe/Paris", name="5/day")])
    assert [lim.name for lim in limiter.limits] == ["5/day#0", "5/day#1"]
    assert all(isinstance(lim, Quota) for lim in limiter.limits)


# -- beside a token bucket: atomic ---------------------------------------------


def test_quota_and_token_bucket_are_atomic() -> None:
    clock = ManualClock(ts(2024, 5, 10, 12))
    limiter = RateLimiter(["2/second", Quota(5, per="day")], clock=clock)
    assert [limiter.check("k").allowed for _ in range(3)] == [True, True, False]
    # The token bucket's denial took nothing from the quota: 3 left.
    peek = limiter.check("k", 0)
    assert [r.remaining for r in peek.results] == [0, 3]
    clock.advance(10)
    assert [limiter.check("k").allowed for _ in range(3)] == [True, True, False]
    clock.advance(10)
    result = limiter.check("k")
    assert result.allowed and result.results[1].remaining == 0
    clock.advance(10)
    denied = limiter.check("k")
    # The quota's denial took nothing from the token bucket (full: 2 tokens).
    assert not denied.allowed and denied.retry_after == 12 * 3600 - 30
    assert denied.policy == "5/day"
    assert [r.remaining for r in denied.results] == [2, 0]


def test_draft_headers_show_the_quota_policy() -> None:
    clock = ManualClock(ts(2024, 2, 10))
    limiter = RateLimiter(["10/second", Quota(1000, per="month", name="monthly")], clock=clock)
    result = limiter.check("k")
    headers = dict(rate_limit_headers(result, now=clock.now(), style="draft"))
    assert headers["RateLimit-Policy"] == '"10/second";q=10;w=1, "monthly";q=1000;w=2505600'


# -- stores ---------------------------------------------------------------------


def run_scenario(store: Any) -> None:
    """Exact counts across midnight in Paris and beside a token bucket, on ``store``."""
    clock = ManualClock(ts(2024, 10, 26, 23, 0, tz=PARIS_SUMMER))
    limiter = RateLimiter(Quota(4, per="day", tz="Europe/Paris"), store=store, clock=clock)
    assert drain(limiter) == 4
    assert limiter.check("k").retry_after == 3600
    clock.advance(3600)  # the 25-hour day
    assert drain(limiter) == 4
    assert limiter.check("k").retry_after == 25 * 3600
    both = RateLimiter(["1/second", Quota(3, per="day")], store=store, clock=clock, name="both")
    got = []
    for _ in range(6):
        got.append(both.check("u").allowed)
        got.append(both.check("u").allowed)
        clock.advance(1)
    assert got == [True, False, True, False, True, False] + [False] * 6


def test_memory_store() -> None:
    run_scenario(MemoryStore())


def test_sqlite_store(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "q.db"))
    try:
        run_scenario(store)
        q = Quota(5, per="day")
        store.apply("e", q, 1, ts(2024, 1, 1, 12))
        with contextlib.closing(sqlite3.connect(tmp_path / "q.db")) as conn:  # what is on disk
            (full,) = conn.execute("SELECT MAX(full_at) FROM limiter_buckets").fetchone()
            assert full <= ts(2024, 10, 28)
            rows = conn.execute("SELECT full_at FROM limiter_buckets").fetchall()
        assert ts(2024, 1, 2) in [row[0] for row in rows]  # expires at the window end
    finally:
        store.close()


def admitted_by_threads(limiter: RateLimiter, threads: int, checks: int) -> int:
    """How many of ``checks`` checks of key "k" in each of ``threads`` threads at once pass."""
    admitted: List[int] = []

    def hammer() -> None:
        admitted.append(sum(limiter.check("k").allowed for _ in range(checks)))

    running = [threading.Thread(target=hammer) for _ in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    return sum(admitted)


def test_threads_admit_exactly_count(tmp_path: Path) -> None:
    for store in (MemoryStore(), SQLiteStore(str(tmp_path / "t.db"))):
        clock = ManualClock(ts(2024, 5, 10, 12))
        limiter = RateLimiter(Quota(300, per="month"), store=store, clock=clock)
        assert admitted_by_threads(limiter, threads=8, checks=100) == 300
        if isinstance(store, SQLiteStore):
            store.close()


# -- Redis ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(server: Any) -> Iterator[Any]:
    c = server.client()
    yield c
    c.close()


@pytest.mark.redis
def test_redis_store(client: Any) -> None:
    from helpers.redis_servers import unique_prefix
    from limiter.backends._wire import ttl_ms
    from limiter.backends.redis import RedisStore, redis_key

    store = RedisStore(client, prefix=unique_prefix())
    run_scenario(store)
    now = time.time()
    q = Quota(5, per="hour")
    store.apply("ttl", q, 1, None)  # the client's clock (see _wire.Argv._uncached)
    pttl = client.pttl(redis_key("ttl", store.prefix))
    end = q.bounds(now)[1]
    assert 0 < pttl <= ttl_ms(end - now)
    assert store.apply("ttl", q, 0, None).remaining == 4


@pytest.mark.redis
def test_redis_threads_admit_exactly_count(client: Any) -> None:
    from helpers.redis_servers import unique_prefix
    from limiter.backends.redis import RedisStore

    clock = ManualClock(ts(2024, 5, 10, 12))
    store = RedisStore(client, prefix=unique_prefix())
    limiter = RateLimiter(["1000/second", Quota(150, per="day")], store=store, clock=clock)
    assert admitted_by_threads(limiter, threads=6, checks=50) == 150


QUOTAS = st.sampled_from(
    [
        Quota(3, per="hour"),
        Quota(5, per="day", tz="Europe/Paris"),
        Quota(2, per="week", tz="America/New_York"),
        Quota(7, per="month"),
    ]
)
QCOSTS = st.one_of(
    st.sampled_from([0, 1, 1, 1, 2, 0.5, 8, 1e9, math.inf]),
    st.floats(0, 8, allow_nan=False),
    st.sampled_from([1, 2.5, 100]).map(Refund),
    # Refunds tied to a moment (resolved in the test, see taken_refund): before
    # now, or about the current window's start (its units forgiven, or not).
    st.tuples(
        st.sampled_from([1, 2.5, 100]),
        st.sampled_from(["now", "start"]),
        st.sampled_from([0.0, 1e-7, -1e-7, -1e-6, -2e-6, -0.5, -3600.0, -86400.0, 1.0]),
    ),
    # Charges: taken unconditionally, at most 2 * count (2**54 stands for any
    # charge above it, beyond 2 * count all the same).
    st.sampled_from([0, 1, 2.5, 6, 8, 13.5, 100, math.inf, 2**60]).map(Charge),
)
# Steps in seconds: small, across hours and days, and backwards (late readings
# and clocks stepped back).
QSTEPS = st.one_of(
    st.sampled_from([0.0, 1e-7, 0.5, 1.0, 3600.0, 86400.0, -0.5, -1.5, -86400.0]),
    st.floats(-7200, 40 * 86400, allow_nan=False),
    # Seconds before the start of the stored state's window: a late reading
    # (within CLOCK_TOLERANCE) or a clock stepped back (beyond it).
    st.sampled_from([1e-7, 0.5, 1.0, math.nextafter(1.0, 2.0), 1.5, 3600.0]).map(
        lambda s: ("behind", s)
    ),
)
# Starts just before boundaries: the end of a DST day in Paris, a month end.
QSTARTS = st.sampled_from(
    [ts(2024, 3, 30, 23, 59, tz=PARIS), ts(2024, 1, 31, 23, 59), ts(2024, 11, 3, 5, 59)]
)


def taken_refund(cost: Any, now: float, quota: Quota) -> Any:
    """A QCOSTS ``(tokens, "now" | "start", seconds)``: a Refund taken that long after it."""
    if not isinstance(cost, tuple):
        return cost
    tokens, base, offset = cost
    moment = now if base == "now" else quota.bounds(now + TIME_EPSILON)[0]
    return Refund(tokens, moment + offset)


@pytest.mark.redis
@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    quota=QUOTAS,
    start=QSTARTS,
    ops=st.lists(st.tuples(QSTEPS, QCOSTS, st.none() | QCOSTS), min_size=1, max_size=30),
    bucket=st.booleans(),
)
def test_script_matches_step_quota(
    client: Any, quota: Quota, start: float, ops: Any, bucket: bool
) -> None:
    """The Lua script and ``step``/``step_all`` agree on every field and the stored state."""
    from helpers.redis_servers import unique_prefix
    from limiter.backends.redis import RedisStore, redis_key

    store = RedisStore(client, prefix=unique_prefix())
    limits: List[Limit] = [Limit(2.0, 3), quota] if bucket else [quota]
    keys = [f"{{u}}:{i}" for i in range(len(limits))]
    rkeys = [redis_key(k, store.prefix) for k in keys]
    states: List[Optional[complex]] = [None] * len(limits)
    now = start
    for dt, cost, quota_cost in ops:
        if not isinstance(dt, tuple):
            now += dt
        elif states[-1] is not None:
            now = quota.bounds(states[-1].imag - 1)[0] - dt[1]
        cost, quota_cost = taken_refund(cost, now, quota), taken_refund(quota_cost, now, quota)
        if bucket and quota_cost is not None:
            cost = (cost, quota_cost)  # one cost per limit
        since = time.monotonic()
        if bucket:
            states, expected = step_all(states, now, limits, cost)
            got = store.apply_many(keys, limits, cost, now)
            pairs = [*zip(got.results, expected.results), (got, expected)]
        else:
            states[0], expected = step(states[0], now, quota, cost)
            got = store.apply(keys[0], quota, cost, now)
            pairs = [(got, expected)]
        for g, e in pairs:
            assert g == e  # every field, bit for bit (window, policy, results too)
        if bucket:
            # The bucket's PX runs in real time: a debt of a millisecond may be
            # gone before the next step on a busy machine (as Redis would).
            states[0] = check_stored(client, rkeys[0], states[0], since)
        raw = client.get(rkeys[-1])
        state = states[-1]
        if raw is None:
            assert state is None or keep_until(state) <= now + 1e-6 or state.real == 0
        else:
            debt, end = raw.split()
            assert complex(float(debt), float(end)) == state
        client.persist(rkeys[-1])  # TTLs run in real time, this clock does not
    client.delete(*rkeys)


# -- review: boundaries, key reuse across a deploy, DenyCache, burst=, headers --

ODD_HOUR_CHANGES = [
    # (zone, a moment a few hours before a change of a non-whole hour)
    ("Australia/Lord_Howe", (2024, 4, 6, 22)),  # 02:00 +11 -> 01:30 +10:30 (fold of 30 min)
    ("Australia/Lord_Howe", (2024, 10, 5, 22)),  # 02:00 +10:30 -> 02:30 +11 (gap of 30 min)
    ("America/Caracas", (2007, 12, 8, 22)),  # -04:00 -> -04:30
    ("Asia/Pyongyang", (2015, 8, 14, 20)),  # +09:00 -> +08:30
    ("Pacific/Norfolk", (2015, 10, 3, 22)),  # +11:30 -> +11:00
]


@pytest.mark.parametrize("zone, local", ODD_HOUR_CHANGES)
def test_hour_windows_hold_now_and_tile_across_odd_offset_changes(zone: str, local: Any) -> None:
    from zoneinfo import ZoneInfo

    tz = ZoneInfo(zone)
    q = Quota(3, per="hour", tz=zone)
    first = datetime(*local, tzinfo=tz).timestamp()
    windows = set()
    for t in range(int(first), int(first) + 8 * 3600, 60):
        start, end = q.bounds(float(t))
        assert start <= t < end, (zone, datetime.fromtimestamp(t, tz))
        windows.add((start, end))
    ordered = sorted(windows)
    for (_, end), (start, _) in zip(ordered, ordered[1:]):
        assert end == start  # no overlap, no hole
    for start, end in ordered:
        assert 1800 <= end - start <= 5400
        # every window starts where the wall clock reads (or jumps over) a whole hour
        assert datetime.fromtimestamp(start, tz).minute in (0, 30)


def test_hour_quota_is_never_unlimited_after_a_half_hour_fold() -> None:
    # Lord Howe falls back 30 minutes: 02:00 +11 -> 01:30 +10:30.  The hour was
    # [01:00 +11, 01:30 +10:30), which ends at now: every state then stored
    # ended at or before now, and each check saw a fresh window.
    clock = ManualClock(
        datetime(2024, 4, 7, 1, 30, tzinfo=timezone(timedelta(hours=10.5))).timestamp()
    )
    limiter = RateLimiter(Quota(3, per="hour", tz="Australia/Lord_Howe"), clock=clock)
    assert drain(limiter) == 3
    clock.advance(600)
    assert drain(limiter) == 0
    # That hour, 01:00 +11 to 02:00 +10:30, lasts 90 minutes.
    assert limiter.check("k").window == 5400.0
    clock.advance(1200)  # 02:00 +10:30
    assert drain(limiter) == 3


def test_rate_limiter_burst_cannot_turn_a_quota_into_a_bucket() -> None:
    q = Quota(10, per="day")
    assert RateLimiter(q, burst=10).limits == (q,)
    with pytest.raises(ValueError, match="burst=5 does not apply"):
        RateLimiter(q, burst=5)  # was silently Limit(10/86400 per second, burst 5)
    with pytest.raises(ValueError, match="does not apply"):
        Limit.coerce(q, 5)


T0 = ts(2025, 3, 10, 12)


def test_bucket_state_read_as_a_quota_after_a_deploy() -> None:
    # A key's limit changed from a Limit to a Quota: the bucket's state is read
    # as a quota's.  Its updated_at lies at or before now: a fresh window.
    bucket = Limit(1, 100)
    state: Any = None
    for _ in range(100):
        state, _ = step(state, T0, bucket, 1)
    q = Quota(5, per="day")
    new, result = step(state, T0 + 1, q, 1)
    assert result.allowed and result.remaining == 4
    assert new is not None and keep_until(new) == q.bounds(T0 + 1)[1]
    # A bucket written by a clock up to CLOCK_TOLERANCE ahead (its updated_at
    # lies ahead): refused only until that updated_at, never longer.
    ahead = complex(50.0, T0 + CLOCK_TOLERANCE)
    new, result = step(ahead, T0, q, 1)
    assert not result.allowed and result.retry_after <= CLOCK_TOLERANCE
    assert step(ahead, T0 + CLOCK_TOLERANCE, q, 1)[1].allowed


def test_quota_state_read_as_a_bucket_after_a_deploy() -> None:
    # The reverse: a quota's state (used * 2**-600, window end) read by a Limit
    # is a clock stepped back (its end lies ahead): a full bucket, no more.
    q = Quota(5, per="day")
    state: Any = None
    for _ in range(5):
        state, _ = step(state, T0, q, 1)
    bucket = Limit(1, 3)
    admitted = 0
    for _ in range(10):
        state, result = step(state, T0 + 1, bucket, 1)
        admitted += result.allowed
    assert admitted == 3
    assert state is not None and keep_until(state) <= T0 + 1 + bucket.window


def test_deny_cache_does_not_replay_quota_fields_from_a_bucket_debt() -> None:
    # A quota's reset_after is no debt: replayed through step, a quota beside a
    # denying bucket came back as a fresh window (remaining 5 where the store
    # says 4); with now=None it was even judged on time.monotonic().
    from limiter import DenyCache

    store = MemoryStore()
    cache = DenyCache(store, max_stale=None)
    limits = [Limit(1, 1), Quota(5, per="day")]
    keys = ["a", "b"]
    assert cache.apply_many(keys, limits, 1, T0).allowed
    denied = cache.apply_many(keys, limits, 1, T0 + 0.1)
    assert not denied.allowed and denied.results[1].remaining == 4
    again = cache.apply_many(keys, limits, 1, T0 + 0.2)
    assert again.results[1].remaining == 4
    assert again == store.apply_many(keys, limits, 1, T0 + 0.2)
    alone = DenyCache(MemoryStore(), max_stale=None)
    q = Quota(1, per="day")
    assert alone.apply("k", q, 1, T0).allowed
    assert not alone.apply("k", q, 1, T0 + 1).allowed
    assert len(alone) == 0 and len(cache) == 0


def test_draft_t_of_a_quota_is_the_time_to_its_boundary() -> None:
    clock = ManualClock(T0)  # 12:00 UTC: the day's window ends in 43200 s
    limiter = RateLimiter(Quota(10, per="day"), clock=clock)
    for _ in range(5):
        result = limiter.check("k")
    fields = dict(rate_limit_headers(result, now=T0, style="draft"))
    # All five used units come back at midnight (a bucket's t would be 8640).
    assert fields["RateLimit"] == '"10/day";r=5;t=43200'
    assert result.kind == "quota"


@pytest.mark.redis
def test_redis_key_reused_between_a_limit_and_a_quota(client: Any) -> None:
    from helpers.redis_servers import unique_prefix
    from limiter.backends.redis import RedisStore

    store = RedisStore(client, prefix=unique_prefix())
    bucket, q = Limit(1, 3), Quota(5, per="day")
    states: Any = None
    for limit, cost, now in [
        (bucket, 1, T0),
        (bucket, 1, T0),
        (q, 1, T0 + 1),
        (q, 1, T0 + 1),
        (bucket, 1, T0 + 2),
        (bucket, 1, T0 + 2),
        (q, 1, T0 + 3),
    ]:
        states, expected = step(states, now, limit, cost)
        assert store.apply("k", limit, cost, now) == expected


@pytest.mark.redis
def test_quota_results_carry_their_kind_through_every_store(client: Any, tmp_path: Any) -> None:
    from helpers.redis_servers import unique_prefix
    from limiter.backends.redis import RedisStore

    stores = {
        "memory": MemoryStore(),
        "sqlite": SQLiteStore(str(tmp_path / "q.db")),
        "redis": RedisStore(client, prefix=unique_prefix()),
    }
    for name, store in stores.items():
        clock = ManualClock(T0)  # 12:00 UTC
        limiter = RateLimiter(["2/second", Quota(3, per="day")], store=store, clock=clock)
        answers = [limiter.check("k") for _ in range(2)]
        clock.advance(1)
        answers.append(limiter.check("k"))
        answers.append(limiter.check("k"))  # the quota's fourth: refused until midnight
        kinds = [[part.kind for part in a.results] for a in answers]
        assert kinds == [["bucket", "quota"]] * 4, name
        denied = answers[-1]
        assert denied.kind == "quota" and denied.retry_after == 43200 - 1, name
        fields = dict(rate_limit_headers(denied, now=clock.now(), style="draft"))
        # The bucket is back to one token in 0.5 s; the quota's units, at midnight.
        assert fields["RateLimit"] == '"2/second";r=1;t=1, "3/day";r=0;t=43199', name
        assert fields["Retry-After"] == "43199", name


# -- windows across a fall-back at midnight and a jump off the hour (issue 22, item 12)


def test_a_day_after_a_fall_back_across_midnight_holds_now_and_admits_the_count():
    from zoneinfo import ZoneInfo

    tz = ZoneInfo("America/St_Johns")  # 2000-10-29 00:01 NDT back to 2000-10-28 23:01 NST
    now = datetime(2000, 10, 28, 23, 30, fold=1, tzinfo=tz).timestamp()
    quota = Quota(50, "day", tz="America/St_Johns")
    start, end = quota.bounds(now)
    # The new day began at its midnight's first reading and lasts 25 hours.
    assert start == datetime(2000, 10, 29, tzinfo=tz).timestamp() == now - 1800
    assert end == datetime(2000, 10, 30, tzinfo=tz).timestamp() == start + 25 * 3600
    limiter = RateLimiter(quota, clock=ManualClock(now))
    results = [limiter.check("k") for _ in range(51)]
    assert [r.allowed for r in results] == [True] * 50 + [False]
    assert results[0].reset_after == end - now == 88200.0
    assert results[-1].retry_after == 88200.0


def test_chatham_hours_on_the_spring_forward_day_follow_the_hour_rule():
    from zoneinfo import ZoneInfo

    tz = ZoneInfo("Pacific/Chatham")  # 2023-09-24 02:45 +1245 jumps to 03:45 +1345
    jump = datetime(2023, 9, 24, 3, 45, tzinfo=tz).timestamp()
    quota = Quota(5, "hour", tz="Pacific/Chatham")
    two = datetime(2023, 9, 24, 2, tzinfo=tz).timestamp()
    four = datetime(2023, 9, 24, 4, tzinfo=tz).timestamp()
    assert quota.bounds(jump - 1) == (two, jump)  # 02:00 to the jump: 45 minutes
    assert quota.bounds(jump) == (jump, four)  # the jump over 03:00 to 04:00: 15 minutes
    assert four - jump == 900.0 and jump - two == 2700.0
    assert quota.bounds(four) == (four, four + 3600)


_ZONES = [
    "America/St_Johns",
    "America/Goose_Bay",
    "America/Moncton",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
    "America/Havana",
    "America/Santiago",
    "Europe/Paris",
    "Asia/Tehran",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    zone=st.sampled_from(_ZONES),
    per=st.sampled_from(["hour", "day", "week", "month"]),
    now=st.integers(min_value=536_457_600, max_value=1_293_840_000),  # 1987 to 2011
)
def test_every_window_holds_now(zone, per, now):
    start, end = Quota(1, per, tz=zone).bounds(float(now))
    assert start <= now < end
