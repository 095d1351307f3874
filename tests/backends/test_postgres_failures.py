"""PostgreSQL stores when things go wrong: every failure is a StoreError, start-up is loud.

A stopped server, a read-only one, a dropped function, a missing table
without the right to create it, a wrong password: each against a real
PostgreSQL of this module's own (it is stopped and started again).
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

import pytest

from helpers.postgres_servers import APP_PASSWORD, PostgresServer, postgres_server
from limiter import Limit, MemoryStore, StoreError
from limiter.backends.postgres import AsyncPostgresStore, PostgresStore
from limiter.testing import T0

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    yield from postgres_server()


def test_a_stopped_server_is_a_store_error_and_the_fallback_answers(pg: PostgresServer) -> None:
    store = PostgresStore(pg.url(), table="stopped", pool_timeout=0.5)
    safe = PostgresStore(pg.url(), table="stopped", pool_timeout=0.5, fallback=MemoryStore())
    try:
        store.ping()
        safe.ping()
        pg.stop()
        with pytest.raises(StoreError) as info:
            store.apply("k", Limit(1, 1), 1, T0)
        assert APP_PASSWORD not in str(info.value)
        assert info.value.__cause__ is not None
        with pytest.raises(StoreError):
            store.ping()
        assert safe.apply("k", Limit(1, 1), 1, T0).allowed  # the fallback's
        assert safe.using_fallback
    finally:
        pg.start()
        store.close()
        safe.close()
    # Back: a new connection answers (the pool replaced the broken ones).
    assert store.apply("k", Limit(1, 1), 1, T0).allowed
    store.close()


def test_a_read_only_server_is_a_store_error(pg: PostgresServer) -> None:
    # As after a failover to a replica: the check's writes are refused.
    url = pg.url() + "?options=-c%20default_transaction_read_only%3Don"
    installer = PostgresStore(pg.url(), table="ro")
    installer.install()
    installer.close()
    store = PostgresStore(url, table="ro")
    try:
        with pytest.raises(StoreError, match="read-only"):
            store.apply("k", Limit(1, 1), 1, T0)
    finally:
        store.close()


def test_a_dropped_function_is_a_store_error_naming_install(pg: PostgresServer) -> None:
    store = PostgresStore(pg.url(), table="dropped", fallback=MemoryStore())
    try:
        store.ping()
        with pg.admin("limiter") as conn:
            conn.execute(f"DROP FUNCTION {store.names.apply}(text[], text)")
        assert store.apply("k", Limit(1, 1), 1, T0).allowed  # the fallback's
        with pytest.raises(StoreError, match=r"install\(\)"):
            store.ping()
        store.install()
        store.ping()
    finally:
        store.close()


def test_a_missing_table_without_create_permission_is_loud_at_start_up(
    pg: PostgresServer,
) -> None:
    with pg.admin("limiter") as conn:
        conn.execute("DROP ROLE IF EXISTS reader")
        conn.execute("CREATE ROLE reader LOGIN PASSWORD 'r3ader-pw'")
    url = pg.url("reader", "r3ader-pw")
    for create in (True, False):
        store = PostgresStore(url, table="nowhere", create=create)
        try:
            with pytest.raises(StoreError) as info:
                store.ping()
            message = str(info.value)
            assert '"nowhere" does not exist' in message
            assert "install()" in message and "install_sql()" in message
            assert ("permission denied" in message) is create
        finally:
            store.close()
    # What a DBA runs instead (psql -f), and then the application role works.
    admin_store = PostgresStore(pg.url(), table="granted")
    with pg.admin("limiter") as conn:
        conn.execute(admin_store.install_sql())
        conn.execute('GRANT SELECT, INSERT, UPDATE, DELETE ON "granted" TO reader')
    store = PostgresStore(url, table="granted", create=False)
    try:
        store.ping()
        assert store.apply("k", Limit(1, 1), 1, T0).allowed
    finally:
        store.close()
        admin_store.close()


def test_passwords_are_never_shown(pg: PostgresServer) -> None:
    url = pg.url(password="wrong-Pa55word")
    pairs = f"host=127.0.0.1 port={pg.port} dbname=limiter user=app password=wrong-Pa55word"
    for conninfo in (url, pairs):
        store = PostgresStore(conninfo, pool_timeout=0.5)
        try:
            assert "wrong-Pa55word" not in repr(store) and "***" in repr(store)
            with pytest.raises(StoreError) as info:
                store.ping()
            assert "wrong-Pa55word" not in str(info.value)
        finally:
            store.close()


def test_the_async_store_fails_alike(pg: PostgresServer) -> None:
    async def main() -> None:
        store = AsyncPostgresStore(pg.url(), table="astopped", pool_timeout=0.5)
        await store.aping()
        pg.stop()
        try:
            with pytest.raises(StoreError):
                await store.aapply("k", Limit(1, 1), 1, T0)
        finally:
            pg.start()
            await store.aclose()

    asyncio.run(main())


def test_validation() -> None:
    with pytest.raises(TypeError, match="connection string or a psycopg_pool pool"):
        PostgresStore(object())
    with pytest.raises(ValueError, match="table must be"):
        PostgresStore("dbname=x", table="a;drop")
    with pytest.raises(ValueError, match="table must be"):
        PostgresStore("dbname=x", table="a.b.c")
    with pytest.raises(TypeError, match="prefix"):
        PostgresStore("dbname=x", prefix=1)
    with pytest.raises(ValueError, match="max_connections"):
        PostgresStore("dbname=x", max_connections=0)
    with pytest.raises(ValueError, match="probe_after"):
        PostgresStore("dbname=x", fallback=MemoryStore(), probe_after=0)
    store: Any = PostgresStore("dbname=x", table="app.rates", fallback=MemoryStore())
    assert store.names.apply == '"app"."rates_apply_v2"'
    assert "table='app.rates'" in repr(store) and "MemoryStore" in repr(store)
