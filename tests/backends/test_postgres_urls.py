"""``store_from_url("postgresql://...")``, ``postgres://`` and ``LIMITER_STORAGE_URL``.

Parsing needs no server (and no connection is made); the last tests use a
throwaway PostgreSQL to show that the URL's store works and fails fast.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from helpers.postgres_servers import APP_PASSWORD, PostgresServer, postgres_server
from limiter import Limit, MemoryStore, StoreError
from limiter.backends.denycache import DenyCache
from limiter.backends.postgres import AsyncPostgresStore, PostgresStore
from limiter.testing import T0
from limiter.urls import store_from_env, store_from_url

pytestmark = pytest.mark.postgres


def test_both_schemes_give_a_store_with_fail_fast_defaults() -> None:
    for scheme in ("postgresql", "postgres"):
        store = store_from_url(f"{scheme}://app:pw@db:6432/rates")
        assert isinstance(store, PostgresStore)
        assert store.conninfo == (
            f"{scheme}://app:pw@db:6432/rates?connect_timeout=2"
            "&options=-c%20statement_timeout%3D250"
        )
        assert store.pool is None  # nothing opened yet
        assert store.pool_timeout == 0.25
        assert "pw" not in repr(store) and "app:***@db" in repr(store)


def test_query_parameters_go_to_the_store_and_to_libpq() -> None:
    store = store_from_url(
        "postgresql://app:pw@db/rates?table=app.limits&prefix=api:&server_time=no&create=0"
        "&unlogged=1&max_connections=4&pool_timeout=1.5&connect_timeout=5"
        "&statement_timeout=0.1&sslmode=require&options=-c%20search_path%3Dapp"
        "&fallback=memory&probe_after=2"
    )
    assert (store.table, store.prefix, store.server_time) == ("app.limits", "api:", False)
    assert (store.create, store.unlogged, store.max_connections) == (False, True, 4)
    assert store.pool_timeout == 1.5 and isinstance(store.fallback, MemoryStore)
    assert store.conninfo == (
        "postgresql://app:pw@db/rates?sslmode=require&connect_timeout=5"
        "&options=-c%20search_path%3Dapp%20-c%20statement_timeout%3D100"
    )


def test_keyword_options_override_the_url() -> None:
    store = store_from_url(
        "postgres://db/rates?table=a", asyncio=True, table="b", statement_timeout=0
    )
    assert isinstance(store, AsyncPostgresStore)
    assert store.table == "b"
    assert store.conninfo == "postgres://db/rates?connect_timeout=2"
    with pytest.raises(TypeError, match="unexpected keyword argument 'socket_timeout'"):
        store_from_url("postgres://db/rates", socket_timeout=1)


def test_hosts_ipv6_sockets_and_ports_pass_through() -> None:
    for url in (
        "postgresql://app:pw@[::1]:5433/rates",
        "postgresql://a:5432,[::1]:5433,c/rates",
        "postgresql://%2Ftmp%2Fpg/rates",
        "postgresql://app@/rates?host=/tmp/pg&port=5433",
        "postgresql://:5433/rates?host=/tmp/pg",
    ):
        assert store_from_url(url).conninfo.startswith(url.partition("?")[0])


def test_a_statement_timeout_in_options_is_not_overridden_by_the_default() -> None:
    store = store_from_url("postgresql://db/rates?options=-c%20statement_timeout%3D5s")
    assert store.conninfo == (
        "postgresql://db/rates?connect_timeout=2&options=-c%20statement_timeout%3D5s"
    )
    store = store_from_url("postgresql://db/rates?options=--statement-timeout%3D0", table="t")
    assert store.conninfo.endswith("&options=--statement-timeout%3D0")
    # Said outright, statement_timeout comes last, and libpq's last -c wins.
    store = store_from_url(
        "postgresql://db/rates?options=-c%20statement_timeout%3D5s&statement_timeout=1"
    )
    assert store.conninfo.endswith(
        "&options=-c%20statement_timeout%3D5s%20-c%20statement_timeout%3D1000"
    )


def test_deny_cache_wraps_it() -> None:
    store = store_from_url("postgresql://db/rates?deny_cache=100")
    assert isinstance(store, DenyCache) and isinstance(store.store, PostgresStore)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql:///rates", "a host is missing"),
        ("postgresql://db/rates?socket_timeout=1", "unknown query parameter 'socket_timeout'"),
        ("postgresql://db/rates?table=a;b", "table must be"),
        ("postgresql://db/rates?create=maybe", "create must be true or false"),
        ("postgresql://db/rates?max_connections=0", "max_connections must be an integer >= 1"),
        ("postgresql://db/rates?statement_timeout=-1", "statement_timeout must be"),
        ("postgresql://db/rates?fallback=redis", "fallback must be 'memory'"),
        ("postgresql://app:pw@db:notaport/rates", "the port of 'db' must be a number"),
        ("postgresql://app:pw@[::1/rates", "unclosed '\\[' in the host '\\[::1'"),
        ("postgresql://a,b:0/rates", "the port of 'b' must be a number from 1 to 65535"),
        ("postgresql://db/rates?port=abc", "port must be a number from 1 to 65535, got 'abc'"),
        ("postgresql://db/rates?port=\u00b2", "port must be a number from 1 to 65535, got '²'"),
    ],
)
def test_bad_urls_are_value_errors(url: str, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        store_from_url(url)


def test_keyword_timeouts_are_checked_as_the_querys() -> None:
    # statement_timeout=-1 went to the server, which refused every connection.
    for name, bad, problem in (
        ("connect_timeout", -1, "connect_timeout must be a finite number of seconds > 0, got -1"),
        ("connect_timeout", float("nan"), "connect_timeout must be a finite number of seconds"),
        ("statement_timeout", -1, "statement_timeout must be a finite number of seconds >= 0"),
        ("statement_timeout", float("inf"), "statement_timeout must be a finite number of sec"),
    ):
        with pytest.raises(ValueError, match=problem):
            store_from_url("postgresql://app:pw@db/rates", **{name: bad})
    with pytest.raises(TypeError, match="statement_timeout must be a number of seconds, got 'a'"):
        store_from_url("postgresql://app:pw@db/rates", statement_timeout="a")


def test_limiter_storage_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIMITER_STORAGE_URL", "postgres://app:s3cret@db/rates?table=rl")
    store = store_from_env()
    assert isinstance(store, PostgresStore) and store.table == "rl"
    monkeypatch.setenv("LIMITER_STORAGE_URL", "postgres://app:s3cret@db/rates?tabel=rl")
    with pytest.raises(ValueError, match="LIMITER_STORAGE_URL") as info:
        store_from_env()
    assert "s3cret" not in str(info.value)


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    yield from postgres_server()


def test_a_url_store_works_and_fails_fast(pg: PostgresServer) -> None:
    store = store_from_url(pg.url() + "?table=from_url")
    try:
        store.ping()
        assert store.apply("k", Limit(1, 2), 1, T0).allowed
        with store.pool.connection() as conn:
            (timeout,) = conn.execute("SHOW statement_timeout").fetchone()
        assert timeout == "250ms"
    finally:
        store.close()
    wrong = store_from_url(pg.url(password="nope") + "?table=from_url")
    try:
        with pytest.raises(StoreError) as info:
            wrong.ping()
        assert "nope" not in str(info.value) and APP_PASSWORD not in str(info.value)
    finally:
        wrong.close()


def test_a_password_with_unencoded_special_characters_reaches_libpq_whole() -> None:
    # The URL parser takes the user information up to the last "@"; libpq would
    # stop at the first, and reject "%rd" (echoing it in the pool's log).
    store = store_from_url("postgresql://app:p@ss:w%rd/x@db/rates")
    assert store.conninfo == (
        "postgresql://app:p%40ss%3Aw%25rd%2Fx@db/rates?connect_timeout=2"
        "&options=-c%20statement_timeout%3D250"
    )
    encoded = store_from_url("postgresql://app:p%40ss%3Aw%25rd%2Fx@db/rates")
    assert encoded.conninfo == store.conninfo


def test_a_password_with_special_characters_logs_in(
    pg: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    password = "50%off@p:w/x"
    with pg.admin() as conn:
        conn.execute(f"CREATE ROLE odd LOGIN PASSWORD '{password}'")
        conn.execute("GRANT ALL ON SCHEMA public TO odd")
    with pg.admin("limiter") as conn:
        conn.execute("GRANT ALL ON SCHEMA public TO odd")
    store = store_from_url(f"postgresql://odd:{password}@127.0.0.1:{pg.port}/limiter?table=odd")
    try:
        store.ping()
        assert store.apply("k", Limit(1, 2), 1, T0).allowed
    finally:
        store.close()
    assert "50%off" not in caplog.text and "off@p" not in caplog.text
