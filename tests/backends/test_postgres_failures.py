"""PostgreSQL stores when things go wrong: every failure is a StoreError, start-up is loud.

A stopped server, a read-only one, a dropped function, a missing table
without the right to create it, a role that may not write the table, a
wrong password: each against a real PostgreSQL of this module's own (it is
stopped and started again); and the integrations' start-up check on them.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Iterator

import pytest

from helpers.postgres_servers import APP_PASSWORD, PostgresServer, postgres_server
from limiter import Limit, MemoryStore, PoolFullError, StoreError
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


def test_a_full_pool_is_no_store_error_and_no_fallback_answers_it(pg: PostgresServer) -> None:
    # Every connection in use is a limit of this process, not an outage: the
    # fail-open path (on_error="allow", the fallback) must not answer it.
    store = PostgresStore(
        pg.url(), table="full", max_connections=1, pool_timeout=0.2, fallback=MemoryStore()
    )
    two = Limit(1, 2)
    try:
        assert store.apply("k", two, 1, T0).remaining == 1
        held = store.pool.getconn()
        try:
            with pytest.raises(PoolFullError, match="all 1 are in use") as info:
                store.apply("k", two, 1, T0)
            assert not isinstance(info.value, StoreError) and not store.using_fallback
        finally:
            store.pool.putconn(held)
        assert store.apply("k", two, 1, T0).remaining == 0  # nothing was charged meanwhile
    finally:
        store.close()


def test_the_async_stores_full_pool_is_no_store_error_either(pg: PostgresServer) -> None:
    async def run() -> None:
        store = AsyncPostgresStore(pg.url(), table="afull", max_connections=1, pool_timeout=0.2)
        try:
            assert (await store.aapply("k", Limit(1, 2), 1, T0)).remaining == 1
            held = await store.pool.getconn()
            try:
                with pytest.raises(PoolFullError, match="all 1 are in use"):
                    await store.aapply("k", Limit(1, 2), 1, T0)
            finally:
                await store.pool.putconn(held)
            assert (await store.aapply("k", Limit(1, 2), 1, T0)).remaining == 0
        finally:
            await store.aclose()

    asyncio.run(run())


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


def test_a_refused_login_says_why(pg: PostgresServer) -> None:
    # The pool only logs why it could not connect; its PoolTimeout says nothing.
    async def aping(store: Any) -> None:
        try:
            await store.aping()
        finally:
            await store.aclose()

    why = 'password authentication failed for user "app"'
    for store_class in (PostgresStore, AsyncPostgresStore):
        store = store_class(pg.url(password="wrong-Pa55word"), pool_timeout=0.5)
        with pytest.raises(StoreError, match=why) as info:
            if store_class is PostgresStore:
                try:
                    store.ping()
                finally:
                    store.close()
            else:
                asyncio.run(aping(store))
        assert "wrong-Pa55word" not in str(info.value)


def test_a_connection_string_libpq_cannot_parse_is_a_value_error_hiding_the_password() -> None:
    # libpq's own message quotes what it could not parse: here, the password's end.
    for conninfo in (
        "host=db dbname=app user=app password=my secret-Word",
        "postgresql://app:50%off-Word@db/app",
    ):
        for store_class in (PostgresStore, AsyncPostgresStore):
            with pytest.raises(ValueError, match="libpq cannot parse") as info:
                store_class(conninfo)
            assert "Word" not in str(info.value) and info.value.__cause__ is None
    with pytest.raises(ValueError, match=re.escape("'postgresql://app:***@db/app?port=x=y'")):
        PostgresStore("postgresql://app:pw@db/app?port=x=y")


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
    # Else every check would time out at once, a StoreError (the fail-open path).
    for wait in (0, -1.0, float("nan"), float("inf")):
        problem = f"pool_timeout must be a finite number of seconds( > 0)?, got {wait!r}"
        with pytest.raises(ValueError, match=problem):
            PostgresStore("dbname=x", pool_timeout=wait)
    with pytest.raises(TypeError, match="pool_timeout must be a number of seconds, got '1'"):
        PostgresStore("dbname=x", pool_timeout="1")
    with pytest.raises(ValueError, match="probe_after"):
        PostgresStore("dbname=x", fallback=MemoryStore(), probe_after=0)
    for batch in (0, 2**31, 2**63):  # before any I/O: the server would refuse 2**31 and up
        with pytest.raises(ValueError, match=r"batch must be from 1 to 2\*\*31 - 1"):
            PostgresStore("dbname=x").sweep(batch=batch)
    store: Any = PostgresStore("dbname=x", table="app.rates", fallback=MemoryStore())
    assert store.names.apply == '"app"."rates_apply_v6"'
    assert "table='app.rates'" in repr(store) and "MemoryStore" in repr(store)


# -- start-up: ping() and the integrations' check -------------------------------------------


def role(pg: PostgresServer, name: str) -> str:
    """A fresh login role ``name`` (password ``name + "-pw"``): its URL."""
    with pg.admin("limiter") as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
            conn.execute(f"DROP OWNED BY {name}")
            conn.execute(f"DROP ROLE {name}")
        conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{name}-pw'")
    return pg.url(name, f"{name}-pw")


def test_ping_names_the_privileges_a_role_lacks(pg: PostgresServer) -> None:
    # Checks read and write the table (reset and sweep delete): a role that may
    # only read it passes a peek, so ping asks; each missing privilege is named.
    url = role(pg, "peeker")
    installer = PostgresStore(pg.url(), table="readonly_grant")
    installer.install()
    installer.close()
    with pg.admin("limiter") as conn:
        conn.execute('GRANT SELECT, UPDATE ON "readonly_grant" TO peeker')
    store = PostgresStore(url, table="readonly_grant", create=False)
    try:
        with pytest.raises(StoreError) as info:
            store.ping()
        assert "the role peeker may not INSERT, DELETE the table" in str(info.value)
        with pg.admin("limiter") as conn:
            conn.execute('GRANT INSERT, DELETE ON "readonly_grant" TO peeker')
        store.ping()
    finally:
        store.close()


def test_ping_on_a_read_only_server_says_so(pg: PostgresServer) -> None:
    installer = PostgresStore(pg.url(), table="ro2")
    installer.install()
    installer.close()
    url = pg.url() + "?options=-c%20default_transaction_read_only%3Don"
    said = r"read-only .*\(target_session_attrs=read-write\)"
    store = PostgresStore(url, table="ro2")
    try:
        with pytest.raises(StoreError, match=said):
            store.ping()
    finally:
        store.close()

    async def aping() -> None:
        astore = AsyncPostgresStore(url, table="ro2")
        try:
            await astore.aping()
        finally:
            await astore.aclose()

    with pytest.raises(StoreError, match=said):
        asyncio.run(aping())


def test_the_integrations_refuse_to_start_on_a_store_that_cannot_work(pg: PostgresServer) -> None:
    # The start-up check of limiter.integrations pings a PostgresStore (an
    # AsyncPostgresStore under FastAPI) as it pings Redis: a missing table the
    # role may not create stops the app, naming install() and never the password.
    from flask import Flask

    from limiter.integrations.flask import RateLimit as FlaskRateLimit

    url = role(pg, "starter") + "?table=never_made&create=false"
    with pytest.raises(StoreError) as info:
        FlaskRateLimit(Flask("pg"), store=url)
    message = str(info.value)
    assert message.startswith("RateLimit.init_app: the store postgresql://starter:***@")
    assert '"never_made" does not exist' in message and "install()" in message
    assert "starter-pw" not in message
    with pytest.raises(StoreError, match='"never_made" does not exist') as info:
        serve_fastapi(AsyncPostgresStore(url.split("?")[0], table="never_made", create=False))
    assert "starter-pw" not in str(info.value)

    # Installed by a DBA and granted: both start.
    with pg.admin("limiter") as conn:
        conn.execute(PostgresStore(pg.url(), table="never_made").install_sql())
        conn.execute('GRANT SELECT, INSERT, UPDATE, DELETE ON "never_made" TO starter')
    granted = PostgresStore(url.split("?")[0], table="never_made", create=False)
    try:
        FlaskRateLimit(Flask("pg-ok"), store=granted)
    finally:
        granted.close()
    store = AsyncPostgresStore(url.split("?")[0], table="never_made", create=False)
    assert serve_fastapi(store) == 200


def serve_fastapi(store: AsyncPostgresStore) -> int:
    """Start a FastAPI app limited on ``store`` and GET / (its status); ``store`` closed at
    shutdown, started or not (its pool belongs to the app's event loop)."""
    from contextlib import asynccontextmanager

    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from limiter.integrations.fastapi import RateLimit

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        try:
            yield
        finally:
            await store.aclose()

    app = FastAPI(lifespan=lifespan)
    limit = RateLimit(app, store=store)

    @app.get("/", dependencies=[Depends(limit.limit("5/minute"))])
    async def index() -> dict:  # type: ignore[type-arg]
        return {}

    with TestClient(app) as client:
        return client.get("/").status_code
