"""Concurrency on PostgreSQL: apply.sql's SLOTS against ``limiter.core.concurrency``, bit for bit.

Hypothesis feeds the function and ``slot_step``/``step_all`` the same
sequences of takes, gives, renewals and peeks (several holders, time moving
by parts of a lease, to an expiry and just before it, clocks stepped back
within and beyond the tolerance), for a ``Concurrency`` alone and beside a
bucket, a window and a lockout (a take: every policy, all or nothing; a give
or renewal: the Concurrency keys only, as ``RateLimiter._slot_plan`` sends
them), and compares every result field and every stored row.  Then the rows
as stored, an older table gaining the leases column, the errors, and threads
that never hold more than the limit.  (``StoreConformance``'s slot cases run
in test_postgres_store.py.)

The argument is ``limiter.backends._wire``'s: policy ``" c" lease " " limit``,
costs ``"t" holder`` (take), ``"g" holder`` (give), ``"r" holder`` (renew).
"""

from __future__ import annotations

import itertools
import math
import threading
from contextlib import closing
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.postgres_servers import PostgresServer, check_row, postgres_server
from limiter import Limit, Lockout
from limiter.backends._wire import Argv
from limiter.backends.postgres import PostgresStore, row_key
from limiter.core.bucket import step
from limiter.core.concurrency import Concurrency
from limiter.core.costs import Charge, Hold, Refund
from limiter.core.limits import CLOCK_TOLERANCE
from limiter.core.many import step_all
from limiter.core.state import Leases, State, keep_until, read_leases
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0

pytestmark = pytest.mark.postgres

_prefixes = itertools.count()


def wire(now: float, policies: Sequence[Any], cost: Any) -> str:
    """The argument of a call (the grammar's ``argv``), as the store sends it."""
    return Argv(False).many(policies, cost, now)[0].decode("ascii")


def call(store: PostgresStore, keys: Sequence[str], argv: str) -> str:
    """The function's reply for ``keys`` (``store``'s rows) and ``argv`` (at most 10 s)."""
    rows = [row_key(k, store.prefix) for k in keys]
    with store.pool.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL statement_timeout = '10s'")
        reply: str = conn.execute(
            f"SELECT {store.names.apply}(%s::text[], %s::text)", (rows, argv)
        ).fetchone()[0]
    return reply


def send(store: PostgresStore, keys: Sequence[str], policies: Sequence[Any], cost: Any, now: float):  # type: ignore[no-untyped-def]
    """``store.apply``'s result for one policy, else ``apply_many``'s (as ``Slot`` sends them)."""
    if len(policies) == 1:
        return store.apply(keys[0], policies[0], cost, now)
    return store.apply_many(keys, policies, cost, now)


def read_row(store: PostgresStore, key: str) -> Any:
    with store.pool.connection() as conn:
        return conn.execute(  # binary: exact whatever the session's extra_float_digits
            f"SELECT a, b, c, leases, keep_until FROM {store.names.table} WHERE key = %s",
            (row_key(key, store.prefix),),
            binary=True,
        ).fetchone()


def check_leases(store: PostgresStore, key: str, state: Optional[State]) -> None:
    """``key``'s row holds ``state`` bit for bit: (slots, until, NULL, the pairs, until)."""
    row = read_row(store, key)
    if state is None:
        assert row is None
        return
    pairs = list(read_leases(state))
    assert row is not None
    assert tuple(row) == (len(pairs) / 2, state[-1], None, pairs, keep_until(state))  # type: ignore[index]


def check_any(store: PostgresStore, key: str, policy: Any, state: Optional[State]) -> None:
    if policy.kind == "concurrency":
        check_leases(store, key, state)
    else:
        check_row(store, key, state)


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    yield from postgres_server()


@pytest.fixture(scope="module")
def store(pg: PostgresServer) -> Iterator[PostgresStore]:
    """The module's store (its pool); each test's keys apart by prefix (``shared``)."""
    with closing(PostgresStore(pg.url(), pool_timeout=30, max_connections=8)) as s:
        s.install()
        yield s


def shared(store: PostgresStore) -> PostgresStore:
    return PostgresStore(store.pool, prefix=f"c{next(_prefixes)}:")


# -- sequences --------------------------------------------------------------------------

HOLDERS = st.sampled_from([1.0, 2.0, 3.0, 7.0, 2.0**53 - 1])
CONCURRENCIES = st.builds(
    Concurrency,
    st.sampled_from([1, 2, 2, 3, 5]),
    st.sampled_from([0.001, 0.25, 1.0, 1 / 3, 7.3, 60.0, 1e9]),
)
PEEKS = st.sampled_from([0, 0.0, Charge(1), Charge(0), Refund(1), Refund(2.5, T0 - 1e9)])
ACTIONS = st.one_of(
    st.tuples(st.sampled_from(["take", "take", "take", "give", "renew"]), HOLDERS).map(
        lambda a: Hold(a[1], a[0])
    ),
    PEEKS,
)
#: Time moves: parts of the lease, to an expiry or just before it (("expiry", i, exact)),
#: seconds either way, and back within and beyond the clock tolerance.
MOVES = st.one_of(
    st.sampled_from([0.0, 0.001, 0.25, 0.5, 0.999, 1.0, 1.5, 3.0]).map(lambda f: ("lease", f)),
    st.tuples(st.just("expiry"), st.integers(0, 4), st.booleans()),
    st.floats(-100, 100, allow_nan=False),
    st.sampled_from(
        [
            *(-0.5, -CLOCK_TOLERANCE, -math.nextafter(CLOCK_TOLERANCE, 2)),
            *(-CLOCK_TOLERANCE - 1e-6, -2.0, -3600.0, 3600.0),
        ]
    ),
)
OPS = st.lists(st.tuples(MOVES, ACTIONS), min_size=1, max_size=30)
STARTS = st.sampled_from([T0, 12.0, 1e6])


def examples(count: int) -> Any:
    """Hypothesis settings: ``count`` examples, no deadline, the module's store as a fixture."""
    fixture = HealthCheck.function_scoped_fixture
    return settings(max_examples=count, deadline=None, suppress_health_check=[fixture])


def move(now: float, how: Any, lease: float, states: Sequence[Optional[State]]) -> float:
    """``now`` moved by ``how`` (see ``MOVES``); an expiry is one of the stored leases'."""
    if not isinstance(how, tuple):
        return now + how
    if how[0] == "lease":
        return now + how[1] * lease
    expiries = [e for s in states if s.__class__ is Leases for e in read_leases(s)[1::2]]
    if not expiries:
        return now
    expiry = expiries[how[1] % len(expiries)]
    return expiry if how[2] else math.nextafter(expiry, -math.inf)


def expected(states: List[Optional[State]], now: float, policies: Sequence[Any], cost: Any):  # type: ignore[no-untyped-def]
    """What the core gives for one call: new states and the combined result."""
    if len(policies) == 1:
        new, result = step(states[0], now, policies[0], cost)
        return [new], result
    return step_all(states, now, policies, cost)


@examples(60)
@given(policy=CONCURRENCIES, start=STARTS, ops=OPS)
def test_function_matches_slot_step(
    store: PostgresStore, policy: Concurrency, start: float, ops: Any
) -> None:
    s = shared(store)
    state: Optional[State] = None
    now = start
    for how, cost in ops:
        now = move(now, how, policy.lease, [state])
        [state], result = expected([state], now, [policy], cost)
        assert send(s, ["k"], [policy], cost, now) == result  # every field, bit for bit
        check_leases(s, "k", state)


COMPANIONS = st.lists(
    st.one_of(
        st.builds(Limit, st.sampled_from([0.5, 3.0, 1000.0]), st.integers(1, 4)),
        st.builds(FixedWindow, st.integers(1, 4), st.sampled_from([0.25, 1.0, 60.0])),
        CONCURRENCIES,
    ),
    min_size=1,
    max_size=2,
)
MAYBE_LOCKOUTS = st.none() | st.builds(
    Lockout, breaches=st.integers(1, 3), within=st.just(30.0), duration=st.just(2.0)
)
OTHER_COSTS = st.sampled_from([0, 1, 1, 2, Charge(1), Refund(1)])


@examples(50)
@given(
    policy=CONCURRENCIES,
    companions=COMPANIONS,
    lockout=MAYBE_LOCKOUTS,
    start=STARTS,
    ops=st.lists(st.tuples(MOVES, ACTIONS, OTHER_COSTS), min_size=1, max_size=25),
)
def test_function_matches_step_all_beside_other_policies(
    store: PostgresStore,
    policy: Concurrency,
    companions: List[Any],
    lockout: Optional[Lockout],
    start: float,
    ops: Any,
) -> None:
    # As RateLimiter._slot_plan sends them: a take (or a peek) to every key, the
    # Hold to the Concurrency ones, 0 to a lockout; a give or renewal to the
    # Concurrency keys only, one Hold for all.
    s = shared(store)
    policies = [policy, *companions, *([lockout] if lockout else [])]
    keys = [str(i) for i in range(len(policies))]
    mine = [i for i, p in enumerate(policies) if p.kind == "concurrency"]
    states: List[Optional[State]] = [None] * len(policies)
    now = start
    for how, cost, other in ops:
        now = move(now, how, policy.lease, states)
        if cost.__class__ is Hold and cost.action != "take":
            chosen, sent = mine, cost
        else:
            chosen = list(range(len(policies)))
            sent = tuple(
                cost if p.kind == "concurrency" else 0.0 if p.kind == "lockout" else other
                for p in policies
            )
        picked = [policies[i] for i in chosen]
        new, result = expected([states[i] for i in chosen], now, picked, sent)
        for i, state in zip(chosen, new):
            states[i] = state
        assert send(s, [keys[i] for i in chosen], picked, sent, now) == result
        for key, p, state in zip(keys, policies, states):
            check_any(s, key, p, state)


@pytest.mark.parametrize("lockout", [None, Lockout(breaches=1)])
def test_a_give_is_never_refused_as_a_whole(store: PostgresStore, lockout: Any) -> None:
    # Two Concurrency policies, the short lease lapsed: the give refuses (the
    # lapsed one's result) but still frees the other's slot, and counts no breach.
    s = shared(store)
    policies = [Concurrency(2, lease=1.0), Concurrency(2, lease=60.0)]
    keys = ["a", "b"]
    states: List[Optional[State]] = [None, None]
    for now, cost in ((T0, Hold(1.0)), (T0 + 5, Hold(1.0, "give"))):
        sent = [*policies, *([lockout] if lockout else [])]
        costs = (cost, cost, *((0.0,) if lockout else ()))
        chosen = states + [None] * (len(sent) - 2)
        new, result = step_all(chosen, now, sent, costs)
        states = new[:2]
        assert send(s, [*keys, "l"][: len(sent)], sent, costs, now) == result
        for key, state in zip(keys, states):
            check_leases(s, key, state)
    assert not result.allowed and read_row(s, "b")[3] == []
    assert read_row(s, "l") is None


# -- rows, upgrades, errors ---------------------------------------------------------------


def test_leases_as_stored(store: PostgresStore) -> None:
    # (slots held, until, NULL, the pairs, until); a give of the last empties
    # the leases ('{}', never NULL: NULL is another policy's row).
    s = shared(store)
    policy = Concurrency(2, lease=10)
    assert send(s, ["k"], [policy], Hold(5.0), T0).remaining == 1
    assert send(s, ["k"], [policy], Hold(6.0), T0 + 1).remaining == 0
    assert read_row(s, "k") == (2.0, T0 + 11, None, [5.0, T0 + 10, 6.0, T0 + 11], T0 + 11)
    assert (
        send(s, ["k"], [policy], 0, T0 + 2)
        == step(Leases((5.0, T0 + 10, 6.0, T0 + 11, T0 + 11)), T0 + 2, policy, 0)[1]
    )
    send(s, ["k"], [policy], Hold(5.0, "give"), T0 + 2)
    send(s, ["k"], [policy], Hold(6.0, "give"), T0 + 2)
    assert read_row(s, "k") == (0.0, T0 + 2, None, [], T0 + 2)
    # A give whose lease expired meanwhile is refused, and waits for nothing.
    send(s, ["k"], [policy], Hold(5.0), T0 + 3)
    refused = send(s, ["k"], [policy], Hold(5.0, "give"), T0 + 13)
    assert (refused.allowed, refused.remaining, refused.retry_after) == (False, 2, 0.0)


def test_sweep_forgets_leases_after_the_last_expiry(store: PostgresStore) -> None:
    s = shared(store)
    send(s, ["k"], [Concurrency(3, lease=10)], Hold(1.0), T0)
    send(s, ["k"], [Concurrency(3, lease=10)], Hold(2.0), T0 + 5)
    s.sweep(now=T0 + 14.5)
    assert read_row(s, "k") is not None
    s.sweep(now=T0 + 15)
    assert read_row(s, "k") is None


def test_a_table_made_before_leases_gains_the_column(pg: PostgresServer) -> None:
    # A table of the previous version (no leases column) with a row in it:
    # install() adds the column and keeps the row; checks then take slots.
    old = PostgresStore(pg.url(), table="before_leases")
    sql = old.install_sql()
    assert "ADD COLUMN IF NOT EXISTS leases double precision[]" in sql
    with pg.admin("limiter") as admin:
        admin.execute("SET ROLE app")
        admin.execute(
            'CREATE TABLE "before_leases" (key text COLLATE "C" PRIMARY KEY, '
            "a double precision NOT NULL, b double precision NOT NULL, c double precision, "
            "keep_until double precision NOT NULL)"
        )
        admin.execute("INSERT INTO before_leases VALUES ('b', 0.5, %s, NULL, %s)", (T0, T0 + 0.5))
    old.install()
    try:
        assert old.apply("b", Limit(1, 1), 0, T0).remaining == 0  # the row kept
        assert send(old, ["k"], [Concurrency(1)], Hold(1.0), T0).allowed
        assert read_row(old, "k")[3] == [1.0, T0 + 60]
        old.install()  # again: nothing to add
    finally:
        old.close()


def test_installing_beside_a_table_another_role_owns(pg: PostgresServer) -> None:
    # The column is added only when missing: ALTER TABLE needs the owner even
    # then, and the role installing the functions may not own the table.
    owner = PostgresStore(pg.url(), table="owned_elsewhere")
    with pg.admin("limiter") as admin:
        admin.execute(owner.install_sql())
        admin.execute('GRANT SELECT, INSERT, UPDATE, DELETE ON "owned_elsewhere" TO app')
        admin.execute(f"DROP FUNCTION {', '.join(owner.names.functions)}")
    try:
        owner.install()  # as app: the functions anew, the table untouched
        assert send(owner, ["k"], [Concurrency(1)], Hold(1.0), T0).allowed
    finally:
        owner.close()


def row_state(store: PostgresStore, key: str) -> Optional[State]:
    """``key``'s row as the core's state (None: no row)."""
    row = read_row(store, key)
    if row is None:
        return None
    a, b, c, leases, _ = row
    if leases is not None:
        return Leases((*leases, b))
    return complex(a, b) if c is None else (a, b, c)


def test_a_key_of_another_kind_of_policy_is_read_as_step_reads_it(store: PostgresStore) -> None:
    # Another shape's state reads as nothing (limiter.core.state), leases too:
    # the key starts afresh, and its row stays until the new policy writes.
    s = shared(store)
    cases = [
        (["c"], [Limit(1, 5)], 1.0),
        (["c"], [FixedWindow(5, 60)], 1.0),
        (["c"], [SlidingWindow(5, 60)], 0),
        (["b"], [Concurrency(2)], Hold(1.0)),
        (["b"], [Concurrency(2)], 0),
        (["l"], [Concurrency(2)], 0),
        (["b", "c"], [Limit(1, 5), Limit(1, 5)], 1.0),
        (["c", "b"], [Concurrency(2), Concurrency(2)], Hold(1.0, "give")),
        (["b", "c"], [Limit(1, 5), Lockout()], (1.0, 0.0)),
    ]
    for keys, policies, cost in cases:
        with s.pool.connection() as conn:
            conn.execute(f"DELETE FROM {s.names.table}")
            conn.execute(  # a lockout's row, as a breach writes it
                f"INSERT INTO {s.names.table} VALUES (%s, 1e-180, %s, NULL, %s)",
                (row_key("l", s.prefix), T0 + 30, T0 + 30),
            )
        send(s, ["c"], [Concurrency(2)], Hold(1.0), T0)
        s.apply("b", Limit(1, 5), 1, T0)
        states = [row_state(s, k) for k in keys]
        new_states, result = expected(states, T0 + 1, policies, cost)
        assert send(s, keys, policies, cost, T0 + 1) == result, (keys, policies)
        if len(keys) == 1:  # the one key is another kind's: as a new key
            assert result == expected([None], T0 + 1, policies, cost)[1]
        assert [row_state(s, k) for k in keys] == new_states, (keys, policies)


def test_a_plain_cost_on_a_concurrency_policy_is_refused_by_the_function_too(
    store: PostgresStore,
) -> None:
    # The client raises step's TypeError first (rule 5); the function refuses
    # such an argument too, writing nothing.
    s = shared(store)
    with pytest.raises(TypeError, match=r"RateLimiter\.slot"):
        s.apply("k", Concurrency(2), 1.0, T0)
    with pytest.raises(Exception, match="takes slots through"):  # InvalidParameterValue
        call(s, ["k"], f"{T0!r} 1.0 c60.0 2")
    assert read_row(s, "k") is None


@pytest.mark.parametrize("policy", [Limit(1, 5), FixedWindow(3, 60), SlidingWindow(3, 60)])
def test_a_hold_on_another_policy_is_its_value(store: PostgresStore, policy: Any) -> None:
    # As in step: 1.0 for a take, 0.0 for a give or renewal.
    s = shared(store)
    state: Optional[State] = None
    for i, cost in enumerate([Hold(1.0), Hold(1.0, "give"), Hold(2.0, "renew"), Hold(3.0)]):
        state, result = step(state, T0 + i, policy, cost)
        assert s.apply("k", policy, cost, T0 + i) == result
        check_row(s, "k", state)


# -- exact under concurrency --------------------------------------------------------------


def test_four_threads_never_hold_more_than_the_limit(store: PostgresStore) -> None:
    # 4 threads take and give back on one key of Concurrency(3), each with a
    # holder of its own, 150 rounds each: at no moment do more than 3 hold a
    # slot (counted between an admitted take and its give), and all end given back.
    s = shared(store)
    policy = Concurrency(3, lease=600)
    inside = [0]
    most = [0]
    taken = [0]
    lock = threading.Lock()
    errors: List[BaseException] = []
    start = threading.Barrier(4)

    def worker(holder: float) -> None:
        try:
            start.wait()
            for _ in range(150):
                if not send(s, ["k"], [policy], Hold(holder), T0).allowed:
                    continue
                with lock:
                    inside[0] += 1
                    taken[0] += 1
                    most[0] = max(most[0], inside[0])
                with lock:
                    inside[0] -= 1
                assert send(s, ["k"], [policy], Hold(holder, "give"), T0).allowed
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(float(h),)) for h in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert 3 >= most[0] >= 1 and taken[0] >= 150
    assert read_row(s, "k")[3] == []


def test_four_threads_hold_at_most_the_limit_in_the_table(store: PostgresStore) -> None:
    # The server's own count: 4 threads x 40 takes without giving back, holders
    # all different: exactly 3 admitted, whatever the interleaving.
    s = shared(store)
    policy = Concurrency(3, lease=600)
    admitted: List[Tuple[float, bool]] = []
    lock = threading.Lock()

    def worker(base: int) -> None:
        for i in range(40):
            holder = float(base * 100 + i + 1)
            allowed = send(s, ["k"], [policy], Hold(holder), T0).allowed
            with lock:
                admitted.append((holder, allowed))

    threads = [threading.Thread(target=worker, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = sorted(h for h, ok in admitted if ok)
    assert len(held) == 3
    assert sorted(read_row(s, "k")[3][0::2]) == held


@pytest.mark.parametrize("now", [1721096379.737999, 1695610357.464999])
def test_an_epoch_window_moved_back_by_one_where_the_division_rounds_up(
    store: PostgresStore, now: float
) -> None:
    # floor(moment / period) * period lies after the moment (now + epsilon):
    # the window is the one before (epoch_window's k - 1; the function's
    # epochwindow once decremented the key count in its place, and looped).
    s = shared(store)
    window = FixedWindow(1, 0.001)
    state, result = step(None, now, window, 1)
    assert send(s, ["k"], [window], 1, now) == result  # it looped forever
    check_row(s, "k", state)
