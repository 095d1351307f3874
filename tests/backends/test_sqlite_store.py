"""SQLiteStore: the conformance suite, several processes on one file, purge, failures."""

from __future__ import annotations

import math
import multiprocessing
import os
import sqlite3
import threading
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence

import pytest

from limiter import (
    Charge,
    FixedWindow,
    Limit,
    Lockout,
    ManualClock,
    MemoryStore,
    RateLimiter,
    SlidingWindow,
    StoreError,
)
from limiter.backends.sqlite import SQLiteStore
from limiter.testing import T0
from limiter.testing._store_suite import StoreConformance


class TestSQLiteStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _dir(self, tmp_path: Path) -> None:
        self.path = tmp_path / "limits.db"

    def make_store(self) -> SQLiteStore:
        return SQLiteStore(self.path)

    def close_store(self, store: SQLiteStore) -> None:
        store.close()


class TestSQLiteStoreAsync(TestSQLiteStore):
    mode = "async"


class TestSQLiteStoreTwoHandles(TestSQLiteStore):
    """Checks alternate between two stores (two connections) on one file: same answers."""

    class _Alternating:
        def __init__(self, path: Path) -> None:
            self.stores = [SQLiteStore(path), SQLiteStore(path)]
            self.turn = 0

        def __getattr__(self, name: str) -> Any:
            self.turn ^= 1
            return getattr(self.stores[self.turn], name)

    def make_store(self) -> Any:
        return self._Alternating(self.path)

    def close_store(self, store: Any) -> None:
        for s in store.stores:
            s.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "limits.db")
    yield s
    s.close()


def test_wal_mode_and_schema(store: SQLiteStore) -> None:
    store.apply("k", Limit(1, 5), 1, T0)
    conn = sqlite3.connect(store.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT debt, updated_at, full_at FROM limiter_buckets").fetchall() == [
            (1.0, T0, T0 + 1.0)
        ]
    finally:
        conn.close()


def test_full_buckets_are_purged(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "limits.db", purge_every=10)
    limit = Limit(1, 5)
    for i in range(9):
        store.apply(f"old{i}", limit, 1, T0)  # full again at T0 + 1
    assert len(store) == 9
    store.apply("slow", Limit(0.001, 5), 1, T0 + 2)  # the 10th write purges
    assert len(store) == 1
    # Purging changed no decision: a purged key is a full bucket.
    assert store.apply("old0", limit, 0, T0 + 2).remaining == 5
    store.close()


def test_full_at_of_a_debt_and_of_a_lockout_is_their_end(tmp_path: Path) -> None:
    # The purge deletes rows whose full_at has passed: for a bucket in debt
    # that is when it is full again; for a lockout's run or lock, its end.
    store = SQLiteStore(tmp_path / "limits.db", purge_every=1)
    limit, lockout = Limit(1, 2), Lockout(breaches=2, within=10, duration=60)
    assert store.apply("debt", limit, Charge(3), T0).allowed  # 1 token owed: full at T0 + 3
    keys, limits = ["{u}:bucket", "{u}:lock"], (Limit(1, 1), lockout)
    assert store.apply_many(keys, limits, 1, T0).allowed
    assert not store.apply_many(keys, limits, 1, T0).allowed  # a run of breaches until T0 + 10
    conn = sqlite3.connect(store.path)
    try:

        def full_at() -> Dict[bytes, float]:
            return dict(conn.execute("SELECT key, full_at FROM limiter_buckets").fetchall())

        assert full_at() == {b"debt": T0 + 3, b"{u}:bucket": T0 + 1, b"{u}:lock": T0 + 10}
        assert store.apply_many(keys, limits, 1, T0 + 0.5).locked_out  # locked until T0 + 60.5
        assert full_at()[b"{u}:lock"] == T0 + 60.5
        # Every write purges what is full again: the lock stays until its end.
        store.apply("other", limit, 1, T0 + 60)
        assert sorted(full_at()) == [b"other", b"{u}:lock"]
        assert store.apply_many(keys, limits, 1, T0 + 60).locked_out
        store.apply("other", limit, 1, T0 + 60.5)
        assert sorted(full_at()) == [b"other"]
        assert store.apply_many(keys, limits, 1, T0 + 60.5).allowed  # purged: no lockout
    finally:
        conn.close()
        store.close()


def test_locked_database_is_a_store_error_and_state_survives(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "limits.db", timeout=0.05)
    assert store.apply("k", Limit(1, 2), 1, T0).allowed
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(StoreError, match="locked"):
            store.apply("k", Limit(1, 2), 1, T0)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert store.apply("k", Limit(1, 2), 0, T0).remaining == 1
    store.close()


def test_fallback_while_locked(tmp_path: Path) -> None:
    probes = ManualClock()
    fallback = MemoryStore()
    store = SQLiteStore(tmp_path / "limits.db", timeout=0.01, fallback=fallback, probe_clock=probes)
    limit = Limit(1, 3)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    store.apply("warm", limit, 1, T0)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        # Per-process limiting from the fallback: exactly the burst.
        assert [store.apply("k", limit, 1, T0).allowed for _ in range(4)] == [1, 1, 1, 0]
        assert store.using_fallback
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert store.apply("k", limit, 0, T0).remaining == 0  # still the fallback: no probe due
    probes.advance(0.5)
    assert store.apply("k", limit, 0, T0).remaining == 3  # probed, back on the file
    assert not store.using_fallback
    store.close()


def test_a_missing_directory_fails_at_construction(tmp_path: Path) -> None:
    # Loud at start-up (issue 9): it used to construct, then fail open per request.
    with pytest.raises(FileNotFoundError, match=r"no/such/dir/limits\.db"):
        SQLiteStore(tmp_path / "no" / "such" / "dir" / "limits.db")


def test_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="timeout"):
        SQLiteStore(tmp_path / "x.db", timeout=-1)
    with pytest.raises(ValueError, match="purge_every"):
        SQLiteStore(tmp_path / "x.db", purge_every=0)
    store = SQLiteStore(tmp_path / "x.db")
    assert "x.db" in repr(store)
    with pytest.raises(ValueError, match="one key per limit"):
        store.apply_many(["a", "b"], [Limit(1, 1)], 1, T0)
    store.close()


def test_threads_and_a_limiter_share_one_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "limits.db")
    limiter = RateLimiter(Limit(0.001, 30), store=store, clock=ManualClock(T0))
    admitted = []

    def worker() -> None:
        admitted.append(sum(limiter.allow("hot") for _ in range(20)))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 30
    store.close()


def hammer(path: str, checks: int, start: Any, policies: Sequence[Any]) -> int:
    store = SQLiteStore(path, timeout=30)
    keys = [f"{{hot}}:{i}" for i in range(len(policies))]
    start.wait()
    admitted = sum(store.apply_many(keys, policies, 1, T0).allowed for _ in range(checks))
    store.close()
    return admitted


@pytest.mark.parametrize(
    "policies",
    [
        [Limit(0.001, 100)],  # a frozen clock: nothing refills
        [FixedWindow(100, 3600)],
        [SlidingWindow(100, 3600)],
        [FixedWindow(100, 3600, anchor="first"), SlidingWindow(60, 3600), Limit(0.001, 80)],
    ],
    ids=["bucket", "fixed-window", "sliding-window", "all-three"],
)
def test_four_processes_admit_exactly(tmp_path: Path, policies: List[Any]) -> None:
    path = str(tmp_path / "limits.db")
    SQLiteStore(path).close()  # create the file and schema once
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        start = manager.Event()
        with ctx.Pool(4) as pool:
            pending = [pool.apply_async(hammer, (path, 500, start, policies)) for _ in range(4)]
            start.set()
            admitted = [p.get(120) for p in pending]
    least = min(p.burst for p in policies)
    assert sum(admitted) == least
    store = SQLiteStore(path)
    keys = [f"{{hot}}:{i}" for i in range(len(policies))]
    peek = store.apply_many(keys, policies, 0, T0)
    # Every refusal took nothing: each policy counts exactly the admitted ones.
    assert [r.remaining for r in (peek.results or (peek,))] == [p.burst - least for p in policies]
    store.close()


def test_a_file_made_before_the_extra_column_opens_and_stores_sliding_windows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE limiter_buckets (key BLOB PRIMARY KEY, debt REAL NOT NULL,"
        " updated_at REAL NOT NULL, full_at REAL NOT NULL) WITHOUT ROWID"
    )
    conn.execute("CREATE INDEX limiter_buckets_full_at ON limiter_buckets (full_at)")
    # A bucket of Limit(1, 5) that took 3 tokens at T0: 3 s of refill owed.
    conn.execute("INSERT INTO limiter_buckets VALUES (?, ?, ?, ?)", (b"old", 3.0, T0, T0 + 3))
    conn.commit()
    conn.close()
    store, again = SQLiteStore(path), SQLiteStore(path)  # two processes' handles
    assert store.apply("old", Limit(1, 5), 0, T0 + 1).remaining == 3  # its row was kept
    sliding = SlidingWindow(3, 60)  # T0 is 20 s into a minute: forgotten at T0 + 100
    assert [store.apply("s", sliding, 1, T0).allowed for _ in range(4)] == [True] * 3 + [False]
    assert again.apply("s", sliding, 1, T0 + 39).retry_after == pytest.approx(1.0, abs=1e-6)
    assert again.apply("s", sliding, 1, T0 + 55).allowed  # 3 * 45/60 = 2.25, rounded down
    conn = sqlite3.connect(path)
    try:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(limiter_buckets)")]
        assert columns == ["key", "debt", "updated_at", "full_at", "extra"]
        rows = {
            key: rest
            for key, *rest in conn.execute(
                "SELECT key, debt, updated_at, extra, full_at FROM limiter_buckets"
            )
        }
        assert rows == {
            b"old": [3.0, T0, None, T0 + 3],
            b"s": [3.0, 1.0, T0 + 160, T0 + 160],  # (previous, current, until), full_at = until
        }
    finally:
        conn.close()
    assert len(store) == 2
    store.close()
    again.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
# Forking a process that already holds a store is what gunicorn --preload does;
# the child touches nothing but the store, so the 3.12+ warning about forking
# a multi-threaded test process (other tests' daemon threads) does not apply.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "limits.db")
    limit = Limit(0.001, 10)
    assert store.apply("k", limit, 4, T0).allowed  # the parent has a connection now
    # The child inherits the store, its open connection and its lock (unpicklable).
    child = multiprocessing.get_context("fork").Process(target=_child_peek, args=(store, limit))
    child.start()
    child.join(30)
    assert child.exitcode == 6  # the child's peek: 10 - 4 tokens
    assert store.apply("k", limit, 6, T0).allowed
    store.close()


def _child_peek(store: SQLiteStore, limit: Limit) -> None:
    os._exit(store.apply("k", limit, 0, T0).remaining)


def test_any_cost_is_checked_before_the_transaction(tmp_path: Path) -> None:
    # Issue 9: a 400-digit cost raised OverflowError out of the store (and the
    # middleware then let the request in).  Now: denied, nothing written; a
    # wrong type or value raises before any lock is taken.
    store = SQLiteStore(tmp_path / "x.db", timeout=0.05)
    limit = Limit(1, 2)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    store.apply("warm", limit, 0, T0)  # creates the schema
    blocker.execute("BEGIN IMMEDIATE")  # the write lock is taken elsewhere
    try:
        with pytest.raises(TypeError, match="cost must be a number of tokens, got '1'"):
            store.apply("k", limit, "1", T0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="cost must be a number of tokens >= 0, got -1"):
            store.apply_many(["a", "b"], [limit, limit], -1, T0)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    for cost in (10**400, Decimal("1e999"), Fraction(10**400, 3), float("inf")):
        result = store.apply("k", limit, cost, T0)  # type: ignore[arg-type]
        assert (result.allowed, result.remaining, result.retry_after) == (False, 2, math.inf)
    assert store.apply("k", limit, Decimal("1.5"), T0).remaining == 0  # type: ignore[arg-type]
    assert len(store) == 1
    store.close()


def test_store_time_is_read_inside_the_transaction(tmp_path: Path) -> None:
    """``now=None`` is read after BEGIN: a long wait for the lock is no backward clock."""
    import time

    store = SQLiteStore(tmp_path / "limits.db", timeout=5)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    results: list = []
    waiter = threading.Thread(target=lambda: results.append(store.apply("k", Limit(1, 3), 1, None)))
    waiter.start()
    time.sleep(0.3)
    released = time.time()
    blocker.execute("ROLLBACK")
    waiter.join()
    blocker.close()
    with sqlite3.connect(store.path) as conn:
        [(updated_at,)] = conn.execute("SELECT updated_at FROM limiter_buckets").fetchall()
    assert results[0].allowed and updated_at >= released
    store.close()


def test_a_corrupt_row_is_a_store_error_and_goes_to_the_fallback(tmp_path: Path) -> None:
    # It raised TypeError from complex(): no fallback, and a 500 on every request.
    path = tmp_path / "corrupt.db"
    store = SQLiteStore(path)
    assert store.apply("k", Limit(1, 5), 1, T0).allowed
    conn = sqlite3.connect(str(path))
    with conn:
        conn.execute("UPDATE limiter_buckets SET debt = 'garbage'")
    conn.close()
    with pytest.raises(StoreError, match="corrupt state"):
        store.apply("k", Limit(1, 5), 1, T0)
    guarded = SQLiteStore(path, fallback=MemoryStore())
    assert guarded.apply("k", Limit(1, 5), 1, T0).remaining == 4  # the fallback answers
    assert guarded.using_fallback
    store.close()
    guarded.close()


def test_threads_queued_on_a_locked_database_each_wait_one_timeout(tmp_path: Path) -> None:
    # Each thread used to hold the process lock for its whole busy wait, so the
    # Nth waited N timeouts (6 threads, 0.3 s: the last one 1.8 s).
    path = tmp_path / "locked.db"
    store = SQLiteStore(path, timeout=0.3)
    blocker = sqlite3.connect(str(path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    waits: List[float] = []
    errors: List[BaseException] = []

    def check() -> None:
        start = time.monotonic()
        try:
            store.apply("k", Limit(1, 5), 1, T0)
        except StoreError as exc:
            errors.append(exc)
        waits.append(time.monotonic() - start)

    threads = [threading.Thread(target=check) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    blocker.execute("ROLLBACK")
    blocker.close()
    assert len(errors) == 6
    assert max(waits) < 1.2  # about one timeout each (0.3 s), however many queue
    assert store.apply("k", Limit(1, 5), 1, T0).remaining == 4  # the lock is free again
    store.close()
