"""``SQLiteStore``: bucket state in one SQLite file, shared by the processes of one host.

Each check is one ``BEGIN IMMEDIATE`` transaction (read, ``step`` in Python,
write), serialized across processes by SQLite's write lock.  Guide:
docs/stores.md#sqlite.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, TypeVar, Union

from limiter.backends._failover import Failover
from limiter.clock import finite_seconds
from limiter.core.bucket import step
from limiter.core.costs import Cost, checked_cost, validate_costs
from limiter.core.limits import Policy
from limiter.core.many import step_all
from limiter.core.result import RateLimitResult
from limiter.core.state import State, from_row, keep_until, to_row
from limiter.store import StoreError

T = TypeVar("T")

_SCHEMA = (
    # key is a BLOB (UTF-8, surrogates passed through) so any str is a key.
    # debt, updated_at, extra hold state.to_row(state) (names kept so existing
    # files open; _MIGRATE adds extra); full_at is keep_until, for the purge.
    "CREATE TABLE IF NOT EXISTS limiter_buckets ("
    " key BLOB PRIMARY KEY, debt REAL NOT NULL, updated_at REAL NOT NULL,"
    " full_at REAL NOT NULL, extra REAL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS limiter_buckets_full_at ON limiter_buckets (full_at)",
)
_MIGRATE = "ALTER TABLE limiter_buckets ADD COLUMN extra REAL"
_SELECT = "SELECT debt, updated_at, extra FROM limiter_buckets WHERE key = ?"
_UPSERT = (
    "INSERT OR REPLACE INTO limiter_buckets (key, debt, updated_at, extra, full_at)"
    " VALUES (?,?,?,?,?)"
)
_PURGE = "DELETE FROM limiter_buckets WHERE full_at <= ?"
# The construction check writes and deletes this key: 0xFF is never in UTF-8,
# so it is no store key's blob.
_PROBE_KEY = b"\xff"
_DELETE = "DELETE FROM limiter_buckets WHERE key = ?"
_COUNT = "SELECT count(*) FROM limiter_buckets"


def _unusable(path: str, directory: str, exc: sqlite3.Error) -> Optional[OSError]:
    """The ``OSError`` for a database that cannot work, or ``None`` when it is only busy."""
    reason = str(exc)
    text = reason.lower()
    if "locked" in text or "busy" in text:
        return None
    if "readonly" in text or "read-only" in text:
        return PermissionError(
            errno.EACCES,
            f"SQLiteStore: the database is read-only for this process ({reason}); the file "
            "and its directory must be writable (WAL mode keeps -wal and -shm files beside it)",
            path,
        )
    if "not a database" in text or "malformed" in text:
        return OSError(f"SQLiteStore: {path!r} is not a usable SQLite database ({reason})")
    if "unable to open" in text:
        if os.path.exists(path):
            if not os.access(path, os.R_OK | os.W_OK):
                return PermissionError(
                    errno.EACCES, f"SQLiteStore: no read and write permission ({reason})", path
                )
        elif not os.access(directory, os.W_OK | os.X_OK):
            return PermissionError(
                errno.EACCES,
                f"SQLiteStore: cannot create the database: no write permission on {directory!r}"
                f" ({reason})",
                path,
            )
    return OSError(f"SQLiteStore: cannot use the database {path!r} ({reason})")


class SQLiteStore:
    """Bucket state in an SQLite database file.  Implements ``Store`` and ``AsyncStore``.

    ``path``: the file, created if missing (the same in every worker;
    ``":memory:"`` is private to one process).  ``timeout``: seconds a check
    waits for the write lock before ``StoreError`` (default 5).
    ``purge_every``: writes between deletions of full buckets.  ``fallback``,
    ``probe_after``, ``max_probe_after``, ``probe_clock``: as for ``RedisStore``.
    The constructor writes once, so a path that can never work raises an
    ``OSError`` naming it (``FileNotFoundError``, ``PermissionError``, ...);
    later failures are ``StoreError``, the first of each outage logged at
    ERROR on ``limiter.stores``.  Guide: docs/stores.md#sqlite.
    """

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        *,
        timeout: float = 5.0,
        purge_every: int = 1000,
        fallback: Optional[Any] = None,
        probe_after: float = 0.5,
        max_probe_after: float = 30.0,
        probe_clock: Optional[Any] = None,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
            raise TypeError(f"path must be a str or an os.PathLike of str, got {path!r:.100}")
        if not 0 <= finite_seconds(timeout, "timeout") <= threading.TIMEOUT_MAX:
            # (a lock's wait takes at most TIMEOUT_MAX: OverflowError at every call beyond)
            raise ValueError(
                f"timeout must be a finite number of seconds >= 0 and <= threading.TIMEOUT_MAX "
                f"({threading.TIMEOUT_MAX:g}), got {timeout!r}"
            )
        if isinstance(purge_every, bool) or not isinstance(purge_every, int):
            raise TypeError(f"purge_every must be an int, got {purge_every!r:.100}")
        if purge_every < 1:
            raise ValueError(f"purge_every must be an int >= 1, got {purge_every!r}")
        self.path: str = os.fspath(path)
        self.timeout = float(timeout)
        self.purge_every = purge_every
        self.fallback: Any = fallback
        # Every operation but clear goes through it: the database, or the fallback.
        self._failover = Failover(
            "SQLiteStore", fallback, probe_after, max_probe_after, probe_clock
        )
        self._lock = threading.Lock()
        self._conn: Optional[sqlite3.Connection] = None
        self._pid = os.getpid()
        self._writes = 0
        self._check_database()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, timeout={self.timeout!r}, fallback={self.fallback!r})"

    @property
    def using_fallback(self) -> bool:
        """True while the database fails and the fallback answers."""
        return self._failover.using_fallback

    def apply(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``; ``now`` in seconds (``None``: ``time.time()``)."""
        # Before any lock: a bad cost or key costs nothing, and never reaches the
        # fallback.  A Refund (negative on purpose) and a Charge pass as they are:
        # step settles them.
        checked = checked_cost(cost)
        blobs = [self._blob(key)]
        result: RateLimitResult = self._failover.run(
            lambda: self._run(self._transact, False, blobs, [limit], checked, now),
            lambda: self.fallback.apply(key, limit, cost, now),
        )
        return result

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """Charge ``cost`` to every ``keys[i]`` under ``limits[i]``, or none (one transaction).

        ``cost``: one for every limit, or a list or tuple of one per limit; a
        ``Lockout`` may come last (``limiter.core.many.step_all``).
        """
        if len(keys) != len(limits) or not keys:
            raise ValueError(f"need one key per limit and at least one limit, got {len(limits)}")
        checked = validate_costs(cost, len(limits))  # before any lock, as in apply
        blobs = [self._blob(key) for key in keys]
        result: RateLimitResult = self._failover.run(
            lambda: self._run(self._transact, True, blobs, limits, checked, now),
            lambda: self.fallback.apply_many(keys, limits, cost, now),
        )
        return result

    def reset(self, key: str) -> None:
        """Forget ``key``, in the fallback too; ``StoreError`` when the database fails.

        The database is tried even while the fallback answers checks: a reset
        must not succeed silently and leave the shared bucket as it was.
        """
        blob = self._blob(key)
        if self.fallback is not None:
            self.fallback.reset(key)
        self._failover.run(lambda: self._run(lambda conn: conn.execute(_DELETE, (blob,))))

    def clear(self) -> None:
        """Forget every key."""
        self._run(lambda conn: conn.execute("DELETE FROM limiter_buckets"))

    def close(self) -> None:
        """Close this process's connection (the next check reopens it)."""
        lock = self._locked()
        try:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
        finally:
            lock.release()

    def __len__(self) -> int:
        return self._run(lambda conn: int(conn.execute(_COUNT).fetchone()[0]))

    async def aapply(
        self, key: str, limit: Policy, cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """``apply`` in a worker thread, so waiting for the lock never blocks the loop."""
        return await _in_thread(self.apply, key, limit, cost, now)

    async def aapply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """``apply_many`` in a worker thread."""
        return await _in_thread(self.apply_many, keys, limits, cost, now)

    async def areset(self, key: str) -> None:
        """``reset`` in a worker thread."""
        await _in_thread(self.reset, key)

    @staticmethod
    def _blob(key: str) -> bytes:
        if not isinstance(key, str):
            raise ValueError(f"key must be a str, got {key!r:.100}")
        return key.encode("utf-8", "surrogatepass")

    def _locked(self, deadline: Optional[float] = None) -> threading.Lock:
        """This process's lock, acquired (by ``deadline`` on ``time.monotonic``).

        A lock not free by then is a ``StoreError``: threads queued behind a
        locked database must not each wait their own ``timeout`` in turn.
        """
        if self._pid != os.getpid():
            # A forked child: the parent's connection and lock are not ours (the
            # lock may even have been held by a thread that does not exist here).
            self._pid = os.getpid()
            self._conn = None
            self._lock = threading.Lock()
        lock = self._lock
        if deadline is None:
            lock.acquire()
        elif not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise StoreError(
                f"SQLiteStore: the database stayed locked for {self.timeout:g} s (timeout)"
            )
        return lock

    def _open(self) -> sqlite3.Connection:
        """A new connection, in WAL mode, with the table created."""
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            for statement in _SCHEMA:
                conn.execute(statement)
            columns = [row[1] for row in conn.execute("PRAGMA table_info(limiter_buckets)")]
            if "extra" not in columns:
                try:
                    conn.execute(_MIGRATE)
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):  # another process just added it
                        raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_database(self) -> None:
        """Open the database and write to it once, at construction.

        A store that can never work raises ``OSError`` here, naming the path; a
        busy database passes.  The connection is closed again, so a store made
        before a fork carries none into the children.
        """
        path = self.path
        if path in ("", ":memory:"):  # private to this connection: nothing to check
            return
        if os.path.isdir(path):
            raise IsADirectoryError(
                errno.EISDIR, "SQLiteStore: the database path is a directory", path
            )
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            if os.path.exists(directory):
                raise NotADirectoryError(
                    errno.ENOTDIR, f"SQLiteStore: {directory!r} is not a directory", path
                )
            raise FileNotFoundError(
                errno.ENOENT, f"SQLiteStore: the directory {directory!r} does not exist", path
            )
        try:
            conn = self._open()
            try:
                # A real write: a read-only file in WAL mode opens and even
                # begins a write transaction, and only fails when it commits.
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(_UPSERT, (_PROBE_KEY, 0, 0, None, 0))
                conn.execute(_DELETE, (_PROBE_KEY,))
                conn.execute("COMMIT")
            finally:
                conn.close()  # rolls back what is not committed
        except sqlite3.Error as exc:
            error = _unusable(path, directory, exc)
            if error is not None:
                raise error from exc

    def _run(self, operation: Callable[..., T], *args: Any) -> T:
        """``operation(connection, *args)`` under this process's lock; errors are ``StoreError``.

        SQLite skips its busy handler in a few WAL corners and reports "locked"
        at once: those are retried within the timeout, the lock released between.
        """
        deadline = time.monotonic() + self.timeout
        pause = 0.001
        while True:
            lock = self._locked(deadline)
            try:
                conn = self._conn
                if conn is None:
                    conn = self._conn = self._open()
                left = deadline - time.monotonic()
                if left < self.timeout - 0.001:  # waited for the lock: less for SQLite
                    conn.execute(f"PRAGMA busy_timeout = {max(0, int(left * 1000))}")
                    try:
                        return operation(conn, *args)
                    finally:
                        conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
                return operation(conn, *args)
            except sqlite3.Error as exc:
                busy = isinstance(exc, sqlite3.OperationalError) and (
                    "locked" in str(exc) or "busy" in str(exc)
                )
                if not busy or time.monotonic() + pause > deadline:
                    raise StoreError(f"SQLiteStore: {type(exc).__name__}: {exc}") from exc
            finally:
                lock.release()
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _transact(
        self,
        conn: sqlite3.Connection,
        many: bool,
        blobs: List[bytes],
        limits: Sequence[Policy],
        cost: Cost,
        now: Optional[float],
    ) -> RateLimitResult:
        """One transaction: read the states, ``step_all`` (``step`` unless ``many``), write
        what changed; a row no store wrote (corrupt) is a ``StoreError``."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if now is None:
                # Read under the write lock, after any wait for it: a reading
                # taken before a long wait would look like a clock stepped back.
                now = time.time()
            states: List[Optional[State]] = []
            for blob in blobs:
                row = conn.execute(_SELECT, (blob,)).fetchone()
                try:
                    states.append(None if row is None else from_row(*row))
                except (TypeError, ValueError):
                    corrupt = f"SQLiteStore: corrupt state for key {blob!r:.100}: {row!r:.100}"
                    raise StoreError(corrupt) from None
            if many:
                new_states, result = step_all(states, now, limits, cost)
            else:
                new_state, result = step(states[0], now, limits[0], cost)  # type: ignore[arg-type]
                new_states = [new_state]
            writes = 0
            for blob, old, new in zip(blobs, states, new_states):
                if new is not old and new is not None:
                    conn.execute(_UPSERT, (blob, *to_row(new), keep_until(new)))
                    writes += 1
            purge = self._writes + writes >= self.purge_every
            if purge:
                conn.execute(_PURGE, (now,))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._writes = 0 if purge else self._writes + writes
        return result


async def _in_thread(function: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)
