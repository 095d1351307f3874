"""PostgresStore and AsyncPostgresStore against a real PostgreSQL started for this module.

The conformance suite on both stores, the PL/pgSQL function checked against
``limiter.core`` by hypothesis (results and stored rows, bit for bit), one
statement per check, the server's clock, 4 processes x 8 threads on one key per policy.
Failures (a stopped server, a read-only one, a dropped function, a missing
table) are in test_postgres_failures.py.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import random
import re
import threading
from decimal import Decimal
from typing import Any, Iterator, List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.postgres_servers import PostgresServer, check_row, postgres_server
from helpers.step_strategies import LOCKOUTS, OPS, PER_LIMIT, RATES, move, op_cost
from limiter import Limit, ManualClock, Quota, RateLimiter
from limiter.backends.postgres import AsyncPostgresStore, PostgresStore, row_key
from limiter.core.bucket import step
from limiter.core.costs import Refund
from limiter.core.lockout import Lockout
from limiter.core.many import step_all
from limiter.core.state import State
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0
from limiter.testing._store_suite import StoreConformance

pytestmark = pytest.mark.postgres

_prefixes = itertools.count()


def unique_prefix() -> str:
    return f"t{next(_prefixes)}:"


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    yield from postgres_server()


@pytest.fixture(scope="module")
def store(pg: PostgresServer) -> Iterator[PostgresStore]:
    """One store (one pool) for the module's property tests; keys apart by prefix."""
    s = PostgresStore(pg.url(), pool_timeout=30)
    s.install()
    yield s
    s.close()


@pytest.fixture(scope="module")
def admin(pg: PostgresServer) -> Iterator[Any]:
    with pg.admin("limiter") as conn:
        yield conn


class TestPostgresStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _server(self, pg: PostgresServer) -> None:
        self.url = pg.url()

    def make_store(self) -> PostgresStore:
        return PostgresStore(self.url, prefix=unique_prefix(), max_connections=16, pool_timeout=30)

    def close_store(self, store: PostgresStore) -> None:
        store.close()


class TestPostgresStoreLocalTime(TestPostgresStore):
    """``server_time=False``: ``now=None`` reads ``time.time()`` instead of the server's clock."""

    def make_store(self) -> PostgresStore:
        store = super().make_store()
        store.server_time = False
        return store


@pytest.fixture(scope="class")
def own_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """An event loop for the test class (``cls.loop``): an AsyncConnectionPool is
    bound to the loop it opened in. (A module function: pytest 9 deprecates a
    class-scoped fixture on an instance method, and 8.4 cannot take a classmethod.)"""
    request.cls.loop = asyncio.new_event_loop()
    yield
    request.cls.loop.close()


@pytest.mark.usefixtures("own_loop")
class TestAsyncPostgresStore(StoreConformance):
    mode = "async"
    loop: asyncio.AbstractEventLoop

    @pytest.fixture(autouse=True)
    def _server(self, pg: PostgresServer) -> None:
        self.url = pg.url()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def make_store(self) -> AsyncPostgresStore:
        # The conformance flood sends 1,000 checks at once: they wait for a connection.
        return AsyncPostgresStore(
            self.url, prefix=unique_prefix(), max_connections=20, pool_timeout=60
        )

    def close_store(self, store: AsyncPostgresStore) -> None:
        self.run(store.aclose())


# -- the function is limiter.core, bit for bit ---------------------------------------
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(
    rate=RATES,
    burst=st.integers(1, 30),
    other=st.tuples(RATES, st.integers(1, 30)),
    ops=OPS,
    switches=st.lists(st.sampled_from([False, False, False, True]), min_size=40, max_size=40),
)
def test_function_matches_step(
    store: PostgresStore, rate: float, burst: int, other: Any, ops: Any, switches: List[bool]
) -> None:
    # Now and then a step goes under another limit: a state written under a
    # larger one (or deep in debt) is read as at most one burst owed.
    key = unique_prefix() + "k"
    limits = (Limit(rate, burst), Limit(*other))
    state = None
    now = T0
    for (dt, cost), switch in zip(ops, switches):
        limit = limits[switch]
        now = move(now, dt, [state])
        state, expected = step(state, now, limit, cost)
        got = store.apply(key, limit, cost, now)
        assert got == expected  # every field, bit for bit
        check_row(store, key, state)


@SETTINGS
@given(
    limits=st.lists(st.tuples(RATES, st.integers(1, 20)), min_size=1, max_size=4),
    ops=OPS,
    per_limit=st.lists(PER_LIMIT, min_size=40, max_size=40),
)
def test_function_matches_step_all(
    store: PostgresStore, limits: Any, ops: Any, per_limit: List[Any]
) -> None:
    lims = [Limit(rate, burst) for rate, burst in limits]
    prefix = unique_prefix()
    keys = [f"{prefix}{i}" for i in range(len(lims))]
    states: List[Optional[State]] = [None] * len(lims)
    now = T0
    for i, ((dt, cost), costs) in enumerate(zip(ops, per_limit)):
        cost = op_cost(cost, costs, len(lims), i % 2 == 0)
        now = move(now, dt, states)
        states, expected = step_all(states, now, lims, cost)
        got = store.apply_many(keys, lims, cost, now)
        assert got == expected  # every field, bit for bit (results, policy too)
        for key, state in zip(keys, states):
            check_row(store, key, state)


@SETTINGS
@given(
    limits=st.lists(st.tuples(RATES, st.integers(1, 5)), min_size=1, max_size=3),
    lockout=LOCKOUTS,
    ops=OPS,
    per_limit=st.lists(PER_LIMIT, min_size=40, max_size=40),
)
def test_function_matches_step_all_with_a_lockout(
    store: PostgresStore, limits: Any, lockout: Lockout, ops: Any, per_limit: List[Any]
) -> None:
    lims = [*(Limit(rate, burst) for rate, burst in limits), lockout]
    prefix = unique_prefix()
    keys = [f"{prefix}{i}" for i in range(len(lims))]
    states: List[Optional[State]] = [None] * len(lims)
    now = T0
    for i, ((dt, cost), costs) in enumerate(zip(ops, per_limit)):
        cost = op_cost(cost, costs, len(lims), i % 2 == 0)
        now = move(now, dt, states[:-1])
        states, expected = step_all(states, now, lims, cost)
        got = store.apply_many(keys, lims, cost, now)
        assert got == expected
        for key, state in zip(keys, states):
            check_row(store, key, state)


def test_function_matches_step_up_to_2_53_tokens(store: PostgresStore) -> None:
    key = unique_prefix() + "big"
    for burst in (2**53 - 1, 2**53):
        limit = Limit(1e6, burst)
        state = None
        for cost in (1, 2**52, 0, Refund(5), 2**52):
            state, expected = step(state, T0, limit, cost)
            assert store.apply(key, limit, cost, T0) == expected
        store.reset(key)


def test_bad_arguments_never_reach_the_server() -> None:
    store = PostgresStore("postgresql://nowhere.invalid/db")
    for bad in (-1, float("nan"), Decimal("NaN"), -(10**400)):
        with pytest.raises(ValueError, match="cost must be a number of tokens >= 0, got"):
            store.apply("k", Limit(1, 1), bad, T0)  # type: ignore[arg-type]
    for wrong in ("1", None, True, b"1"):
        with pytest.raises(TypeError, match="cost must be a number of tokens, got"):
            store.apply("k", Limit(1, 1), wrong, T0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="now"):
        store.apply("k", Limit(1, 1), 1, float("inf"))
    with pytest.raises(ValueError, match="one key per limit"):
        store.apply_many(["a"], [Limit(1, 1)] * 2, 1, T0)
    with pytest.raises(ValueError, match="key must be a str"):
        store.apply(b"k", Limit(1, 1), 1, T0)  # type: ignore[arg-type]
    assert store.pool is None


def test_any_key_is_its_own_row(store: PostgresStore) -> None:
    keys = ["a", "a%", "a%0025", "a\x00", "a%0000", "\ud800", "%D800", "é", "😀", "", " "]
    assert len({row_key(k) for k in keys}) == len(keys)
    prefix = unique_prefix()
    limit = Limit(0.001, 1)
    assert all(store.apply(prefix + k, limit, 1, T0).allowed for k in keys)
    assert not any(store.apply(prefix + k, limit, 1, T0).allowed for k in keys)


def test_a_key_of_any_length_is_its_own_row(store: PostgresStore) -> None:
    # A client may choose the key (an API key header): one too long for the
    # table's index was a StoreError, the fail-open path, for every check of it.
    noise = random.Random(25)
    long_keys = [
        "".join(chr(noise.randrange(33, 0x2FFF)) for _ in range(n)) for n in (700, 3000, 100_000)
    ]
    long_keys += [long_keys[1] + "x", "%" * 3000, "\x00" * 3000]
    prefix = unique_prefix()
    assert len({row_key(k, prefix) for k in long_keys}) == len(long_keys)
    assert all(len(row_key(k, prefix).encode()) <= 2048 + 66 for k in long_keys)
    assert row_key("a" * 2048) == "a" * 2048  # short enough: as is
    limit = Limit(0.001, 1)
    assert all(store.apply(prefix + k, limit, 1, T0).allowed for k in long_keys)
    assert not any(store.apply(prefix + k, limit, 1, T0).allowed for k in long_keys)
    store.reset(prefix + long_keys[2])
    assert store.apply(prefix + long_keys[2], limit, 1, T0).allowed


# -- one statement per check ---------------------------------------------------------


def test_one_statement_and_one_transaction_per_check(pg: PostgresServer, admin: Any) -> None:
    store = PostgresStore(pg.url(), max_connections=1)
    try:
        limiter = RateLimiter(Limit(1, 100), store=store, clock=ManualClock(T0))
        limiter.allow("warm-up")  # connects and finds the function installed
        admin.execute("SELECT pg_stat_statements_reset()")
        allowed = [limiter.allow("k") for _ in range(100)]
        store.apply_many(["x", "y"], [Limit(1, 5), Limit(2, 5)], 1, T0)
        assert allowed == [True] * 100
        rows = admin.execute(
            "SELECT query, calls FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid "
            "WHERE r.rolname = 'app' AND s.toplevel ORDER BY calls DESC"
        ).fetchall()
        # Every check is this one statement: no BEGIN, no COMMIT (autocommit:
        # the statement is the transaction, committed asynchronously), nothing else.
        statement = (
            f"SELECT {store.names.apply}(convert_from($1::bytea, 'UTF8')::text[], $2::text), "
            "set_config('synchronous_commit', 'off', true)"
        )
        assert rows == [(statement, 101)]
    finally:
        store.close()


# -- what a connection may bring: settings, poolers, encodings ----------------------

#: Checks whose every number needs all 17 digits (a third of a token, rates of 7.3/s).
AWKWARD = [(Limit(7.3, 3), 1 / 3), (Limit(100 / 60, 5), 0.1), (Limit(1e6, 30), 2.5)]


def same_as_step(store: PostgresStore) -> None:
    """A few checks whose results and rows must be ``step``'s, bit for bit."""
    for i, (limit, cost) in enumerate(AWKWARD):
        state = None
        for k in range(6):
            now = T0 + k / 7
            state, expected = step(state, now, limit, cost)
            assert store.apply(f"awkward{i}", limit, cost, now) == expected
            check_row(store, f"awkward{i}", state)


@pytest.mark.parametrize("digits", [0, -15, 3])
def test_a_session_with_fewer_float_digits_gets_exact_numbers(
    pg: PostgresServer, digits: int
) -> None:
    # float8out writes %.15g with extra_float_digits 0 (or fewer digits below):
    # the function raises it for its own transaction, the session keeps its own.
    from psycopg_pool import ConnectionPool

    def configure(conn: Any) -> None:
        conn.execute(f"SET extra_float_digits = {digits}")

    with ConnectionPool(
        pg.url(), min_size=1, max_size=1, kwargs={"autocommit": True}, configure=configure
    ) as pool:
        same_as_step(PostgresStore(pool, prefix=unique_prefix()))
        with pool.connection() as conn:
            assert conn.execute("SHOW extra_float_digits").fetchone() == (str(digits),)


def test_without_prepared_statements_as_behind_an_old_pgbouncer(pg: PostgresServer) -> None:
    # prepare_threshold=None (docs/stores.md, pgbouncer before 1.21): nothing is
    # ever prepared on the connection, each check is one unnamed statement.
    from psycopg_pool import ConnectionPool

    kwargs = {"autocommit": True, "prepare_threshold": None}
    with ConnectionPool(pg.url(), min_size=1, max_size=1, kwargs=kwargs) as pool:
        same_as_step(PostgresStore(pool, prefix=unique_prefix()))
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)


def test_a_statement_deallocated_under_the_store_is_prepared_again(store: PostgresStore) -> None:
    # DISCARD ALL (a pooler's reset) or DEALLOCATE drops the prepared statement:
    # the next check prepares it again, answering as ever.
    s = PostgresStore(store.pool, prefix=unique_prefix())
    for _ in range(3):
        assert s.apply("k", Limit(1, 5), 1, T0).allowed
        with store.pool.connection() as conn:
            conn.execute("DEALLOCATE ALL")
    assert s.apply("k", Limit(1, 5), 0, T0).remaining == 2


def test_keys_are_the_same_rows_whatever_the_client_encoding(pg: PostgresServer) -> None:
    # Keys travel as UTF-8 bytes: a LATIN1 session finds the rows a UTF8 one wrote.
    from psycopg_pool import ConnectionPool

    prefix = unique_prefix()
    kwargs = {"autocommit": True, "client_encoding": "LATIN1"}
    utf8 = PostgresStore(pg.url(), prefix=prefix)
    try:
        with ConnectionPool(pg.url(), min_size=1, max_size=1, kwargs=kwargs) as latin:
            for key in ("café", "ÿ", 'a\\b"c{},'):
                assert utf8.apply(key, Limit(0.001, 1), 1, T0).allowed
                refused = PostgresStore(latin, prefix=prefix).apply(key, Limit(0.001, 1), 1, T0)
                assert not refused.allowed
    finally:
        utf8.close()


# -- the server's clock ---------------------------------------------------------------


def server_now(admin: Any) -> float:
    return float(admin.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0])


def test_server_time_ignores_a_skewed_local_clock(store: PostgresStore, admin: Any) -> None:
    import time_machine

    local = PostgresStore(store.pool, prefix=unique_prefix(), server_time=False)
    key = unique_prefix() + "k"
    before = server_now(admin)
    with time_machine.travel(1_000_000_000, tick=False):  # this host thinks it is 2001
        store.apply(key, Limit(1, 5), 1, None)
        local.apply("k", Limit(1, 5), 1, None)
    after = server_now(admin)
    table = store.names.table
    (updated_at,) = admin.execute(
        f"SELECT b FROM {table} WHERE key = %s", (row_key(key),)
    ).fetchone()
    assert before <= updated_at <= after  # the server's clock, to the microsecond
    (updated_at,) = admin.execute(
        f"SELECT b FROM {table} WHERE key = %s", (row_key("k", local.prefix),)
    ).fetchone()
    assert updated_at == 1_000_000_000


def test_injected_clock_is_passed_to_the_function(store: PostgresStore) -> None:
    clock = ManualClock(T0)
    shared = PostgresStore(store.pool, prefix=unique_prefix())
    limiter = RateLimiter("2/second", store=shared, clock=clock)
    assert [limiter.allow("a") for _ in range(3)] == [True, True, False]
    clock.advance(0.5)
    assert [limiter.allow("a") for _ in range(2)] == [True, False]


# -- many processes -------------------------------------------------------------------


#: One key each, on a frozen clock (T0: no boundary of an hour's or a day's
#: windows, nothing refills): each admits exactly 100, however many ask.
HAMMERED = (
    Limit(0.001, 100),
    Quota(100, "day"),
    FixedWindow(100, 3600),
    FixedWindow(100, 3600, "first"),
    SlidingWindow(100, 3600),
)


def hammer(url: str, prefix: str, threads: int, checks: int, start: Any) -> List[int]:
    """What ``threads`` threads, each checking every ``HAMMERED`` policy ``checks`` times, got."""
    store = PostgresStore(url, prefix=prefix, max_connections=threads, pool_timeout=60)
    admitted = [0] * len(HAMMERED)
    lock = threading.Lock()

    def run() -> None:
        mine = [0] * len(HAMMERED)
        for _ in range(checks):
            for i, policy in enumerate(HAMMERED):
                mine[i] += store.apply(f"hot{i}", policy, 1, T0).allowed
        with lock:
            for i, n in enumerate(mine):
                admitted[i] += n

    store.ping()
    workers = [threading.Thread(target=run) for _ in range(threads)]
    start.wait()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    store.close()
    return admitted


def test_four_processes_of_eight_threads_admit_exactly_burst_and_count(pg: PostgresServer) -> None:
    ctx = multiprocessing.get_context("spawn")
    prefix = unique_prefix()
    with ctx.Manager() as manager:
        start = manager.Event()
        with ctx.Pool(4) as pool:
            pending = [pool.apply_async(hammer, (pg.url(), prefix, 8, 40, start)) for _ in range(4)]
            start.set()
            admitted = [p.get(300) for p in pending]
    # Of 1,280 checks per policy: the bucket's burst, the quota's and the windows' count.
    assert [sum(column) for column in zip(*admitted)] == [100] * len(HAMMERED)


# -- sweeping ---------------------------------------------------------------------------


def test_sweep_deletes_only_what_no_longer_matters(store: PostgresStore, admin: Any) -> None:
    swept = PostgresStore(store.pool, table="swept")
    swept.install()
    limit = Limit(1, 10)  # full again 1 s per token taken
    for i in range(25):
        swept.apply(f"k{i}", limit, 1 + i % 5, T0)  # full again at T0 + 1 .. T0 + 5
    swept.apply("quota", Quota(3, "day"), 1, T0)  # kept to the day's end
    assert swept.sweep(T0 + 0.5) == 0
    assert swept.sweep(T0 + 2, batch=2) == 10  # five batches, the last one short
    assert swept.sweep(T0 + 5) == 15
    (left,) = admin.execute("SELECT count(*) FROM swept").fetchone()
    assert left == 1
    # A deleted row is a full bucket: the next check finds one.
    assert swept.apply("k0", limit, 10, T0 + 5).allowed
    # With max_age, idle keys go too (a bucket's time is its last update, a
    # quota's its window's end).
    assert swept.sweep(T0 + 5, max_age=0.0) == 0
    assert swept.sweep(T0 + 6, max_age=0.5) == 1
    (left,) = admin.execute("SELECT key FROM swept").fetchone()
    assert left == "quota"


def test_sweep_refuses_a_time_that_would_delete_live_rows(store: PostgresStore, admin: Any) -> None:
    # In PostgreSQL NaN is above every number: keep_until <= NaN holds for all rows.
    swept = PostgresStore(store.pool, table="swept_nan")
    swept.install()
    swept.apply("live", Limit(1, 3600), 1, T0)
    bad = [
        ({"now": float("nan")}, "now must be a finite number of seconds, got nan"),
        ({"now": float("inf")}, "now must be a finite number of seconds, got inf"),
        ({"now": T0, "max_age": float("nan")}, "max_age must be a finite number of seconds"),
        ({"now": T0, "max_age": -1.0}, "max_age must be a finite number of seconds >= 0, got -1"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=re.escape(message)):
            swept.sweep(**kwargs)
    with pytest.raises(TypeError, match="now must be a number of seconds, got 'soon'"):
        swept.sweep(now="soon")  # type: ignore[arg-type]
    (left,) = admin.execute("SELECT count(*) FROM swept_nan").fetchone()
    assert left == 1


def test_start_cleanup_sweeps_the_table(store: PostgresStore, admin: Any) -> None:
    clock = ManualClock(T0)
    shared = PostgresStore(store.pool, prefix=unique_prefix())
    limiter = RateLimiter(Limit(1, 2), store=shared, clock=clock)
    limiter.allow("a")
    clock.advance(10)
    stop = limiter.start_cleanup(None, 3600)
    stop()
    (n,) = admin.execute(
        f"SELECT count(*) FROM {store.names.table} WHERE key = %s", (row_key("a", shared.prefix),)
    ).fetchone()
    assert n == 0
