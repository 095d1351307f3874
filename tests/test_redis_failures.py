"""Redis going away mid-run: on_error through the WSGI middleware, StoreError only, fallback.

Each test starts its own redis-server (it gets killed), on a free loopback port.
"""

from __future__ import annotations

import asyncio
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

from limiter import Limit, ManualClock, MemoryStore, RateLimiter, StoreError
from limiter.adapters.wsgi import RateLimitMiddleware
from limiter.backends.redis import AsyncRedisStore, RedisStore, redis_key
from limiter.testing import T0
from redis_servers import RedisServer

pytestmark = pytest.mark.redis

LIMIT = Limit(0.001, 5)  # with a frozen clock, exactly 5 requests per key pass


@pytest.fixture
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    s.start()
    yield s
    s.remove()


def short_timeouts(server: RedisServer) -> redis.Redis:
    # What docs/stores.md recommends: a check never waits long for a dead server
    # (redis-py's default retries back off for seconds).
    return server.client(
        socket_timeout=0.2, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 1)
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


def wait_until_limiting(app: Any, ip: str) -> float:
    """Seconds until a request is answered with rate-limit headers again."""
    start = time.monotonic()
    while True:
        _, headers = get(app, ip)
        if limited(headers):
            return time.monotonic() - start
        assert time.monotonic() - start < 5, "limiting did not resume"
        time.sleep(0.01)


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
    assert wait_until_limiting(app, "10.0.0.3") < 1.0
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
        deadline = time.monotonic() + 1.0
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


class CountingListener:
    """A port that accepts TCP connections, counts them and hangs up: a broken Redis."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.sock.settimeout(0.02)
        self.stopping = False
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # the accept timeout: look at stopping again
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stopping = True
        self.thread.join(5)
        self.sock.close()


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
    store.reset("{u}:a")  # reaches the fallback while Redis is down
    assert store.apply_many(["{u}:a", "{u}:b"], limits, 1, T0).allowed


def test_script_flush_mid_run_is_invisible(server: RedisServer) -> None:
    client = short_timeouts(server)
    limiter = RateLimiter(Limit(0.001, 50), store=RedisStore(client), clock=ManualClock(T0))
    admitted = 0
    for i in range(60):
        if i % 7 == 0:
            client.script_flush()
        admitted += limiter.allow("k")
    assert admitted == 50
