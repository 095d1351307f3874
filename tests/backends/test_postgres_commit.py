"""How a PostgreSQL store commits its checks, and what a store left open does at exit.

By default each check's transaction (and only it) commits asynchronously: the
statement sets ``synchronous_commit`` off for its own transaction, so the
commit does not wait for the WAL to reach the disk.  ``synchronous_commit=True``
keeps the server's setting.  The WAL writes a commit makes are read from
``pg_stat_wal`` (PostgreSQL >= 15 flushes a backend's counts on demand).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any, Iterator

import pytest

from helpers.postgres_servers import PostgresServer, postgres_server
from limiter import Limit
from limiter.backends.postgres import AsyncPostgresStore, PostgresStore
from limiter.testing import T0
from limiter.urls import store_from_url

pytestmark = pytest.mark.postgres

CHECKS = 100


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    yield from postgres_server()


def wal_writes(admin: Any) -> int:
    return int(admin.execute("SELECT wal_write FROM pg_stat_wal").fetchone()[0])


def sync_checks(store: PostgresStore, prefix: str) -> str:
    """``CHECKS`` admitted checks, then the session's own synchronous_commit."""
    limit = Limit(1000, 1000)
    assert all(store.apply(f"{prefix}{i}", limit, 1, T0).allowed for i in range(CHECKS))
    with store.pool.connection() as conn:  # the one connection: its WAL counts, flushed
        conn.execute("SELECT pg_stat_force_next_flush()")
        return str(conn.execute("SHOW synchronous_commit").fetchone()[0])


async def async_checks(store: AsyncPostgresStore, prefix: str) -> str:
    limit = Limit(1000, 1000)
    results = [await store.aapply(f"{prefix}{i}", limit, 1, T0) for i in range(CHECKS)]
    assert all(r.allowed for r in results)
    async with store.pool.connection() as conn:
        await conn.execute("SELECT pg_stat_force_next_flush()")
        cursor = await conn.execute("SHOW synchronous_commit")
        setting = str((await cursor.fetchone())[0])
    await store.aclose()
    return setting


@pytest.mark.parametrize("asyncio_store", [False, True], ids=["sync", "asyncio"])
@pytest.mark.parametrize("synchronous", [False, True], ids=["default", "synchronous_commit"])
def test_checks_commit_asynchronously_unless_asked(
    pg: PostgresServer, asyncio_store: bool, synchronous: bool
) -> None:
    with pg.admin("limiter") as admin:
        if admin.info.server_version < 150000:
            pytest.skip("pg_stat_force_next_flush() needs PostgreSQL 15")
        options = dict(max_connections=1, synchronous_commit=synchronous)
        prefix = f"{asyncio_store}-{synchronous}:"
        if asyncio_store:
            astore = AsyncPostgresStore(pg.url(), **options)
            asyncio.run(astore.aapply("warm-up", Limit(1, 1), 1, T0))  # installs
            before = wal_writes(admin)
            session = asyncio.run(async_checks(AsyncPostgresStore(pg.url(), **options), prefix))
        else:
            store = PostgresStore(pg.url(), **options)
            store.apply("warm-up", Limit(1, 1), 1, T0)  # installs, opens the connection
            before = wal_writes(admin)
            session = sync_checks(store, prefix)
            store.close()
        written = wal_writes(admin) - before
    # A synchronous commit writes the WAL itself, once per check; an asynchronous
    # one leaves it to the WAL writer (every wal_writer_delay, 200 ms).
    if synchronous:
        assert written >= CHECKS
    else:
        assert written < CHECKS // 4
    assert session == "on"  # only each check's transaction: the session keeps its setting


def test_the_option_is_checked_and_read_from_the_url() -> None:
    with pytest.raises(TypeError, match="synchronous_commit must be True or False, got 'yes'"):
        PostgresStore("host=db", synchronous_commit="yes")
    with pytest.raises(TypeError, match="got 1"):
        AsyncPostgresStore("host=db", synchronous_commit=1)
    assert PostgresStore("host=db").synchronous_commit is False
    store = store_from_url("postgresql://app:pw@db/rates?synchronous_commit=on")
    assert store.synchronous_commit is True
    assert "set_config" not in store._statement.text.decode()
    assert store_from_url("postgresql://db/rates", synchronous_commit=True).synchronous_commit
    with pytest.raises(ValueError, match=r"synchronous_commit must be true or false.*'always'"):
        store_from_url("postgresql://app:pw@db/rates?synchronous_commit=always")


# -- a store left open at exit ------------------------------------------------------

LEFT_OPEN = textwrap.dedent(
    """
    import asyncio, sys
    from limiter import RateLimiter
    from limiter.backends.postgres import AsyncPostgresStore, PostgresStore

    url, mode = sys.argv[1:]
    if mode == "sync":
        print(RateLimiter("5/s", store=PostgresStore(url)).check("k").allowed)
    else:
        limiter = RateLimiter("5/s", store=AsyncPostgresStore(url))
        print(asyncio.run(limiter.acheck("k")).allowed)
    print("done", flush=True)
    """
)


@pytest.mark.parametrize("mode", ["sync", "asyncio"])
def test_a_store_never_closed_lets_the_interpreter_exit(pg: PostgresServer, mode: str) -> None:
    """The pool's threads (sync) are daemons and its tasks (asyncio) are closed with
    the loop: no hang, no traceback.  Under load a connection attempt may still be in
    flight at the loop's end: psycopg_pool logs it abandoned, and once hung
    ``asyncio.run`` (its scheduler swallowed the cancellation; CPython 3.12's CI).
    ``close()``/``aclose()`` is for a tidy shutdown."""
    done = subprocess.run(
        [sys.executable, "-c", LEFT_OPEN, pg.url(), mode],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "done"]
    abandoned = [line for line in done.stderr.splitlines() if "error connecting in" not in line]
    assert abandoned == [], done.stderr


@pytest.mark.parametrize("flag", ["server_time", "create", "unlogged"])
def test_each_switch_is_a_bool_not_a_truthy_string(flag: str) -> None:
    # create="no" once meant create=True: bool("no").
    with pytest.raises(TypeError, match=f"{flag} must be True or False, got 'no'"):
        PostgresStore("host=db", **{flag: "no"})
    with pytest.raises(TypeError, match=f"{flag} must be True or False, got 0"):
        AsyncPostgresStore("host=db", **{flag: 0})
    store = PostgresStore("host=db", **{flag: False})
    if flag == "server_time":
        assert "server_time=False" in repr(store)
    else:
        assert getattr(store, flag) is False
