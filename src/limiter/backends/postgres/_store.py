"""PostgreSQL stores: one statement, ``SELECT <table>_apply_v6(keys, argv)``, per check.

psycopg is imported lazily; the argument and reply are the Redis script's
(``limiter.backends._wire``), the SQL is ``_sql``'s.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import re
import threading
import weakref
from typing import Any, Iterator, Optional, Sequence, Tuple

from limiter.backends._failover import Failover
from limiter.backends._shell import AsyncStoreShell, StoreShell
from limiter.backends._url import redact_url
from limiter.backends._wire import Argv, decode_result
from limiter.backends.postgres import _sql
from limiter.backends.postgres._libpq import connection_class, execute_prepared
from limiter.core.costs import Cost
from limiter.core.limits import Limit
from limiter.store import PoolFullError, StoreError

# A key is stored as text, which cannot hold NUL or a lone surrogate: those,
# and "%" (so that the mapping stays one-to-one), are written %XXXX.
_SPECIAL = re.compile("[%\x00\ud800-\udfff]")
_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)

#: Bytes of a row key kept as is (its prefix and key): a longer key's row is its hash.
MAX_ROW_KEY = 2048

# ping(): a peek at a key no caller uses (a peek writes nothing).
_PING_KEY = "\x00limiter.ping\x00"
_PING_LIMIT = Limit(1, 1)


def _escape(match: Any) -> str:
    return f"%{ord(match.group()):04X}"


def row_key(key: str, prefix: str = "") -> str:
    """The ``key`` column of ``key``'s row, one-to-one for any str; ``ValueError`` for a non-str.

    A row key over ``MAX_ROW_KEY`` bytes is ``prefix`` and the SHA-256 of the rest.
    """
    if not isinstance(key, str):
        raise ValueError(f"key must be a str, got {key!r:.100}")
    if _SPECIAL.search(key) is not None:
        key = _SPECIAL.sub(_escape, key)
    row = prefix + key
    # A str of n characters is at most 4n bytes: most keys skip the encoding.
    if len(row) > MAX_ROW_KEY // 4 and len(row.encode("utf-8")) > MAX_ROW_KEY:
        # The primary key's btree refuses an entry over about 2.7 kB, failing every
        # check of that key.  "%H" appears in no escaped key: no short row is hit.
        return prefix + "%H" + hashlib.sha256(key.encode("utf-8")).hexdigest()
    return row


class _PostgresBase:
    """What the sync and asyncio stores share: options, names, arguments, fallback."""

    _kind = "PostgresStore"
    _asyncio = False

    def __init__(
        self,
        conninfo: Any,
        *,
        table: str = "limiter",
        prefix: str = "",
        server_time: bool = True,
        create: bool = True,
        unlogged: bool = False,
        synchronous_commit: bool = False,
        fallback: Optional[Any] = None,
        probe_after: float = 0.5,
        max_probe_after: float = 30.0,
        probe_clock: Optional[Any] = None,
        max_connections: int = 10,
        pool_timeout: float = 1.0,
    ) -> None:
        if isinstance(conninfo, str):
            self.pool: Any = None  # ours, made at first use (and again after close())
            self.conninfo: Optional[str] = conninfo
            self._secret = _password_of(conninfo, self._kind)
        elif callable(getattr(conninfo, "connection", None)):
            self.pool, self.conninfo, self._secret = conninfo, None, None
        else:
            raise TypeError(
                f"{self._kind} takes a connection string or a psycopg_pool pool, "
                f"got {conninfo!r:.100}"
            )
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {prefix!r:.100}")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise TypeError(f"max_connections must be an int, got {max_connections!r:.100}")
        switches = dict(server_time=server_time, create=create, unlogged=unlogged)
        for flag, value in {**switches, "synchronous_commit": synchronous_commit}.items():
            if not isinstance(value, bool):  # "no" would be truthy
                raise TypeError(f"{flag} must be True or False, got {value!r:.100}")
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections!r}")
        # > 0: else every check would time out at once (a StoreError, the fail-open path).
        self.pool_timeout = _sql.seconds(pool_timeout, "pool_timeout", "> 0")
        self.names = _sql.names(table)
        self.table = table
        self.prefix = row_key(prefix)
        self.create = create
        self.unlogged = unlogged
        self.synchronous_commit = synchronous_commit
        self.max_connections = max_connections
        self.fallback: Any = fallback
        self._argv = Argv(server_time)
        self._apply = _sql.apply_sql(self.names, synchronous_commit)
        self._statement = _sql.apply_statement(self.names, synchronous_commit)
        self._ready = False  # installed (or found installed) since the pool was made
        self._refused: Optional[BaseException] = None  # why our pool's last connect failed
        self._failover = Failover(
            self._kind, fallback, probe_after, max_probe_after, probe_clock, asyncio=self._asyncio
        )

    def __repr__(self) -> str:
        shown, conninfo = self.pool, self.conninfo
        if conninfo is not None:  # a URL, or key=value pairs
            shown = redact_url(conninfo) if "://" in conninfo else _PASSWORD.sub(r"\1***", conninfo)
        return (
            f"{type(self).__name__}({shown!r}, table={self.table!r}, prefix={self.prefix!r}, "
            f"server_time={self._argv.server_time!r}, fallback={self.fallback!r})"
        )

    def install_sql(self) -> str:
        """The SQL ``install()`` runs, for a DBA to run where the application may not."""
        return _sql.install_sql(self.names, self.unlogged)

    def _key(self, key: str) -> str:
        return row_key(key, self.prefix)

    def _one(self, key: str, limit: Any, cost: Cost, now: Optional[float]) -> Tuple[bytes, bytes]:
        """The parameters of an ``apply`` call (``apply_sql``'s), or its error before any I/O."""
        return _sql.array_literal((self._key(key),)), self._argv.args((limit,), cost, now)[0]

    def _many(
        self, keys: Sequence[str], limits: Sequence[Any], cost: Cost, now: Optional[float]
    ) -> Tuple[bytes, bytes]:
        """The parameters of an ``apply_many`` call, or its error before any I/O."""
        if len(keys) != len(limits) or not keys:
            raise ValueError(f"need one key per limit and at least one limit, got {len(limits)}")
        rows = [self._key(k) for k in keys]
        return _sql.array_literal(rows), self._argv.many(limits, cost, now)[0]

    def _ping_params(self) -> Tuple[bytes, str]:
        keys, argv = self._one(_PING_KEY, _PING_LIMIT, 0, None)
        return keys, argv.decode("ascii")

    def _verdict(self, row: Any) -> None:
        """``ping``'s verdict on ``ping_sql``'s row: ``StoreError`` if checks cannot run."""
        decode_result(row[0], _PING_LIMIT, self._kind)
        why = _sql.ping_problem(row, self.names)
        if why is not None:
            raise StoreError(f"{self._kind}: {why}")

    def _error(self, exc: BaseException) -> Exception:
        """``exc`` as a ``StoreError``, or a ``PoolFullError`` when every connection
        of the pool was in use for ``pool_timeout`` (a local limit, not an outage)."""
        timed_out = type(exc).__name__ == "PoolTimeout"
        # Full: the pool holds its most and none is free.  A pool that cannot reach
        # the server holds fewer, and that timeout is the server's.
        stats = self.pool.get_stats() if timed_out and self.pool is not None else {}
        if stats and stats["pool_size"] >= stats["pool_max"] and not stats["pool_available"]:
            return PoolFullError(
                f"{self._kind}: no connection of the pool came free in time: "
                f"all {stats['pool_max']} are in use (max_connections)"
            )
        text = f"{self._kind}: {type(exc).__name__}: {exc}".strip()
        refused = self._refused if timed_out else None
        if refused is not None:
            text += f" (the last connection attempt: {type(refused).__name__}: {refused})"
        if self._secret:
            text = text.replace(self._secret, "***")
        if type(exc).__name__ == "UndefinedFunction":
            text += f" (run install(), or the SQL of install_sql(), to create {self.names.apply})"
        return StoreError(text)

    def _pool_options(self) -> dict:  # type: ignore[type-arg]
        ref = weakref.ref(self)

        def remember(exc: Optional[BaseException]) -> None:
            store = ref()
            if store is not None:
                store._refused = exc

        return dict(
            connection_class=connection_class(self._asyncio, remember),
            min_size=1,
            max_size=self.max_connections,
            timeout=self.pool_timeout,
            kwargs={"autocommit": True},
            open=False,
            name=f"limiter-{self.table}",
        )

    def _missing(self, row: Tuple[bool, Optional[str]]) -> Optional[str]:
        """What ``installed_sql``'s ``row`` says is missing (table or function, or outdated),
        or ``None``; ``StoreError`` if something is and the store may not create it."""
        table_exists, comment = row
        if not table_exists:
            why = f"the table {self.names.table} does not exist"
        elif comment is None:
            why = f"the function {self.names.apply} does not exist"
        elif comment != _sql.fingerprint(self.names):
            why = f"the function {self.names.apply} is not this version's ({comment!r})"
        else:
            return None
        if not self.create:
            raise self._not_installed(why, None)
        return why

    @contextlib.contextmanager
    def _errors(self, installing: Optional[str] = None) -> Iterator[None]:
        """Any failure in the block as a ``StoreError`` (``installing``: what was missing)."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            if installing is not None:
                raise self._not_installed(installing, exc) from exc
            raise self._error(exc) from exc

    def _not_installed(self, why: str, cause: Optional[BaseException]) -> StoreError:
        return StoreError(
            f"{self._kind}: {why}"
            + (f" and it could not be installed ({type(cause).__name__}: {cause})" if cause else "")
            + "; run install() as a role that may create it, or the SQL of install_sql()"
        )


def _password_of(conninfo: str, kind: str) -> Optional[str]:
    """The password in ``conninfo``, to scrub from messages (``None``: none, or no psycopg);
    ``ValueError`` if libpq cannot parse ``conninfo``."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None
    try:
        password = conninfo_to_dict(conninfo).get("password")
    except Exception:
        # Else every connection attempt fails, and libpq's message (in the pool's
        # log) quotes where it stopped: often inside the password.  Not chained.
        shown = f" ({redact_url(conninfo)!r})" if "://" in conninfo else ""
        raise ValueError(
            f"{kind}: libpq cannot parse the connection string{shown}: percent-encode a "
            "URL's special characters, quote a key=value string's values holding spaces, "
            "quotes or backslashes ('...'); psycopg.conninfo.make_conninfo does both"
        ) from None
    return str(password) if password else None


def _install(conn: Any, store: _PostgresBase) -> None:
    """Run ``install()``'s statements on ``conn`` (sync), in one transaction."""
    with conn.transaction():
        for statement in _sql.install_statements(store.names, store.unlogged):
            conn.execute(statement)


async def _ainstall(conn: Any, store: _PostgresBase) -> None:
    """``_install`` on an ``AsyncConnection``."""
    async with conn.transaction():
        for statement in _sql.install_statements(store.names, store.unlogged):
            await conn.execute(statement)


class PostgresStore(_PostgresBase, StoreShell):
    """Policy state in a PostgreSQL table, for many processes and hosts.  Implements ``Store``.

    ``conninfo``: a connection string (the store pools up to
    ``max_connections``, waiting ``pool_timeout`` seconds for one) or a
    ``psycopg_pool.ConnectionPool``.  ``table``: ``"name"`` or
    ``"schema.name"``; ``prefix``: prepended to every key.  ``create``:
    ``install()`` at first use when missing; ``unlogged``: an UNLOGGED table.
    ``synchronous_commit`` False (default): checks commit without waiting for
    the WAL (a crash may lose the last ~0.6 s of decisions).  ``server_time``,
    ``fallback``, ``probe_after``, ``max_probe_after``, ``probe_clock``: as for
    ``RedisStore``.  Every failure is a ``StoreError`` wrapping the cause; a bad
    option or connection string is a ``TypeError``/``ValueError`` naming it
    (no password shown).  Guide: docs/stores.md#postgresql.
    """

    def __init__(self, conninfo: Any, **options: Any) -> None:
        super().__init__(conninfo, **options)
        self._lock = threading.Lock()

    def install(self) -> None:
        """Create the table if missing and (re)install the functions; ``StoreError`` on failure."""
        with self._errors(), self._connection() as conn:
            _install(conn, self)

    def ping(self) -> None:
        """Check that checks can run, or raise ``StoreError`` saying why not.

        The server answers, the table and function exist, the role may read
        and write the table, the server is not read-only: one peek at a
        reserved key, writing nothing.  Never answered by the fallback.
        """
        params = self._ping_params()
        self._failover.run(lambda: self._verdict(self._execute(_sql.ping_sql(self.names), params)))

    def sweep(
        self, now: Optional[float] = None, max_age: Optional[float] = None, batch: int = 1000
    ) -> int:
        """Delete rows no longer needed, ``batch`` at a time, each batch its own transaction.

        A row goes when ``keep_until <= now`` or, with ``max_age`` (seconds),
        when idle longer.  ``now``: seconds on the checks' clock (``None``: the
        server's).  Rows a check holds are skipped.  Returns the number deleted.
        """
        params = _sql.sweep_params(now, max_age, batch)
        statement = _sql.sweep_sql(self.names)
        total = 0
        while True:
            deleted: int = self._execute(statement, params)
            total += deleted
            if deleted < batch:
                return total

    def close(self) -> None:
        """Close the store's own pool (not one it was given); it makes a new one if used again."""
        if self.conninfo is None:
            return
        with self._lock:
            pool, self.pool, self._ready = self.pool, None, False
        if pool is not None:
            pool.close()

    def _connection(self) -> Any:
        """A connection from the pool (opened, and the schema checked, at first use)."""
        pool = self.pool
        if pool is None or not self._ready:
            pool = self._prepare()
        return pool.connection()

    def _prepare(self) -> Any:
        with self._lock:
            if self.pool is None:
                from psycopg_pool import ConnectionPool

                self.pool = ConnectionPool(self.conninfo or "", **self._pool_options())
                self.pool.open()
                # Closed at exit while the interpreter still runs: psycopg_pool's
                # __del__ during shutdown prints an ignored exception.
                atexit.register(_close_at_exit, weakref.ref(self))
            pool = self.pool
            if not self._ready:
                # Install what is missing (with create), or StoreError saying what is.
                with self._errors(), pool.connection() as conn:
                    why = self._missing(conn.execute(_sql.installed_sql(self.names)).fetchone())
                if why is not None:
                    with self._errors(why), pool.connection() as conn:
                        _install(conn, self)
                self._ready = True
        return pool

    def _send(self, keys: bytes, argv: bytes) -> bytes:
        """The function's reply; any failure is a ``StoreError``.

        The hot path: a pooled connection without a context manager, one prepared statement.
        """
        try:
            pool = self.pool
            if pool is None or not self._ready:
                pool = self._prepare()
            conn = pool.getconn()
        except StoreError:
            raise
        except Exception as exc:
            raise self._error(exc) from exc
        try:
            return execute_prepared(conn, self._statement, [keys, argv])
        except Exception as exc:
            raise self._error(exc) from exc
        finally:
            pool.putconn(conn)

    def _delete(self, row: str) -> None:
        self._execute(_sql.reset_sql(self.names), (row,))

    def _execute(self, statement: str, params: Any) -> Any:
        """Run ``statement``: its first row, or its row count; any failure is a ``StoreError``."""
        with self._errors(), self._connection() as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchone() if cursor.description else cursor.rowcount


class AsyncPostgresStore(_PostgresBase, AsyncStoreShell):
    """``PostgresStore`` for asyncio, on an ``AsyncConnectionPool``.  Implements ``AsyncStore``.

    Same arguments and behaviour as ``PostgresStore`` (a pool given must be
    an ``AsyncConnectionPool``); ``fallback`` may be sync or async.
    Close it with ``await store.aclose()`` (its pool's connections and tasks).
    """

    _kind = "AsyncPostgresStore"
    _asyncio = True

    def __init__(self, conninfo: Any, **options: Any) -> None:
        super().__init__(conninfo, **options)
        self._lock: Any = None  # an asyncio.Lock, made in the loop that first uses the store
        self._closer: Any = None  # the task closing the pool with its loop (_close_with_loop)

    async def ainstall(self) -> None:
        """``PostgresStore.install`` for asyncio."""
        with self._errors():
            async with await self._connection() as conn:
                await _ainstall(conn, self)

    async def aping(self) -> None:
        """``PostgresStore.ping`` for asyncio."""
        params = self._ping_params()

        async def ping() -> None:
            self._verdict(await self._aexecute(_sql.ping_sql(self.names), params))

        await self._failover.arun(ping)

    async def asweep(
        self, now: Optional[float] = None, max_age: Optional[float] = None, batch: int = 1000
    ) -> int:
        """``PostgresStore.sweep`` for asyncio."""
        params = _sql.sweep_params(now, max_age, batch)
        statement = _sql.sweep_sql(self.names)
        total = 0
        while True:
            deleted: int = await self._aexecute(statement, params)
            total += deleted
            if deleted < batch:
                return total

    async def aclose(self) -> None:
        """``PostgresStore.close`` for asyncio."""
        if self.conninfo is None:
            return
        pool, self.pool, self._ready = self.pool, None, False
        closer, self._closer = self._closer, None
        if closer is not None:
            closer.cancel()
        if pool is not None:
            await pool.close()

    async def _close_with_loop(self, pool: Any) -> None:
        """Wait until cancelled (``asyncio.run`` ending, ``aclose``), then close ``pool``.

        psycopg_pool's scheduler swallows a cancellation reaching its task: a pool
        left open when ``asyncio.run`` ends would hang it, and the interpreter.
        """
        import asyncio

        try:
            await asyncio.Event().wait()
        finally:
            if self.pool is pool:
                self.pool, self._ready = None, False
            if not pool.closed:
                await pool.close(timeout=1.0)

    async def _connection(self) -> Any:
        pool = self.pool
        if pool is None or not self._ready:
            pool = await self._prepare()
        return pool.connection()

    async def _prepare(self) -> Any:
        import asyncio

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.pool is None:
                from psycopg_pool import AsyncConnectionPool

                pool = AsyncConnectionPool(self.conninfo or "", **self._pool_options())
                await pool.open()
                self.pool = pool
                self._closer = asyncio.ensure_future(self._close_with_loop(pool))
            pool = self.pool
            if not self._ready:
                with self._errors():
                    async with pool.connection() as conn:
                        cursor = await conn.execute(_sql.installed_sql(self.names))
                        why = self._missing(await cursor.fetchone())
                if why is not None:
                    with self._errors(why):
                        async with pool.connection() as conn:
                            await _ainstall(conn, self)
                self._ready = True
        return pool

    async def _send(self, keys: bytes, argv: bytes) -> str:
        row = await self._aexecute(self._apply, (keys, argv.decode("ascii")), at_first_use=True)
        return row[0]  # type: ignore[no-any-return]

    async def _delete(self, row: str) -> None:
        await self._aexecute(_sql.reset_sql(self.names), (row,))

    async def _aexecute(self, statement: str, params: Any, at_first_use: bool = False) -> Any:
        """``PostgresStore._execute`` for asyncio; ``at_first_use``: prepared at first use on
        each connection, unless it never prepares (``prepare_threshold`` None: a pooler)."""
        with self._errors():
            async with await self._connection() as conn:
                prepare = (conn.prepare_threshold is not None) if at_first_use else None
                cursor = await conn.execute(statement, params, prepare=prepare)
                return (await cursor.fetchone()) if cursor.description else cursor.rowcount


def _close_at_exit(store: Any) -> None:
    """``atexit``: close the pool of a ``PostgresStore`` still alive (``store``: a weak ref)."""
    alive = store()
    if alive is not None:
        alive.close()
