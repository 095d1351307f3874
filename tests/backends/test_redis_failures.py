"""Redis going away mid-run: on_error through the WSGI middleware, StoreError only, fallback.

Also: how long a check waits with the client docs/stores.md shows (a closed
port, a server that accepts and never answers), the outage log, ``ping()``,
and what each ``maxmemory-policy`` does to exhausted buckets.

Each test starts its own redis-server (it gets killed), on a free loopback port.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from helpers.redis_servers import RedisServer, free_port
from limiter import Limit, ManualClock, MemoryStore, RateLimiter, StoreError
from limiter.adapters.wsgi import RateLimitMiddleware
from limiter.backends.redis import AsyncRedisStore, RedisStore, redis_key
from limiter.testing import T0

pytestmark = pytest.mark.redis

LIMIT = Limit(0.001, 5)  # with a frozen clock, exactly 5 requests per key pass


@pytest.fixture
def server(own_server: RedisServer) -> RedisServer:
    """Not conftest's module-wide server: each test here kills its own."""
    return own_server


def short_timeouts(server: RedisServer) -> redis.Redis:
    # What docs/stores.md recommends: a check never waits long for a dead server
    # (redis-py's default retries back off for seconds), here with 0.2 s timeouts.
    return server.client(
        socket_timeout=0.2, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )


def hello(environ: Dict[str, Any], start_response: Callable[..., Any]) -> List[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def get(app: Any, ip: str = "192.0.2.1") -> Tuple[int, Dict[str, str]]:
    """One in-process WSGI request; returns the status code and headers."""
    seen: Dict[str, Any] = {}

    def start_response(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        seen["status"] = int(status.split()[0])
        seen["headers"] = dict(headers)
        return lambda data: None

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "SERVER_NAME": "test",
        "SERVER_PORT": "80",
        "REMOTE_ADDR": ip,
        "wsgi.url_scheme": "http",
    }
    body = app(environ, start_response)
    b"".join(body)
    if hasattr(body, "close"):
        body.close()
    return seen["status"], seen["headers"]


def limited(headers: Dict[str, str]) -> bool:
    return any(name.lower().startswith("x-ratelimit") for name in headers)


def requests_until_limiting(app: Any, ip: str) -> int:
    """How many requests it takes until one is answered with rate-limit headers again.

    Counted, not timed: on a busy machine the time varies, while a store that
    backed off or tripped a breaker would refuse many requests in a row.
    """
    deadline = time.monotonic() + 60  # generous: a busy machine
    for requests in itertools.count(1):
        _, headers = get(app, ip)
        if limited(headers):
            return requests
        assert time.monotonic() < deadline, "limiting did not resume"
        time.sleep(0.01)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("on_error, outage_status", [("allow", 200), ("deny", 503)])
def test_killing_redis_mid_run(server: RedisServer, on_error: str, outage_status: int) -> None:
    store = RedisStore(short_timeouts(server), prefix="app:")
    limiter = RateLimiter(LIMIT, store=store, clock=ManualClock(T0))
    app = RateLimitMiddleware(hello, limiter, on_error=on_error)

    assert [get(app, "10.0.0.1")[0] for _ in range(6)] == [200] * 5 + [429]
    assert [get(app, "10.0.0.2")[0] for _ in range(2)] == [200] * 2

    server.stop()  # SIGKILL: the server is gone mid-run
    outage = [get(app, f"10.0.0.{i % 4}") for i in range(40)]  # no exception escapes
    assert {status for status, _ in outage} == {outage_status}
    assert not any(limited(headers) for _, headers in outage)
    with pytest.raises(StoreError):  # what the middleware saw: a StoreError
        store.apply("x", LIMIT, 1, T0)

    server.start()  # same port, empty (no persistence), no script cached
    assert requests_until_limiting(app, "10.0.0.3") <= 3  # at once (1), but for a slow answer
    # Limiting for real again: a fresh bucket of exactly 5.
    statuses = [get(app, "10.0.0.9")[0] for _ in range(6)]
    assert statuses == [200] * 5 + [429]


def test_every_failure_is_a_store_error(server: RedisServer) -> None:
    store = RedisStore(short_timeouts(server), prefix="app:")
    assert store.apply("k", LIMIT, 1, T0).allowed
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)  # alive but silent: a timeout
    try:
        for call in (
            lambda: store.apply("k", LIMIT, 1, T0),
            lambda: store.apply_many(["{k}a", "{k}b"], [LIMIT, LIMIT], 1, T0),
            lambda: store.apply("k", LIMIT, 1, None),  # server time
            lambda: store.reset("k"),
        ):
            with pytest.raises(StoreError) as info:
                call()
            assert isinstance(info.value.__cause__, redis.RedisError)
    finally:
        server.proc.send_signal(signal.SIGCONT)
    server.stop()  # refused connections
    for _ in range(3):
        with pytest.raises(StoreError, match="Error"):
            store.apply("k", LIMIT, 1, T0)
    with pytest.raises(ValueError):  # bad input is still a ValueError, not a StoreError
        store.apply("k", LIMIT, -1, T0)


def test_async_store_failures_are_store_errors_and_it_recovers(server: RedisServer) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(
            port=server.port,
            socket_timeout=0.2,
            socket_connect_timeout=0.2,
            retry=AsyncRetry(NoBackoff(), 1),
        )
        store = AsyncRedisStore(client, prefix="app:")
        assert (await store.aapply("k", LIMIT, 1, T0)).allowed
        server.stop()
        for _ in range(3):
            with pytest.raises(StoreError):
                await store.aapply("k", LIMIT, 1, T0)
        with pytest.raises(StoreError):
            await store.areset("k")
        server.start()
        deadline = time.monotonic() + 30  # generous: a busy machine
        while True:
            try:
                result = await store.aapply("k", LIMIT, 1, T0)
                break
            except StoreError:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
        assert result.remaining == 4  # the restarted server is empty: a full bucket
        await client.aclose()

    asyncio.run(scenario())


class Listener:
    """A loopback port that accepts TCP connections in a thread; ``take`` decides what then."""

    def __init__(self, port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.sock.settimeout(0.02)
        self.port: int = self.sock.getsockname()[1]
        self.held: List[socket.socket] = []
        self.connections = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # the accept timeout: look at stopping again
                continue
            self.connections += 1
            self.take(conn)

    def take(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stopping = True
        self.thread.join(5)
        for conn in self.held:
            conn.close()
        self.sock.close()


class CountingListener(Listener):
    """A port that accepts TCP connections, counts them and hangs up: a broken Redis."""

    def take(self, conn: socket.socket) -> None:
        conn.close()


def test_fallback_limits_per_process_and_probes_with_backoff(server: RedisServer) -> None:
    client = short_timeouts(server)
    probes = ManualClock()
    store = RedisStore(client, prefix="app:", fallback=MemoryStore(), probe_clock=probes)
    assert store.apply("k", LIMIT, 2, T0).allowed  # on Redis: 3 left

    server.stop()
    listener = CountingListener(server.port)
    try:
        # The first failure switches to the fallback: a fresh bucket of 5 there.
        assert [store.apply("k", LIMIT, 1, T0).allowed for _ in range(6)] == [1] * 5 + [0]
        assert store.using_fallback
        attempts = listener.connections
        assert attempts >= 1
        # No connect storm: 200 more checks, and not one connection attempt.
        for _ in range(200):
            assert not store.apply("k", LIMIT, 1, T0).allowed
        assert listener.connections == attempts
        # A probe is due after 0.5 s; it fails, so the next one waits 1 s.
        probes.advance(0.5)
        store.apply("k", LIMIT, 0, T0)
        per_probe = listener.connections - attempts
        assert per_probe >= 1
        probes.advance(0.9)
        store.apply("k", LIMIT, 0, T0)
        assert listener.connections == attempts + per_probe  # not yet
        probes.advance(0.1)
        store.apply("k", LIMIT, 0, T0)
        assert listener.connections == attempts + 2 * per_probe
    finally:
        listener.close()

    server.start()
    assert store.apply("k", LIMIT, 0, T0).remaining == 0  # still on the fallback: no probe due
    probes.advance(2.0)
    result = store.apply("k", LIMIT, 1, T0)  # the probe succeeds: back on the (empty) server
    assert not store.using_fallback
    assert result.allowed and result.remaining == 4
    assert client.exists(redis_key("k", "app:"))


def test_fallback_serves_several_limits_and_resets(server: RedisServer) -> None:
    store = RedisStore(short_timeouts(server), prefix="app:", fallback=MemoryStore())
    limits = [Limit(0.001, 2), Limit(0.001, 3)]
    server.stop()
    results = [store.apply_many(["{u}:a", "{u}:b"], limits, 1, T0).allowed for _ in range(3)]
    assert results == [True, True, False]
    # A reset while Redis is down resets the fallback but says Redis failed:
    # an operator's "unblock this client" must not succeed silently.
    with pytest.raises(StoreError):
        store.reset("{u}:a")
    assert store.apply_many(["{u}:a", "{u}:b"], limits, 1, T0).allowed


def test_a_reset_during_an_outage_is_not_lost(server: RedisServer) -> None:
    # It used to return normally while the breaker served the fallback, and the
    # shared bucket stayed exhausted once Redis came back.
    store = RedisStore(short_timeouts(server), prefix="app:", fallback=MemoryStore())
    limit = Limit(0.001, 1)
    assert store.apply("eve", limit, 1, T0).allowed
    assert not store.apply("eve", limit, 1, T0).allowed  # exhausted in Redis
    server.stop()
    store.apply("probe", limit, 1, T0)  # the breaker now serves the fallback
    assert store.using_fallback
    with pytest.raises(StoreError):
        store.reset("eve")
    server.start()
    store.reset("eve")  # tried at once, not skipped while the breaker waits
    assert store.apply("eve", limit, 1, T0).allowed


def test_script_flush_mid_run_is_invisible(server: RedisServer) -> None:
    client = short_timeouts(server)
    limiter = RateLimiter(Limit(0.001, 50), store=RedisStore(client), clock=ManualClock(T0))
    admitted = 0
    for i in range(60):
        if i % 7 == 0:
            client.script_flush()
        admitted += limiter.allow("k")
    assert admitted == 50


# -- how long a check waits: the documented clients, a dead or silent server ----------

LOGGER = "limiter.stores"


def documented_client(port: int) -> redis.Redis:
    """The first client of docs/stores.md, on ``port``."""
    return redis.Redis.from_url(
        f"redis://127.0.0.1:{port}/0",
        socket_timeout=0.1,
        socket_connect_timeout=0.1,
        retry=Retry(NoBackoff(), 0),
    )


def documented_async_client(port: int) -> redis.asyncio.Redis:
    """The asyncio client of docs/stores.md, on ``port``."""
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        f"redis://127.0.0.1:{port}/0",
        max_connections=50,
        timeout=1,
        socket_timeout=0.1,
        socket_connect_timeout=0.1,
        retry=AsyncRetry(NoBackoff(), 0),
    )
    return redis.asyncio.Redis(connection_pool=pool)


def documented_valkey_client(port: int) -> Any:
    """The valkey-py client of docs/stores.md, on ``port``."""
    pytest.importorskip("valkey")
    import valkey
    import valkey.backoff
    import valkey.retry

    return valkey.Valkey.from_url(
        f"redis://127.0.0.1:{port}/0",
        socket_timeout=0.1,
        socket_connect_timeout=0.1,
        retry=valkey.retry.Retry(valkey.backoff.NoBackoff(), 0),
    )


class SilentServer(Listener):
    """A loopback port that accepts connections and never answers: a hung Redis."""

    def take(self, conn: socket.socket) -> None:
        self.held.append(conn)  # read nothing, answer nothing


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    s = SilentServer()
    yield s
    s.close()


def timed(call: Callable[[], Any]) -> Tuple[float, BaseException]:
    """Seconds until ``call()`` raised StoreError (it must), and the error."""
    start = time.monotonic()
    with pytest.raises(StoreError) as info:
        call()
    return time.monotonic() - start, info.value


@pytest.mark.parametrize("make", [documented_client, documented_valkey_client])
def test_documented_client_fails_fast_when_redis_is_down(make: Callable[[int], Any]) -> None:
    """Before: with redis-py's default retries, 3.2 to 4.1 s per check; now a refusal is at once."""
    store = RedisStore(make(free_port()))  # nobody listens there
    calls: List[Callable[[], Any]] = [
        lambda: store.apply("k", LIMIT, 1, None),
        lambda: store.apply_many(["{k}a", "{k}b"], [LIMIT, LIMIT], 1, T0),
        lambda: store.reset("k"),
        store.ping,
    ]
    for call in calls * 3:
        seconds, error = timed(call)
        assert seconds < 0.5, seconds
        assert isinstance(error.__cause__, Exception)
        assert "Connection refused" in str(error) or "Error 111" in str(error)


@pytest.mark.parametrize("make", [documented_client, documented_valkey_client])
def test_documented_client_is_bounded_by_socket_timeout_on_a_silent_server(
    silent: SilentServer, make: Callable[[int], Any]
) -> None:
    """Before: no socket_timeout hung for over 45 s; with default retries, 4.8 s."""
    store = RedisStore(make(silent.port))
    for call in (lambda: store.apply("k", LIMIT, 1, None), lambda: store.reset("k")):
        seconds, error = timed(call)
        assert 0.09 < seconds < 0.5, seconds  # one socket_timeout (0.1 s), no retry
        assert "Timeout" in str(error)
    assert len(silent.held) <= 2  # one connection attempt per check: no retries


def test_documented_async_client_is_bounded_too(silent: SilentServer) -> None:
    async def scenario() -> List[float]:
        seconds: List[float] = []
        for port in (free_port(), silent.port):
            client = documented_async_client(port)
            store = AsyncRedisStore(client)
            for call in (lambda s=store: s.aapply("k", LIMIT, 1, None), store.aping):
                start = time.monotonic()
                with pytest.raises(StoreError):
                    await call()
                seconds.append(time.monotonic() - start)
            await client.aclose()
        return seconds

    refused_apply, refused_ping, silent_apply, silent_ping = asyncio.run(scenario())
    assert refused_apply < 0.5 and refused_ping < 0.5
    assert 0.09 < silent_apply < 0.5 and 0.09 < silent_ping < 0.5


# -- the outage log and ping() -------------------------------------------------------------


def store_records(caplog: pytest.LogCaptureFixture, level: int) -> List[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_first_failure_and_recovery_are_logged_once(
    server: RedisServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from limiter.backends import _failover as _fallback

    monkeypatch.setattr(_fallback, "ERROR_LOG_INTERVAL", 0.0)  # log every outage
    store = RedisStore(short_timeouts(server), prefix="app:")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert store.apply("k", LIMIT, 1, T0).allowed
        for outage in (1, 2):
            server.stop()
            for _ in range(5):
                with pytest.raises(StoreError):
                    store.apply("k", LIMIT, 1, T0)
            with pytest.raises(StoreError):
                store.reset("k")
            errors = store_records(caplog, logging.ERROR)
            assert len(errors) == outage  # the first failure of each outage only
            assert errors[-1].getMessage().startswith("RedisStore is failing: ConnectionError: ")
            assert errors[-1].exc_info is not None
            assert isinstance(errors[-1].exc_info[1].__cause__, redis.ConnectionError)
            server.start()
            deadline = time.monotonic() + 30  # generous: a busy machine
            while True:
                try:
                    store.apply("k", LIMIT, 0, T0)
                    break
                except StoreError:
                    assert time.monotonic() < deadline
            recoveries = [r.getMessage() for r in store_records(caplog, logging.WARNING)]
            assert recoveries == ["RedisStore answers again"] * outage


def test_with_a_fallback_the_first_failure_is_an_error_too(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    probes = ManualClock()
    store = RedisStore(
        short_timeouts(server), prefix="app:", fallback=MemoryStore(), probe_clock=probes
    )
    server.stop()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(5):
            store.apply("k", LIMIT, 1, T0)
        server.start()
        probes.advance(1)
        store.apply("k", LIMIT, 1, T0)
    [error] = store_records(caplog, logging.ERROR)
    assert error.getMessage().startswith(
        "RedisStore is failing; the fallback store answers, probing again in 0.5s: ConnectionError"
    )
    [recovered] = store_records(caplog, logging.WARNING)
    assert recovered.getMessage() == "RedisStore answers again; leaving the fallback store"


def test_ping_checks_what_a_check_needs(server: RedisServer) -> None:
    client = short_timeouts(server)
    store = RedisStore(client, prefix="app:", fallback=MemoryStore())
    assert store.ping() is None
    assert client.keys("*") == []  # a peek: nothing written
    # A Redis user that may not run scripts: every check would fail.
    client.acl_setuser(
        "noscripts",
        enabled=True,
        passwords=["+pw"],
        keys=["*"],
        commands=["+@all", "-evalsha", "-eval"],
    )
    limited = server.client(username="noscripts", password="pw", retry=Retry(NoBackoff(), 0))
    with pytest.raises(StoreError, match=r"NoPermission|NOPERM|permission"):
        RedisStore(limited, fallback=MemoryStore()).ping()  # never the fallback's answer
    server.stop()
    with pytest.raises(StoreError):
        store.ping()


def test_aping(server: RedisServer) -> None:
    async def scenario() -> None:
        client = documented_async_client(server.port)
        store = AsyncRedisStore(client, server_time=False)
        assert await store.aping() is None
        server.stop()
        with pytest.raises(StoreError):
            await store.aping()
        await client.aclose()

    asyncio.run(scenario())


# -- maxmemory-policy: what Redis forgets when memory is full ----------------------------

HOURLY = Limit(10 / 3600, 10)  # 10 an hour: an exhausted bucket keeps a TTL of an hour


@pytest.mark.parametrize(
    "policy, filler_ttl_ms, victim_after",
    [
        ("allkeys-lru", None, 10),  # the exhausted bucket is evicted: a whole new burst
        ("volatile-lru", 60_000, 10),  # every limiter key has a TTL: the same
        ("volatile-ttl", 60_000, 0),  # keys closest to expiry go first: the victim stays
    ],
)
def test_maxmemory_policy_and_exhausted_buckets(
    policy: str, filler_ttl_ms: Any, victim_after: int
) -> None:
    """docs/stores.md's table: an evicted bucket is a full bucket."""
    server = RedisServer(None, "--maxmemory-policy", policy).start()
    try:
        client = short_timeouts(server)
        client.config_set("maxmemory", client.info("memory")["used_memory"] + 1024 * 1024)
        store = RedisStore(client, prefix="app:")
        assert sum(store.apply("victim", HOURLY, 1, None).allowed for _ in range(11)) == 10
        victim = redis_key("victim", "app:")
        value = b"x" * 10_000
        written = 0
        while written < 5_000 and (policy == "volatile-ttl" or client.exists(victim)):
            pipe = client.pipeline(transaction=False)
            for i in range(written, written + 50):
                pipe.set(f"fill:{i}", value, px=filler_ttl_ms)
            pipe.execute()
            written += 50
            if policy == "volatile-ttl" and written >= 500:  # 5 MB through 1 MB
                break
        assert client.info("stats")["evicted_keys"] > 0
        assert bool(client.exists(victim)) == (victim_after == 0)
        again = sum(store.apply("victim", HOURLY, 1, None).allowed for _ in range(11))
        assert again == victim_after  # 20 for a burst of 10 with an LRU policy
    finally:
        server.remove()


def test_noeviction_keeps_every_bucket_and_fails_writes_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer(None, "--maxmemory-policy", "noeviction").start()
    try:
        client = short_timeouts(server)
        store = RedisStore(client, prefix="app:")
        store.ping()  # the script loaded first: the 256 kB below are for buckets
        client.config_set("maxmemory", client.info("memory")["used_memory"] + 256 * 1024)
        assert sum(store.apply("victim", HOURLY, 1, None).allowed for _ in range(11)) == 10
        caplog.set_level(logging.WARNING, logger=LOGGER)
        with pytest.raises(StoreError, match=r"OutOfMemory|OOM|maxmemory") as info:
            for i in range(100_000):  # new clients until Redis refuses to write
                store.apply(f"client-{i}", HOURLY, 1, None)
        assert isinstance(info.value.__cause__, redis.ResponseError)
        [error] = store_records(caplog, logging.ERROR)
        assert "maxmemory" in error.getMessage()
        # A denial writes nothing: the exhausted bucket still answers, and is kept.
        assert not store.apply("victim", HOURLY, 1, None).allowed
        # Used memory moves with client buffers (once in CI the error reply freed
        # enough for one more key): pin the limit well below it, no eviction either way.
        client.config_set("maxmemory", client.info("memory")["used_memory"] // 2)
        assert not store.apply("victim", HOURLY, 1, None).allowed
        with pytest.raises(StoreError):
            store.apply("newcomer", HOURLY, 1, None)  # an admission must write: refused
    finally:
        server.remove()


# -- a malformed script reply ------------------------------------------------------------


class _Garbled:
    """A client whose script replies are not the script's (a proxy in between, say)."""

    def evalsha(self, *args: Any) -> bytes:
        return b"not a reply"

    def eval(self, *args: Any) -> bytes:
        return b"not a reply"

    def delete(self, *args: Any) -> int:
        return 1


class _AsyncGarbled(_Garbled):
    async def evalsha(self, *args: Any) -> bytes:  # type: ignore[override]
        return b"not a reply"

    async def delete(self, *args: Any) -> int:  # type: ignore[override]
        return 1


class _SyncOnly:
    """A fallback with sync methods only: AsyncRedisStore adapts it once."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.apply = self.store.apply
        self.apply_many = self.store.apply_many
        self.reset = self.store.reset


def test_a_malformed_reply_is_a_failure_like_any_other() -> None:
    with pytest.raises(StoreError, match="unexpected script reply"):
        RedisStore(_Garbled()).apply("k", LIMIT, 1, T0)
    store = RedisStore(_Garbled(), fallback=MemoryStore(), probe_clock=ManualClock())
    assert [store.apply("k", LIMIT, 1, T0).allowed for _ in range(6)] == [1] * 5 + [0]
    assert store.using_fallback
    assert store.apply_many(["a", "b"], [LIMIT, LIMIT], 1, T0).allowed
    with pytest.raises(StoreError, match="unexpected script reply"):
        store.ping()  # never the fallback's answer


def test_async_malformed_reply_and_a_sync_only_fallback() -> None:
    async def scenario() -> None:
        with pytest.raises(StoreError, match="unexpected script reply"):
            await AsyncRedisStore(_AsyncGarbled()).aapply("k", LIMIT, 1, T0)
        fallback = _SyncOnly()
        store = AsyncRedisStore(_AsyncGarbled(), fallback=fallback, probe_clock=ManualClock())
        assert [(await store.aapply("k", LIMIT, 1, T0)).allowed for _ in range(6)] == [1] * 5 + [0]
        assert store.using_fallback
        assert (await store.aapply_many(["a", "b"], [LIMIT, LIMIT], 1, T0)).allowed
        await store.areset("k")
        assert len(fallback.store) == 2

    asyncio.run(scenario())


# -- the connection-level fast path (issue 14 item 2) ------------------------------------
#
# A plain redis.Redis client's checks are sent on the store's own connections
# (limiter.backends.redis._connection); these tests hold it to the client path's
# behaviour: the same results, StoreError on failure, and a broken connection
# never reused.


_NAME = "limiter-close-test"  # the store's connections, as CLIENT LIST names them


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the test's own, beside the store's: it pauses, kills and counts them."""
    client = server.client()
    yield client
    client.close()


@pytest.fixture
def named_client(server: RedisServer) -> Iterator[redis.Redis]:
    """A client whose connections ``CLIENT LIST`` shows by name (see _store_connections)."""
    client = server.client(client_name=_NAME)
    yield client
    client.close()


class _ThroughClient:
    """A client the fast path does not recognise: every check goes through ``evalsha``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def evalsha(self, *args: Any) -> Any:
        return self.client.evalsha(*args)

    def eval(self, *args: Any) -> Any:
        return self.client.eval(*args)

    def delete(self, *args: Any) -> Any:
        return self.client.delete(*args)


def test_fast_path_gives_the_client_paths_results(server: RedisServer) -> None:
    client = short_timeouts(server)
    fast = RedisStore(client, prefix="fast:")
    slow = RedisStore(_ThroughClient(client), prefix="slow:")
    assert fast._conns is not None and slow._conns is None  # both paths are under test
    limits = [Limit(2, 3), Limit(0.5, 10), Limit(1000, 1)]
    now = T0
    for i in range(200):
        now += (i % 7) * 0.11
        cost = (0, 1, 2, 0.5)[i % 4]
        limit = limits[i % 3]
        assert fast.apply(f"k{i % 5}", limit, cost, now) == slow.apply(
            f"k{i % 5}", limit, cost, now
        )
        keys = [f"{{m{i % 3}}}a", f"{{m{i % 3}}}b"]
        assert fast.apply_many(keys, limits[:2], cost, now) == slow.apply_many(
            keys, limits[:2], cost, now
        )
    fast.reset("k1")
    slow.reset("k1")
    assert fast.apply("k1", limits[0], 1, now) == slow.apply("k1", limits[0], 1, now)
    assert fast.apply("srv", limits[1], 1, None).remaining == 9  # the server's TIME


def test_fast_path_restart_is_a_store_error_then_a_fresh_connection(server: RedisServer) -> None:
    store = RedisStore(short_timeouts(server), prefix="app:")
    assert [store.apply("k", LIMIT, 1, T0).remaining for _ in range(2)] == [4, 3]
    server.stop()
    for _ in range(3):
        with pytest.raises(StoreError, match="ConnectionError"):
            store.apply("k", LIMIT, 1, T0)
    server.start()  # empty, no script cached: the next check reconnects and sends EVAL
    assert [store.apply("k", LIMIT, 1, T0).remaining for _ in range(2)] == [4, 3]


def test_fast_path_honours_socket_timeout_and_drops_the_late_reply(
    server: RedisServer, admin: redis.Redis
) -> None:
    store = RedisStore(short_timeouts(server), prefix="app:")
    assert [store.apply("k", LIMIT, 1, T0).remaining for _ in range(2)] == [4, 3]
    admin.execute_command("CLIENT", "PAUSE", 800)  # every other client's commands wait
    seconds, error = timed(lambda: store.apply("k", LIMIT, 0, T0))  # a peek: charges nothing
    assert 0.15 < seconds < 0.75, seconds  # one socket_timeout (0.2 s), no retry
    assert "Timeout" in str(error)
    assert admin.ping()  # waits for the pause to end; the peek's reply is late by now
    # The connection that timed out was dropped with the late reply unread: the
    # next check reads its own reply (remaining 2), not the peek's (3).
    assert store.apply("k", LIMIT, 1, T0).remaining == 2


def test_fast_path_recovers_transparently_from_client_kill(
    server: RedisServer, admin: redis.Redis
) -> None:
    client = short_timeouts(server)
    store = RedisStore(client, prefix="app:")
    assert store.apply("k", LIMIT, 1, T0).remaining == 4
    assert admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") >= 1
    # The store sees the idle connection closed (one poll() before each use)
    # and reconnects: the check goes through, as the client's pool would do.
    assert store.apply("k", LIMIT, 1, T0).remaining == 3
    admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    store.ping()
    assert store.apply("k", LIMIT, 1, T0).remaining == 2


def test_fast_path_threads_get_exact_counts(server: RedisServer, admin: redis.Redis) -> None:
    store = RedisStore(server.client(), prefix="app:")
    limit = Limit(0.001, 1000)  # a frozen clock: nothing refills
    admitted: List[int] = []
    start = threading.Barrier(8)

    def hammer() -> None:
        start.wait()
        admitted.append(sum(store.apply("hot", limit, 1, T0).allowed for _ in range(300)))

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(admitted) == 1000 and len(admitted) == 8
    # At most one connection per thread, each used by one thread at a time.
    assert len(admin.client_list()) <= 8 + 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
# The fork is the point (gunicorn --preload does it); 3.12 warns when the worker process
# has threads left by earlier tests, which the child never touches.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fast_path_is_fork_safe(server: RedisServer, admin: redis.Redis) -> None:
    """gunicorn --preload: a store used in the parent goes on working in forked children."""
    store = RedisStore(short_timeouts(server), prefix="app:")
    limit = Limit(0.001, 100)
    assert store.apply("hot", limit, 30, T0).remaining == 70  # the parent holds a connection
    admin.ping()
    received = int(admin.info("stats")["total_connections_received"])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own connection, never the parent's socket
        code = 1
        try:
            admitted = sum(store.apply("hot", limit, 1, T0).allowed for _ in range(50))
            os.write(write, str(admitted).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            child = int(pipe.read() or -1)
    finally:
        _, status = os.waitpid(pid, 0)
    assert status == 0 and child == 50
    # The parent's connection is intact (the child neither used nor shut it
    # down): the parent reconnects nothing, and the counts are shared.
    assert [store.apply("hot", limit, 1, T0).allowed for _ in range(21)] == [True] * 20 + [False]
    assert int(admin.info("stats")["total_connections_received"]) == received + 1


# -- review of the fast path: instrumented clients, no poll(), close() -------------------


def _evalsha_seen(calls: List[Any]) -> int:
    return sum(1 for args in calls if args and args[0] == "EVALSHA")


def test_fast_path_skips_a_tracer_that_patches_the_class_without_wraps(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sentry-sdk's redis integration: ``cls.execute_command = patched`` (no ``__wrapped__``)."""
    seen: List[Any] = []
    original = redis.Redis.execute_command

    def patched(self: Any, *args: Any, **options: Any) -> Any:
        seen.append(args)
        return original(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", patched)
    store = RedisStore(short_timeouts(server), prefix="traced:")
    assert store._conns is None
    assert [store.apply("k", LIMIT, 1, T0).remaining for _ in range(3)] == [4, 3, 2]
    assert _evalsha_seen(seen) == 3  # the tracer saw every check


def test_fast_path_skips_a_client_patched_on_the_instance(server: RedisServer) -> None:
    client = short_timeouts(server)
    seen: List[Any] = []
    original = client.execute_command

    def patched(*args: Any, **options: Any) -> Any:
        seen.append(args)
        return original(*args, **options)

    client.execute_command = patched  # type: ignore[method-assign]
    store = RedisStore(client, prefix="traced:")
    assert store._conns is None
    assert [store.apply("k", LIMIT, 1, T0).remaining for _ in range(2)] == [4, 3]
    assert _evalsha_seen(seen) == 2


def test_fast_path_without_poll_reconnects_a_connection_closed_while_idle(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, admin: redis.Redis
) -> None:
    """Where ``select.poll`` is missing (Windows), ``can_read()`` tests the idle connection."""
    from limiter.backends.redis import _connection as _redis_conn

    monkeypatch.setattr(_redis_conn, "_HAS_POLL", False)
    store = RedisStore(short_timeouts(server), prefix="app:")
    assert store.apply("k", LIMIT, 1, T0).remaining == 4
    assert admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") >= 1
    assert store.apply("k", LIMIT, 1, T0).remaining == 3  # reconnected, not a StoreError


def _store_connections(admin: redis.Redis, expect: int) -> int:
    """The named client's connections in ``CLIENT LIST``, once they are ``expect`` (or after 10 s).

    A socket closed by the client is seen by the server on a later pass over
    its events, possibly after the ``CLIENT LIST`` that follows the close: ask
    again (each call a round trip, no sleep) until the count settles.
    """
    deadline = time.monotonic() + 10
    while True:
        found = sum(1 for c in admin.client_list() if c.get("name") == _NAME)
        if found == expect or time.monotonic() > deadline:
            return found


def test_close_disconnects_the_fast_path_connections_and_the_store_reconnects(
    named_client: redis.Redis, admin: redis.Redis
) -> None:
    store = RedisStore(named_client, prefix="app:")
    assert store.apply("k", LIMIT, 1, T0).remaining == 4
    assert _store_connections(admin, 1) == 1
    store.close()
    assert _store_connections(admin, 0) == 0
    store.close()  # twice is fine
    assert store.apply("k", LIMIT, 1, T0).remaining == 3  # reconnects
    assert _store_connections(admin, 1) == 1
    store.close()
    assert _store_connections(admin, 0) == 0
    # The client is the caller's: close() leaves it working.
    assert named_client.ping()
    # A store on the client's own path has nothing of its own to close.
    slow = RedisStore(_ThroughClient(named_client), prefix="app:")
    slow.close()
    assert slow.apply("k", LIMIT, 1, T0).remaining == 2


def test_close_while_a_check_is_in_flight_disconnects_it_when_it_ends(
    named_client: redis.Redis, admin: redis.Redis
) -> None:
    store = RedisStore(named_client, prefix="app:")
    assert store.apply("k", LIMIT, 1, T0).remaining == 4
    admin.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    results: List[int] = []
    thread = threading.Thread(
        target=lambda: results.append(store.apply("k", LIMIT, 1, T0).remaining)
    )
    thread.start()
    deadline = time.monotonic() + 30
    while int(admin.info("clients")["blocked_clients"]) != 1:
        assert time.monotonic() < deadline
    store.close()  # the connection in use is not in the free list now
    admin.execute_command("CLIENT", "UNPAUSE")
    thread.join(30)
    assert results == [3]
    assert _store_connections(admin, 0) == 0
