"""The window policies on PostgreSQL: ``apply.sql`` against ``limiter.core.window``, bit for bit.

Hypothesis feeds the function and ``step``/``step_all`` the sequences the
Redis script meets (tests/helpers/step_strategies.py: time steps of seconds
or of periods, to and about window boundaries, late readings and clocks
stepped back; requests, Charges and Refunds with and without ``taken_at``)
for ``FixedWindow`` (both anchors) and ``SlidingWindow``, alone and beside a
bucket, a second window and a lockout, and compares every result field and
every stored row.  Then the rows as stored, the server's clock, the error
for a key another kind of policy wrote, and exact admitted counts from
threads and asyncio.  (Processes: test_postgres_store.py.)
"""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any, Iterator, List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.postgres_servers import PostgresServer, check_row, postgres_server
from helpers.step_strategies import (
    STARTS,
    WINDOW_OPS,
    given_a_window,
    given_windows_and_others,
    move_in_window,
    resolve,
)
from helpers.window_runs import (
    boundary_pairs,
    fixed_sequence,
    rounded_to_the_moment,
    slide_pairs,
    tasks_admit_exactly_count,
    threads_admit_exactly_count,
    threads_beside_a_bucket_and_a_lockout,
    window_sequence,
    window_sequence_all,
)
from limiter import Limit, Lockout, Quota
from limiter.backends.postgres import AsyncPostgresStore, PostgresStore, row_key
from limiter.core.bucket import step
from limiter.core.many import step_all
from limiter.core.state import State, from_row, keep_until, to_row
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0

pytestmark = pytest.mark.postgres

_prefixes = itertools.count()


def unique_prefix() -> str:
    return f"w{next(_prefixes)}:"


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    yield from postgres_server()


@pytest.fixture(scope="module")
def store(pg: PostgresServer) -> Iterator[PostgresStore]:
    """One store (one pool) for the module; keys apart by prefix (``shared``)."""
    s = PostgresStore(pg.url(), pool_timeout=30, max_connections=16)
    s.install()
    yield s
    s.close()


def shared(store: PostgresStore) -> PostgresStore:
    """A store on ``store``'s pool with a prefix of its own."""
    return PostgresStore(store.pool, prefix=unique_prefix())


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given_a_window
def test_function_matches_step_for_a_window(
    store: PostgresStore, window: Any, other: Any, start: float, ops: Any, switches: List[bool]
) -> None:
    s = shared(store)
    window_sequence(s, stored_in(s), window, other, start, ops, switches)


def stored_in(store: PostgresStore) -> Any:
    """``window_runs.Stored`` for ``store``'s rows."""

    def stored(key: str, policy: Any, state: Any, now: float, since: float) -> Any:
        check_row(store, key, state)
        return state

    return stored


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given_windows_and_others
def test_function_matches_step_all_with_windows(
    store: PostgresStore,
    window: Any,
    companions: List[Any],
    lockout: Optional[Lockout],
    start: float,
    ops: Any,
    per_limit: List[Any],
) -> None:
    s = shared(store)
    policies = [window, *companions, *([lockout] if lockout else [])]
    keys = [str(i) for i in range(len(policies))]
    window_sequence_all(s, stored_in(s), keys, policies, start, ops, per_limit)


#: Calendar quotas: an hour's or a day's window, in UTC or in a zone whose
#: days are not the epoch's (the client computes the window, rule 6 the server).
QUOTAS = st.builds(
    Quota,
    st.sampled_from([1, 3, 10, 2**53]),
    st.sampled_from(["hour", "day"]),
    st.sampled_from(["UTC", "Asia/Kolkata"]),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(quota=QUOTAS, start=STARTS, ops=WINDOW_OPS)
def test_function_matches_step_for_a_quota(
    store: PostgresStore, quota: Quota, start: float, ops: Any
) -> None:
    # Steps are scaled to an hour (a day's quota sees hours go by); "behind"
    # goes back before the stored window's start: a clock stepped back (rule 6).
    s = shared(store)
    hour = SimpleNamespace(period=3600.0)
    state: Optional[State] = None
    now = start
    for how, cost in ops:
        now = move_in_window(now, how, hour, state)
        cost = resolve(cost, now, hour)
        state, expected = step(state, now, quota, cost)
        assert s.apply("k", quota, cost, now) == expected  # every field, bit for bit
        check_row(s, "k", state)


@pytest.mark.parametrize(
    "window",
    [FixedWindow(3, 0.001), FixedWindow(2**53, 1.0, "first"), SlidingWindow(3, 0.001)],
    ids=repr,
)
def test_function_matches_step_over_many_boundaries(store: PostgresStore, window: Any) -> None:
    # Over 800 windows of 1 ms (and 0.8 s of one second).
    s = shared(store)
    fixed_sequence(s, stored_in(s), window, boundary_pairs(2000))


@pytest.mark.parametrize("window", [FixedWindow(1, 0.001), SlidingWindow(1, 0.001)])
def test_a_window_rounded_to_end_at_the_moment_is_the_next_one(
    store: PostgresStore, window: Any
) -> None:
    rounded_to_the_moment(shared(store), window)


@pytest.mark.parametrize("period", [1 / 3, 7.3, 60.0])
@pytest.mark.parametrize("count", [3, 5, 7])
def test_function_matches_slide_on_its_denials(
    store: PostgresStore, period: float, count: int
) -> None:
    s = shared(store)
    fixed_sequence(s, stored_in(s), SlidingWindow(count, period), slide_pairs(period))


# -- what the other tests rely on ---------------------------------------------------------


def read_row(store: PostgresStore, key: str) -> Any:
    with store.pool.connection() as conn:
        return conn.execute(
            f"SELECT a, b, c, keep_until FROM {store.names.table} WHERE key = %s",
            (row_key(key, store.prefix),),
        ).fetchone()


def test_window_states_as_stored(store: PostgresStore) -> None:
    # A fixed window keeps a quota's two numbers (used * 2**-600, end), a sliding
    # window three (previous, current, until); keep_until is the end, and until.
    s = shared(store)
    hour = 1_699_999_200.0  # an hour's start (T0 is 800 s into the hour)
    s.apply("f", FixedWindow(5, 60), 2, hour + 30)
    assert read_row(s, "f") == (2 * 2**-600, hour + 60, None, hour + 60)
    s.apply("a", FixedWindow(5, 60, "first"), 2, hour + 30)
    assert read_row(s, "a") == (2 * 2**-600, hour + 90, None, hour + 90)
    s.apply("s", SlidingWindow(5, 60), 2, hour + 30)
    s.apply("s", SlidingWindow(5, 60), 1, hour + 90)
    assert read_row(s, "s") == (2.0, 1.0, hour + 180, hour + 180)


def test_a_key_of_another_kind_of_policy_is_read_as_step_reads_it(store: PostgresStore) -> None:
    # Another shape's state reads as nothing (limiter.core.state): the key
    # starts afresh, and keeps that row until the new policy writes its own.
    s = shared(store)
    sliding, bucket, fixed = SlidingWindow(5, 60), Limit(1, 5), FixedWindow(5, 60)
    cases = [("k", sliding, fixed, 1), ("j", sliding, bucket, 1), ("b", bucket, sliding, 1)]
    cases += [("d", sliding, fixed, 6), ("p", bucket, sliding, 0)]  # denied, a peek: no write
    for key, writer, reader, cost in cases:
        s.apply(key, writer, 1, T0)
        written = read_row(s, key)
        state, expected = step(from_row(*written[:3]), T0 + 1, reader, cost)
        fresh = step(None, T0 + 1, reader, cost)[1]
        assert s.apply(key, reader, cost, T0 + 1) == expected == fresh, key
        if cost in (0, 6):
            assert read_row(s, key) == written, key
        else:
            assert read_row(s, key) == (*to_row(state), keep_until(state)), key
    s.apply("m", sliding, 1, T0)
    limits = [fixed, bucket]
    states = [None, from_row(*read_row(s, "m")[:3])]
    new_states, expected = step_all(states, T0 + 1, limits, 1)
    assert s.apply_many(["n", "m"], limits, 1, T0 + 1) == expected
    assert [read_row(s, k) for k in ("n", "m")] == [(*to_row(x), keep_until(x)) for x in new_states]


def test_windows_on_the_server_clock(store: PostgresStore, pg: PostgresServer) -> None:
    # Not timed: the function finds the window from clock_timestamp() itself.
    s = shared(store)
    for window in (FixedWindow(3, 3600), FixedWindow(3, 3600, "first"), SlidingWindow(3, 3600)):
        results = [s.apply(window.label, window, 1, None) for _ in range(4)]
        assert [r.allowed for r in results] == [True, True, True, False]
        assert 0 < results[-1].retry_after <= 7200
    with pg.admin("limiter") as admin:
        (seconds,) = admin.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
    _, end, _, _ = read_row(s, "3/3600s:fixed")
    assert end == (float(seconds) // 3600 + 1) * 3600


# -- exact under concurrency ----------------------------------------------------------------
# (Processes, and every policy at once: test_postgres_store.py.)


def test_eight_threads_admit_exactly_count(store: PostgresStore) -> None:
    threads_admit_exactly_count(shared(store))


def test_threads_beside_a_bucket_and_a_lockout_admit_exactly(store: PostgresStore) -> None:
    threads_beside_a_bucket_and_a_lockout(shared(store), ["window", "tokens", "lockout"])


def test_asyncio_checks_in_flight_admit_exactly_count(pg: PostgresServer) -> None:
    async def flood() -> None:
        s = AsyncPostgresStore(pg.url(), prefix=unique_prefix(), max_connections=8, pool_timeout=60)
        try:
            await tasks_admit_exactly_count(s)
        finally:
            await s.aclose()

    asyncio.run(flood())
