"""store_from_url: every scheme against a real server where one can be started, fail-fast
clients, secrets kept out of reprs, messages and logs, LIMITER_STORAGE_URL.

The parsing, memory and SQLite tests need nothing.  Closed-port and silent-server
tests need only redis-py (and valkey-py).  The rest start throwaway servers on free
loopback ports (``helpers/redis_servers.py``): one redis-server with a password, an ACL user
and a Unix socket; one with TLS (a self-signed certificate made by ``openssl``); a
Sentinel watching the first; a 3-master cluster.  Without ``redis-server`` they skip
with the reason (they fail under ``CI=true``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple
from urllib.parse import quote

import pytest

from limiter import Limit, ManualClock, MemoryStore, RateLimiter, StoreError, redact_url
from limiter.backends._url import DEFAULT_CONNECT_TIMEOUT, DEFAULT_SOCKET_TIMEOUT
from limiter.backends.redis._clients import LazyCluster
from limiter.urls import (
    STORAGE_URL_ENV,
    SUPPORTED_SCHEMES,
    resolve_store,
    store_from_env,
    store_from_url,
)

T0 = 1_700_000_000.0
LIMIT = Limit(0.001, 3)  # with a frozen clock: exactly 3 pass per key

# Passwords with every character a URL must encode (and "%" and "+", which
# decoding must keep).  No spaces: redis-server's command line splits on them.
PASSWORD = "p@ss:w/rd%+?#&=1"
ACL_PASSWORD = "a@c:l/%2F+pw"
SENTINEL_PASSWORD = "s@nt:/%+pw"
PLAIN_PASSWORD = "c@r:o/l"  # for a URL that does not encode it ("%" would be decoded)
SECRETS = [PASSWORD, ACL_PASSWORD, SENTINEL_PASSWORD, PLAIN_PASSWORD]


def q(text: str) -> str:
    """Percent-encode everything but unreserved characters (a URL's user info)."""
    return quote(text, safe="")


def secret_forms() -> List[str]:
    forms = []
    for secret in SECRETS:
        forms += [secret, q(secret), quote(secret)]
    return forms


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for form in secret_forms():
            assert form not in text, f"a password leaked: {text[:300]!r}"


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    """Every record as a handler would write it, tracebacks included."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


def unique() -> str:
    return f"test-urls-{uuid.uuid4().hex[:12]}:"


def needs(module: str) -> Any:
    extra = "valkey" if module.startswith("valkey") else "redis"
    return pytest.importorskip(
        module, reason=f"{module} is not installed: pip install 'tokenlimiter[{extra}]'"
    )


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- memory:// ---------------------------------------------------------------


def test_memory_url() -> None:
    store = store_from_url("memory://")
    assert isinstance(store, MemoryStore) and store.max_keys == 1_000_000
    assert store_from_url("memory://?max_keys=10").max_keys == 10
    assert store_from_url("MEMORY://?max_keys=none").max_keys is None
    assert store_from_url("memory://?max_keys=10", max_keys=5).max_keys == 5
    limited = RateLimiter("2/minute", store=store_from_url("memory://"))
    assert [limited.allow("k") for _ in range(3)] == [True, True, False]


def test_memory_and_sqlite_serve_asyncio_as_they_are(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    memory = store_from_url("memory://", asyncio=True)
    sqlite = store_from_url("sqlite:///a.db", asyncio=True)
    assert type(memory).__name__ == "MemoryStore" and type(sqlite).__name__ == "SQLiteStore"

    async def go() -> List[bool]:
        out = []
        for store in (memory, sqlite):
            lim = RateLimiter("2/minute", store=store, clock=ManualClock(T0))
            out += [(await lim.acheck("k")).allowed for _ in range(3)]
        return out

    assert run(go()) == [True, True, False] * 2
    sqlite.close()


# -- sqlite:// ---------------------------------------------------------------


def test_sqlite_relative_and_absolute_paths(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from limiter.backends.sqlite import SQLiteStore

    monkeypatch.chdir(tmp_path)
    relative = store_from_url("sqlite:///limits.db")
    assert isinstance(relative, SQLiteStore) and relative.path == "limits.db"
    assert (tmp_path / "limits.db").exists()  # relative to the working directory
    (tmp_path / "sub dir").mkdir()
    absolute_path = tmp_path / "sub dir" / "abs.db"
    absolute = store_from_url(f"sqlite:///{quote(str(absolute_path))}?timeout=0.5&purge_every=7")
    assert isinstance(absolute, SQLiteStore)
    assert absolute.path == str(absolute_path) and absolute.path.startswith("/")
    assert absolute.timeout == 0.5 and absolute.purge_every == 7 and absolute.fallback is None
    # Both are real, shared stores: a second store on the same file sees the state.
    for store, url in ((relative, "sqlite:///limits.db"), (absolute, f"sqlite:///{absolute_path}")):
        other = store_from_url(url)
        first = RateLimiter("2/minute", store=store, clock=ManualClock(T0), name="n")
        second = RateLimiter("2/minute", store=other, clock=ManualClock(T0), name="n")
        assert [first.allow("k"), second.allow("k"), first.allow("k")] == [True, True, False]
        store.close()
        other.close()


def test_sqlite_query_and_options(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/f.db?fallback=memory&probe_after=2&max_probe_after=9"
    store = store_from_url(url)
    assert isinstance(store.fallback, MemoryStore)
    mine = MemoryStore(max_keys=3)
    overridden = store_from_url(url, fallback=mine, timeout=1.5, probe_clock=ManualClock())
    assert overridden.fallback is mine and overridden.timeout == 1.5
    with pytest.raises(TypeError, match="'socket_timeout' for an sqlite:// store; it takes: "):
        store_from_url(url, socket_timeout=1)
    with pytest.raises(FileNotFoundError):  # the store's own start-up check, unchanged
        store_from_url(f"sqlite:///{tmp_path}/no/such/dir/x.db")
    for each in (store, overridden):
        each.close()


# -- malformed URLs: ValueError naming the problem, TypeError for types ------------


@pytest.mark.parametrize(
    "url, expected",
    [
        ("mysql://h/db", "unknown store URL scheme 'mysql://'"),
        ("redis+tls://h", "unknown store URL scheme 'redis+tls://'"),
        ("localhost:6379", "not a store URL"),
        ("", "not a store URL"),
        ("memory://host", "memory:// takes no host"),
        ("memory://?max_keys=0", "max_keys must be an integer >= 1 or none, got '0'"),
        ("memory://?maxkeys=5", "unknown query parameter 'maxkeys' for memory://; known: max_keys"),
        ("sqlite://", "the database path is missing"),
        ("sqlite://host/x.db", "sqlite:// takes no host"),
        ("sqlite:///x.db?timeout=-1", "timeout must be a finite number of seconds >= 0, got '-1'"),
        ("sqlite:///x.db?prefix=a", "unknown query parameter 'prefix' for sqlite://; known: "),
        ("redis://h?prefx=a", "unknown query parameter 'prefx' for redis://; known: prefix, "),
        ("redis://h?prefix=a&prefix=b", "query parameter 'prefix' is given twice"),
        ("redis://h?prefix", "query parameter 'prefix' has no value"),
        ("redis://h?server_time=maybe", "server_time must be true or false"),
        ("redis://h?socket_timeout=0", "socket_timeout must be a finite number of seconds > 0"),
        ("redis://h?connect_timeout=inf", "connect_timeout must be a finite number of seconds > 0"),
        ("redis://h?connect_timeout=1&socket_connect_timeout=1", "not both"),
        ("redis://h?fallback=sqlite", "fallback must be 'memory'"),
        ("redis://h:port/0", "the port of 'h' must be a number from 1 to 65535, got 'port'"),
        ("redis://h:70000", "got '70000'"),
        # str.isdigit() is true of these, which int() refuses or reads as 6379.
        ("redis://h:\u00b2/0", "the port of 'h' must be a number from 1 to 65535, got '\u00b2'"),
        ("redis://h:\u0666\u0663\u0667\u0669", "the port of 'h' must be a number from 1 to 65535"),
        ("redis://h/x", "the path must be the database number"),
        ("redis://h/\u00b2", "the path must be the database number (/0, /1, ...), got '/\u00b2'"),
        ("memory://?max_keys=\u00b9", "max_keys must be an integer >= 1 or none, got '\u00b9'"),
        ("redis://h/1?db=2", "in the path or as ?db=, not both"),
        ("redis://h1,h2", "redis:// takes one host"),
        ("redis://h/0#frag", "'#' must be percent-encoded"),
        ("redis://[::1/0", "unclosed '['"),
        ("redis+unix://host/sock", "takes a socket path, no host"),
        ("redis+unix://", "the socket path is missing"),
        ("redis+sentinel://h:26379", "the path must be the service name"),
        ("redis+sentinel://h:26379/svc/1", "the path must be the service name"),
        ("redis+sentinel://h,/svc", "a host name is missing"),
        ("redis+cluster://h:7000/1", "a cluster has only database 0"),
        ("redis+cluster://h?db=0", "unknown query parameter 'db' for redis+cluster://"),
        ("redis://h?ssl_ca_certs=x", "unknown query parameter 'ssl_ca_certs' for redis://"),
        ("rediss://h?ssl_cert_reqs=maybe", "ssl_cert_reqs must be none, optional or required"),
        ("redis://h?sentinel_password=x", "unknown query parameter 'sentinel_password'"),
    ],
)
def test_malformed_urls_are_value_errors_that_say_what_is_wrong(url: str, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        store_from_url(url)
    assert expected in str(info.value)


def test_unknown_scheme_lists_the_supported_ones() -> None:
    with pytest.raises(ValueError) as info:
        store_from_url("mysql://u:hunter2@db/limits")
    message = str(info.value)
    assert "'mysql://'" in message and "hunter2" not in message
    for scheme in SUPPORTED_SCHEMES:
        assert f"{scheme}://" in message
    assert {"memory", "sqlite", "redis", "rediss", "redis+unix", "redis+sentinel"} <= set(
        SUPPORTED_SCHEMES
    )
    assert {"redis+cluster", "valkey", "valkeys", "valkey+sentinel", "valkey+cluster"} <= set(
        SUPPORTED_SCHEMES
    )


def test_types_are_checked() -> None:
    with pytest.raises(TypeError, match="url must be a str, got b'redis://h'"):
        store_from_url(b"redis://h")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="asyncio must be True or False, got 'yes'"):
        store_from_url("memory://", asyncio="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'prefix' for a memory://"):
        store_from_url("memory://", prefix="a")


def test_messages_about_a_url_never_show_its_password() -> None:
    for url in (
        f"redis://bob:{q(PASSWORD)}@h:port/0",
        f"redis://bob:{q(PASSWORD)}@h/0?unknown=1",
        f"redis://bob:{q(PASSWORD)}@h1,h2/0",
        f"redis+sentinel://:{q(PASSWORD)}@h/svc?sentinel_password={q(SENTINEL_PASSWORD)}&x=1",
        f"rediss+cluster://:{q(PASSWORD)}@h/3",
        f"nosuch://bob:{q(PASSWORD)}@h",
        # Unencoded: "/" and "@" are taken as part of the password (the last "@"
        # before the query ends it); a "?" or "#" is caught without showing it.
        "redis://bob:pa/ss@h:port/0",
        "redis://bob:p@ss:w/rd%+?#&=1@h:port",
        "redis://bob:p@ss:w/rd%+?#&=1@h/0?bad=1",
        "redis://:pa?ss@h:port",
        "redis://:pa#ss@h:port",
    ):
        with pytest.raises(ValueError) as info:
            store_from_url(url)
        assert_no_secret(str(info.value))
        for fragment in ("pa/ss", "pa?ss", "pa#ss"):
            assert fragment not in str(info.value)


def test_redact_url() -> None:
    assert redact_url("redis://app:s3cret@cache:6379/0") == "redis://app:***@cache:6379/0"
    assert redact_url("redis://:p%40ss@h") == "redis://:***@h"
    assert redact_url("rediss://bob:pa/ss@h:1/0?prefix=a") == "rediss://bob:***@h:1/0?prefix=a"
    assert redact_url("redis://bob:pa?ss@h") == "redis://bob:***@h"
    assert (
        redact_url("redis+sentinel://h:1/m?sentinel_password=x&db=1")
        == "redis+sentinel://h:1/m?sentinel_password=***&db=1"
    )
    for unchanged in (
        "redis://bob@h/0",  # a user name alone is not a secret
        "sqlite:///data/a@b.db",
        "memory://",
        "redis+unix:///run/redis.sock",
    ):
        assert redact_url(unchanged) == unchanged
    assert redact_url(None) == "None"  # type: ignore[arg-type]
    # An "@" in the query after a ":" may end an unencoded "user:pa?ss=1@"
    # password: the display hides too much rather than too little.
    assert redact_url("redis://h:6379/0?prefix=a@b") == "redis://h:***@b"


# -- the client libraries are optional ---------------------------------------


@pytest.mark.parametrize(
    "url, package",
    [("redis://h", "redis"), ("rediss+cluster://h", "redis"), ("valkey://h", "valkey")],
)
def test_a_missing_client_library_names_the_extra(
    url: str, package: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # import fails as when not installed
    for asyncio_ in (False, True):
        with pytest.raises(ModuleNotFoundError) as info:
            store_from_url(url, asyncio=asyncio_)
        assert isinstance(info.value, ImportError) and info.value.name == package
        assert f'pip install "tokenlimiter[{package}]"' in str(info.value)
    # A malformed URL is still a ValueError, found before the import.
    with pytest.raises(ValueError, match="must be a number"):
        store_from_url(url + ":port")
    with pytest.raises(ValueError, match="unknown query parameter"):
        store_from_url(url + "?nope=1")
    # The other schemes do not need it.
    assert isinstance(store_from_url("memory://"), MemoryStore)
    store_from_url(f"sqlite:///{tmp_path}/x.db").close()


def test_import_limiter_stays_cheap() -> None:
    """store_from_url loads on first use and imports no client library by itself."""
    code = (
        "import sys, limiter\n"
        "assert 'limiter.urls' not in sys.modules\n"
        "before = set(sys.modules)\n"
        "limiter.store_from_url('memory://')\n"
        "new = set(sys.modules) - before\n"
        "assert 'limiter.urls' in new, new\n"
        "assert not {m for m in new if m.split('.')[0] in ('redis', 'valkey', 'sqlite3')}, new\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- LIMITER_STORAGE_URL and precedence ------------------------------------------


def test_store_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert STORAGE_URL_ENV == "LIMITER_STORAGE_URL"
    monkeypatch.delenv(STORAGE_URL_ENV, raising=False)
    assert store_from_env() is None
    monkeypatch.setenv(STORAGE_URL_ENV, "  ")
    assert store_from_env() is None
    monkeypatch.setenv(STORAGE_URL_ENV, " memory://?max_keys=5 ")
    store = store_from_env()
    assert isinstance(store, MemoryStore) and store.max_keys == 5
    assert store_from_env(max_keys=7).max_keys == 7
    monkeypatch.setenv(STORAGE_URL_ENV, f"redis://bob:{q(PASSWORD)}@h/0?nope=1")
    with pytest.raises(ValueError) as info:
        store_from_env()
    assert str(info.value).startswith("LIMITER_STORAGE_URL: bad store URL ")
    assert "'nope'" in str(info.value)
    assert_no_secret(str(info.value))


def test_resolve_store_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    """An explicit store or URL > LIMITER_STORAGE_URL > a new MemoryStore."""
    monkeypatch.delenv(STORAGE_URL_ENV, raising=False)
    default = resolve_store()
    assert isinstance(default, MemoryStore) and default.max_keys == 1_000_000
    monkeypatch.setenv(STORAGE_URL_ENV, "memory://?max_keys=5")
    assert resolve_store().max_keys == 5
    assert resolve_store("memory://?max_keys=6").max_keys == 6
    mine = MemoryStore(max_keys=7)
    assert resolve_store(mine) is mine


# -- LazyCluster: built on first use, built again after a failure -----------------


def test_lazy_cluster_retries_its_construction() -> None:
    class Fake:
        def __init__(self) -> None:
            self.closed = False

        def evalsha(self, *args: Any) -> str:
            return "evalsha"

        def eval(self, *args: Any) -> str:
            return "eval"

        def delete(self, *names: Any) -> int:
            return len(names)

        def keyslot(self, key: Any) -> int:
            return 42

        def get_nodes(self) -> List[str]:
            return ["n1"]

        def close(self) -> None:
            self.closed = True

    attempts: List[int] = []
    fake = Fake()

    def factory() -> Fake:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("cluster down")
        return fake

    lazy = LazyCluster(factory, "FakeCluster at h:1")
    assert attempts == [] and lazy.get_nodes() == []  # no I/O until used
    assert "not connected yet" in repr(lazy)
    with pytest.raises(ConnectionError):
        lazy.evalsha("sha", 1, "k")
    assert lazy.evalsha("sha") == "evalsha" and lazy.eval("s") == "eval"
    assert lazy.delete("a", "b") == 2 and lazy.keyslot("k") == 42 and lazy.get_nodes() == ["n1"]
    assert len(attempts) == 2 and lazy.connect() is fake and "(connected)" in repr(lazy)
    lazy.close()
    assert fake.closed and "not connected yet" in repr(lazy)


# -- client configuration (no server needed) ----------------------------------


def test_redis_clients_fail_fast_by_default_and_options_override() -> None:
    needs("redis")
    from redis.backoff import NoBackoff

    store = store_from_url("redis://cache.example:6380/2?prefix=app:&server_time=false")
    kwargs = store.client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("cache.example", 6380, 2)
    assert kwargs["socket_timeout"] == DEFAULT_SOCKET_TIMEOUT == 0.25
    assert kwargs["socket_connect_timeout"] == DEFAULT_CONNECT_TIMEOUT == 0.25
    assert kwargs["health_check_interval"] == 0
    retry = kwargs["retry"]
    assert retry._retries == 0 and isinstance(retry._backoff, NoBackoff)
    assert store.prefix == "app:" and store.server_time is False

    other = store_from_url(
        "redis://h?socket_timeout=0.5&connect_timeout=0.75&fallback=memory",
        socket_timeout=1.5,
        max_connections=7,
        prefix="mine:",
    )
    kwargs = other.client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 1.5 and kwargs["socket_connect_timeout"] == 0.75
    assert other.client.connection_pool.max_connections == 7
    assert other.prefix == "mine:"
    assert isinstance(other.fallback, MemoryStore)
    assert (
        store_from_url("redis://h", connect_timeout=0.1).client.connection_pool.connection_kwargs[
            "socket_connect_timeout"
        ]
        == 0.1
    )
    assert (
        store_from_url(
            "redis://h?socket_connect_timeout=0.3"
        ).client.connection_pool.connection_kwargs["socket_connect_timeout"]  # redis-py's spelling
        == 0.3
    )


@pytest.mark.usefixtures("current_loop")
def test_tls_and_cluster_client_arguments() -> None:
    needs("redis")
    import redis.asyncio.cluster

    store = store_from_url(
        "rediss://h?ssl_ca_certs=/ca.pem&ssl_cert_reqs=optional&ssl_check_hostname=false"
    )
    pool = store.client.connection_pool
    assert pool.connection_class.__name__ == "SSLConnection"
    kwargs = pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == "/ca.pem" and kwargs["ssl_cert_reqs"] == "optional"
    assert kwargs["ssl_check_hostname"] is False

    # The asyncio cluster client is built at once (it connects on first use).
    cluster = store_from_url("rediss+cluster://h1:7000,[::1]:7001,h3", asyncio=True)
    client = cluster.client
    assert isinstance(client, redis.asyncio.cluster.RedisCluster)
    assert client.retry._retries == 0
    nodes = sorted((n.host, n.port) for n in client.nodes_manager.startup_nodes.values())
    assert nodes == [("::1", 7001), ("h1", 7000), ("h3", 6379)]
    assert client.connection_kwargs["connection_class"].__name__ == "SSLConnection"
    assert client.connection_kwargs["socket_timeout"] == 0.25

    sync = store_from_url("redis+cluster://h1:7000")
    assert isinstance(sync.client, LazyCluster)
    assert "RedisCluster at h1:7000" in repr(sync)


def test_sentinel_client_arguments() -> None:
    needs("redis")
    store = store_from_url(
        f"redis+sentinel://u:{q(PASSWORD)}@s1,s2:26380/mymaster?db=3"
        f"&sentinel_username=sv&sentinel_password={q(SENTINEL_PASSWORD)}"
    )
    pool = store.client.connection_pool
    assert pool.service_name == "mymaster" and pool.connection_kwargs["db"] == 3
    assert pool.connection_kwargs["credential_provider"].get_credentials() == ("u", PASSWORD)
    sentinels = pool.sentinel_manager.sentinels
    assert [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in sentinels
    ] == [("s1", 26379), ("s2", 26380)]
    sentinel_kwargs = sentinels[0].connection_pool.connection_kwargs
    assert sentinel_kwargs["socket_timeout"] == 0.25 and sentinel_kwargs["retry"]._retries == 0
    assert sentinel_kwargs["credential_provider"].get_credentials() == ("sv", SENTINEL_PASSWORD)
    assert_no_secret(repr(store))


REDIS_SCHEMES = [
    "redis",
    "rediss",
    "redis+unix",
    "redis+sentinel",
    "redis+cluster",
    "rediss+cluster",
]
VALKEY_SCHEMES = [s.replace("redis", "valkey") for s in REDIS_SCHEMES]


def dead_url(scheme: str, query: str = "") -> str:
    """A URL of ``scheme``, with a password, where nothing answers."""
    userinfo = f"bob:{q(PASSWORD)}@"
    if scheme.endswith("+unix"):
        where = f"/nonexistent-{uuid.uuid4().hex}/redis.sock"
        return f"{scheme}://{userinfo}{where}{query}"
    hosts = f"127.0.0.1:{closed_port()},127.0.0.1:{closed_port()}"
    if scheme.endswith("+sentinel"):
        return f"{scheme}://{userinfo}{hosts}/primary{query}"
    if scheme.endswith("+cluster"):
        return f"{scheme}://{userinfo}{hosts}{query}"
    return f"{scheme}://{userinfo}127.0.0.1:{closed_port()}/0{query}"


def checks(store: Any) -> List[Callable[[], Any]]:
    """Every call a limiter makes, as thunks (coroutine functions for an async store)."""
    if hasattr(store, "aapply"):
        return [
            lambda: store.aapply("k", LIMIT, 1, None),
            lambda: store.aapply_many(["{k}a", "{k}b"], [LIMIT, LIMIT], 1, T0),
            lambda: store.areset("k"),
            store.aping,
        ]
    return [
        lambda: store.apply("k", LIMIT, 1, None),
        lambda: store.apply_many(["{k}a", "{k}b"], [LIMIT, LIMIT], 1, T0),
        lambda: store.reset("k"),
        store.ping,
    ]


def with_store(url: str, asyncio_: bool, body: Callable[[Any], Any], **options: Any) -> Any:
    """``body(store)`` for the store of ``url``; for asyncio, all in one event loop.

    An asyncio store is built inside the loop that uses it, as an application
    would (at start-up): its client belongs to that loop, and redis-py 4 on
    Python 3.9 cannot build one outside a loop.  ``body`` is then a coroutine
    function; the client is closed afterwards.
    """
    if not asyncio_:
        return body(store_from_url(url, **options))

    async def go() -> Any:
        store = store_from_url(url, asyncio=True, **options)
        try:
            return await body(store)
        finally:
            await aclose(store.client)
            # A Sentinel-managed client does not close its Sentinel connections.
            manager = getattr(
                getattr(store.client, "connection_pool", None), "sentinel_manager", None
            )
            for sentinel in getattr(manager, "sentinels", ()):
                await aclose(sentinel)

    return run(go())


async def aclose(client: Any) -> None:
    close = getattr(client, "aclose", None) or client.close  # aclose: redis-py >= 5.0.1
    await close()


def time_failures(url: str, asyncio_: bool, rounds: int = 2) -> Tuple[List[Tuple[float, str]], str]:
    """(seconds, message) of each call (each must raise StoreError), and repr(store)."""
    out: List[Tuple[float, str]] = []

    def sync(store: Any) -> str:
        for _ in range(rounds):
            for thunk in checks(store):
                start = time.monotonic()
                with pytest.raises(StoreError) as info:
                    thunk()
                out.append((time.monotonic() - start, str(info.value)))
        return repr(store)

    async def asynchronous(store: Any) -> str:
        for _ in range(rounds):
            for thunk in checks(store):
                start = time.monotonic()
                with pytest.raises(StoreError) as info:
                    await thunk()
                out.append((time.monotonic() - start, str(info.value)))
        return repr(store)

    shown: str = with_store(url, asyncio_, asynchronous if asyncio_ else sync)
    return out, shown


def exercise(url: str, asyncio_: bool, **options: Any) -> Tuple[List[bool], str]:
    """ping, then four checks of one key under a 3-token bucket (frozen clock); and repr(store)."""

    def sync(store: Any) -> Tuple[List[bool], str]:
        limited = RateLimiter(LIMIT, store=store, clock=ManualClock(T0), name="t")
        store.ping()
        return [limited.allow("k") for _ in range(4)], repr(store)

    async def asynchronous(store: Any) -> Tuple[List[bool], str]:
        limited = RateLimiter(LIMIT, store=store, clock=ManualClock(T0), name="t")
        await store.aping()
        return [(await limited.acheck("k")).allowed for _ in range(4)], repr(store)

    result: Tuple[List[bool], str] = with_store(
        url, asyncio_, asynchronous if asyncio_ else sync, **options
    )
    return result


@pytest.mark.parametrize("asyncio_", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("scheme", REDIS_SCHEMES + VALKEY_SCHEMES)
def test_every_scheme_fails_fast_against_a_closed_port(
    scheme: str, asyncio_: bool, caplog: pytest.LogCaptureFixture
) -> None:
    needs("valkey" if scheme.startswith("valkey") else "redis")
    url = dead_url(scheme)
    with caplog.at_level(logging.DEBUG):
        # Built with a fail-fast configuration: the store's own check finds nothing to say.
        with_store(url, asyncio_, (lambda s: asyncio.sleep(0)) if asyncio_ else (lambda s: None))
        assert not [r for r in caplog.records if r.name == "limiter.stores"]
        timings, shown = time_failures(url, asyncio_)
        # valkey-py's asyncio cluster builds an SSL context, loading the system's CA
        # certificates, for each connection it tries: 60-270 ms of CPU per try on this
        # VM, two tries a call (0.5 s was exceeded under the suite's load). Every other
        # scheme keeps 0.5 s.
        bound = 1.0 if (scheme, asyncio_) == ("valkeys+cluster", True) else 0.5
        for seconds, message in timings:
            assert seconds < bound, (seconds, message)
            assert_no_secret(message)
        assert_no_secret(shown, log_text(caplog))

        # With fallback=memory the same dead server costs nothing: the fallback answers.
        def sync(store: Any) -> Tuple[List[bool], bool]:
            limited = RateLimiter(LIMIT, store=store, clock=ManualClock(T0))
            return [limited.allow("k") for _ in range(4)], store.using_fallback

        async def asynchronous(store: Any) -> Tuple[List[bool], bool]:
            limited = RateLimiter(LIMIT, store=store, clock=ManualClock(T0))
            return [(await limited.acheck("k")).allowed for _ in range(4)], store.using_fallback

        start = time.monotonic()
        allowed, using_fallback = with_store(
            dead_url(scheme, "?fallback=memory"), asyncio_, asynchronous if asyncio_ else sync
        )
        assert allowed == [True, True, True, False] and using_fallback
        assert time.monotonic() - start < 0.5
    assert_no_secret(log_text(caplog))


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


@pytest.mark.parametrize("asyncio_", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    "url", ["redis://{}/0", "valkey://{}/0", "redis+sentinel://{}/primary", "redis+cluster://{}"]
)
def test_a_silent_server_costs_one_socket_timeout(
    url: str, asyncio_: bool, silent_port: int
) -> None:
    needs(url.partition(":")[0].partition("+")[0])
    query = "?socket_timeout=0.1&connect_timeout=0.1"
    timings, _ = time_failures(url.format(f"127.0.0.1:{silent_port}") + query, asyncio_, 1)
    for seconds, message in timings[:2]:
        assert 0.09 < seconds < 0.5, (seconds, message)  # one timeout, no retry


# -- real servers ------------------------------------------------------------------


def server_with(*extra: str) -> Any:
    needs("redis")
    from helpers.redis_servers import RedisServer

    return RedisServer(None, *extra)


@pytest.fixture(scope="module")
def socket_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="limiter-urls-")  # short: a socket path has ~100 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def auth_server(socket_dir: str) -> Iterator[Any]:
    """A redis-server with a password, ACL users "alice" and "carol" and a Unix socket."""
    server = server_with(
        "--unixsocket", os.path.join(socket_dir, "redis.sock"), "--unixsocketperm", "700"
    )
    try:
        yield require_passwords(server.start())
    finally:
        server.remove()


def require_passwords(server: Any) -> Any:
    """Set the passwords once started (the helper's start-up probe has none)."""
    import redis

    admin = server.client()
    try:
        for user, password in (("alice", ACL_PASSWORD), ("carol", PLAIN_PASSWORD)):
            admin.acl_setuser(
                user,
                enabled=True,
                passwords=[f"+{password}"],
                keys=["*"],
                channels=["*"],
                commands=["+@all"],
            )
        admin.config_set("requirepass", PASSWORD)
    finally:
        admin.close()

    def client(**kwargs: Any) -> Any:
        kwargs.setdefault("socket_timeout", 5.0)
        kwargs.setdefault("password", PASSWORD)
        return redis.Redis(host="127.0.0.1", port=server.port, **kwargs)

    server.client = client
    return server


def keys_in(server: Any, db: int, prefix: str) -> List[bytes]:
    admin = server.client(db=db)
    try:
        return list(admin.keys(prefix + "*"))
    finally:
        admin.close()


def auth_urls(server: Any, socket_dir: str) -> Dict[str, Tuple[str, str, int]]:
    """Case -> (URL template with {pw}, the password as written in it, database)."""
    sock = os.path.join(socket_dir, "redis.sock")
    port = server.port
    return {
        "redis, default user": (f"redis://:{{pw}}@127.0.0.1:{port}/3", q(PASSWORD), 3),
        "redis, ACL user": (f"redis://alice:{{pw}}@127.0.0.1:{port}?db=4", q(ACL_PASSWORD), 4),
        "redis, unencoded": (f"redis://carol:{{pw}}@localhost:{port}", PLAIN_PASSWORD, 0),
        "redis+unix": (f"redis+unix://:{{pw}}@{sock}?db=5", q(PASSWORD), 5),
        "valkey, ACL user": (f"valkey://alice:{{pw}}@127.0.0.1:{port}/6", q(ACL_PASSWORD), 6),
        "valkey+unix": (f"valkey+unix://alice:{{pw}}@{sock}?db=7", q(ACL_PASSWORD), 7),
    }


AUTH_CASES = [
    "redis, default user",
    "redis, ACL user",
    "redis, unencoded",
    "redis+unix",
    "valkey, ACL user",
    "valkey+unix",
]


@pytest.mark.redis
@pytest.mark.parametrize("asyncio_", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", AUTH_CASES)
def test_passwords_and_acl_users_against_a_real_server(
    case: str, asyncio_: bool, auth_server: Any, socket_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    if case.startswith("valkey"):
        needs("valkey")
    template, password, db = auth_urls(auth_server, socket_dir)[case]
    prefix = unique()
    url = template.format(pw=password)
    with caplog.at_level(logging.DEBUG):
        sep = "&" if "?" in url else "?"
        allowed, shown = exercise(f"{url}{sep}prefix={q(prefix)}", asyncio_)
        assert allowed == [True, True, True, False]
        assert_no_secret(shown)
    assert keys_in(auth_server, db, prefix)  # the prefix and the database of the URL
    assert not [r for r in caplog.records if r.name == "limiter.stores"]  # no config warnings

    # A wrong password: StoreError, and no password (right or wrong) anywhere.
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        bad = template.format(pw=password + "x")
        with pytest.raises(StoreError) as info:
            exercise(bad, asyncio_)
    shown = repr(store_from_url(bad))
    text = str(info.value) + repr(info.value.__cause__) + shown + log_text(caplog)
    assert "invalid" in str(info.value).lower() or "WRONGPASS" in str(info.value)
    assert "failing" in log_text(caplog)  # the outage was logged ...
    assert_no_secret(text)  # ... without any password
    assert password + "x" not in text


@pytest.mark.redis
def test_server_time_and_options_against_a_real_server(auth_server: Any) -> None:
    url = f"redis://:{q(PASSWORD)}@127.0.0.1:{auth_server.port}/0?server_time=false"
    store = store_from_url(url, prefix=unique(), socket_timeout=2.0)
    assert store.server_time is False
    assert store.apply("k", Limit(1, 1), 1, None).allowed  # now from time.time()
    assert not store.apply("k", Limit(1, 1), 1, None).allowed


# -- TLS ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Any, int, str]]:
    """A redis-server with a TLS port and a self-signed certificate for 127.0.0.1."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not found on PATH: the rediss:// tests make a self-signed certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = str(directory / "cert.pem"), str(directory / "key.pem")
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    from helpers.redis_servers import free_port

    tls_port = free_port()
    server = server_with(
        "--tls-port", str(tls_port), "--tls-cert-file", cert, "--tls-key-file", key,
        "--tls-ca-cert-file", cert, "--tls-auth-clients", "no",
    )  # fmt: skip
    try:
        try:
            server.start()
        except RuntimeError as exc:
            if "tls" in str(exc).lower():
                pytest.skip(f"this redis-server has no TLS support: {exc}")
            raise
        yield require_passwords(server), tls_port, cert
    finally:
        server.remove()


@pytest.mark.redis
@pytest.mark.parametrize("asyncio_", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("scheme", ["rediss", "valkeys"])
def test_tls_against_a_real_server(
    scheme: str, asyncio_: bool, tls_server: Tuple[Any, int, str]
) -> None:
    if scheme == "valkeys":
        needs("valkey")
    _, port, cert = tls_server
    base = f"{scheme}://:{q(PASSWORD)}@127.0.0.1:{port}/1"
    verified = f"{base}?ssl_ca_certs={q(cert)}&prefix={unique()}"
    assert exercise(verified, asyncio_)[0] == [True, True, True, False]
    # By host name, with the certificate's DNS name.
    named = f"{scheme}://:{q(PASSWORD)}@localhost:{port}/1?ssl_ca_certs={q(cert)}&prefix={unique()}"
    assert exercise(named, asyncio_)[0][0] is True
    # Without the CA the certificate is refused: StoreError, at once.
    start = time.monotonic()
    with pytest.raises(StoreError) as info:
        exercise(base, asyncio_)
    assert time.monotonic() - start < 0.5
    chain: List[str] = []
    error: Any = info.value
    while error is not None:  # redis-py < 5 words it "Error 1 connecting to ...: 1."
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert "certificate verify failed" in " ".join(chain).lower(), chain
    # ssl_cert_reqs=none: encrypted, not verified.
    unverified = f"{base}?ssl_cert_reqs=none&prefix={unique()}"
    assert exercise(unverified, asyncio_)[0][0] is True


# -- Sentinel ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sentinel(auth_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A Sentinel (with a password of its own) watching ``auth_server`` as "primary"."""
    from helpers.redis_servers import sentinel_for

    conf_dir = tmp_path_factory.mktemp("sentinel")
    with sentinel_for(
        auth_server.port, conf_dir, password=SENTINEL_PASSWORD, master_password=PASSWORD
    ) as port:
        yield port


@pytest.mark.redis
@pytest.mark.parametrize("asyncio_", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("scheme", ["redis+sentinel", "valkey+sentinel"])
def test_sentinel_against_a_real_server(
    scheme: str, asyncio_: bool, auth_server: Any, sentinel: int, caplog: pytest.LogCaptureFixture
) -> None:
    if scheme.startswith("valkey"):
        needs("valkey")
    prefix = unique()
    url = (
        f"{scheme}://:{q(PASSWORD)}@127.0.0.1:{closed_port()},127.0.0.1:{sentinel}/primary"
        f"?db=2&sentinel_password={q(SENTINEL_PASSWORD)}&prefix={q(prefix)}"
    )
    with caplog.at_level(logging.WARNING):
        # The first Sentinel is down: the second answers.
        allowed, shown = exercise(url, asyncio_)
        assert allowed == [True, True, True, False]
    assert keys_in(auth_server, 2, prefix)
    assert not [r for r in caplog.records if r.name == "limiter.stores"]
    assert_no_secret(shown, log_text(caplog))
    # Without the Sentinel's password no master is found: StoreError, quickly.
    no_password = url.replace(f"&sentinel_password={q(SENTINEL_PASSWORD)}", "")
    start = time.monotonic()
    with pytest.raises(StoreError, match="MasterNotFoundError") as info:
        exercise(no_password, asyncio_)
    assert time.monotonic() - start < 0.5
    assert_no_secret(str(info.value))


# -- Cluster -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Any:
    needs("redis")
    from helpers.redis_servers import require_redis, shared_cluster

    require_redis(cli=True)
    return shared_cluster()  # the one test_redis_cluster uses, when both run


@pytest.mark.redis
@pytest.mark.parametrize("asyncio_", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("scheme", ["redis+cluster", "valkey+cluster"])
def test_cluster_against_a_real_cluster(
    scheme: str, asyncio_: bool, cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    if scheme.startswith("valkey"):
        needs("valkey")
    ports = cluster.ports
    url = f"{scheme}://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/?prefix={unique()}"
    assert exercise(url, asyncio_)[0] == [True, True, True, False]

    # Keys of one apply_many call must share a slot, as with any cluster client.
    def sync(store: Any) -> None:
        assert store.apply_many(["{u}a", "{u}b"], [LIMIT, LIMIT], 1, T0).allowed
        with pytest.raises(ValueError, match="share a hash tag"):
            store.apply_many(["a", "b"], [LIMIT, LIMIT], 1, T0)
        # The real client is fail-fast by the store's own rules (no warning).
        from limiter.backends.redis import RedisStore

        real = store.client.connect()
        assert real.retry._retries == 0
        legacy = scheme.startswith("valkey") or int(sys.modules["redis"].__version__[0]) < 6
        if legacy:  # these retry cluster_error_retry_attempts times, whatever the retry
            assert real.cluster_error_retry_attempts == 0
        with caplog.at_level(logging.WARNING):
            RedisStore(real)
        assert not [r for r in caplog.records if r.name == "limiter.stores"], log_text(caplog)
        store.client.close()

    async def asynchronous(store: Any) -> None:
        assert (await store.aapply_many(["{u}a", "{u}b"], [LIMIT, LIMIT], 1, T0)).allowed
        with pytest.raises(ValueError, match="share a hash tag"):
            await store.aapply_many(["a", "b"], [LIMIT, LIMIT], 1, T0)

    with_store(url, asyncio_, asynchronous if asyncio_ else sync)


def test_a_rate_limiter_takes_a_store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    limiter = RateLimiter("2/minute", store="sqlite:///limits.db", clock=ManualClock(1e9))
    assert type(limiter.store).__name__ == "SQLiteStore"
    assert [limiter.allow("k") for _ in range(3)] == [True, True, False]
    # A URL names a shared store: keys are namespaced like any given store's.
    assert limiter.storage_key("k") == limiter.name.replace(":", "\\:") + ":k"
    limiter.store.close()  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="nosuch"):
        RateLimiter("2/minute", store="nosuch://x")


@pytest.mark.parametrize(
    "url, shown",
    [
        ("redis://app:Tr0ub?dor=3@cache:6379/0", "redis://app:***@cache:6379/0"),
        ("redis://app:a?b&c@cache/0", "redis://app:***@cache/0"),
        ("redis://app:pa?ss@cache/0", "redis://app:***@cache/0"),
    ],
)
def test_an_unencoded_question_mark_in_a_password_is_never_shown(url: str, shown: str) -> None:
    # "?dor=3@..." reads as a query, yet it may be the rest of a password:
    # redact_url hides too much rather than too little, and so do the errors.
    assert redact_url(url) == shown
    secret = url.split(":")[2].split("@")[0]
    try:
        store_from_url(url.replace("cache", "127.0.0.1"))
    except ValueError as exc:
        assert secret not in str(exc) and secret.split("?")[1] not in str(exc)


# -- no password survives redaction, whatever it contains ----------------------------

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PASSWORD_CHARS = "abcXYZ019?=#/@:&%!~+;,$ "
_PASSWORDS = st.text(_PASSWORD_CHARS, min_size=4, max_size=20).map(lambda t: "Zq" + t)


def _urls_with(password: str) -> List[str]:
    raw, coded = password, quote(password, safe="")
    return [
        f"redis://app:{raw}@cache.example:6379/0",
        f"rediss://app:{raw}@cache.example:6380/1?sentinel_password={coded}",
        f"redis://:{raw}@cache.example/0?sentinel_password={coded}&db=2",
        f"redis+sentinel://app:{raw}@s1.example:26379/mymaster?sentinel_password={coded}",
        f"redis://cache.example/0?password={coded}",
        f"redis://cache.example/0?auth_token={coded}&client_secret={coded}",
    ]


@settings(max_examples=150, deadline=None)
@given(_PASSWORDS)
@example("Zq0@?=")  # "@?" in the userinfo once hid the real query's sentinel_password
def test_no_password_survives_redact_url(password: str) -> None:
    for url in _urls_with(password):
        assert password not in redact_url(url), url
        assert quote(password, safe="") not in redact_url(url), url


@settings(max_examples=60, deadline=None)
@given(_PASSWORDS, st.sampled_from([":99999999/0", ":6379/x", ":6379/0?nope=1", ":port/0"]))
def test_no_password_in_a_store_from_url_error(password: str, bad: str) -> None:
    coded = quote(password, safe="")
    for url in [
        f"redis://app:{password}@cache.example{bad}",
        f"redis://app:{coded}@cache.example{bad}{'&' if '?' in bad else '?'}"
        f"sentinel_password={coded}",
    ]:
        try:
            store = store_from_url(url)
        except Exception as error:
            shown = f"{error} {error!r}"
        else:
            shown = repr(store)
        assert password not in shown and coded not in shown, (url, shown)
