"""A full connection pool is a local limit, not a store outage: a check waits, never fails open.

redis-py 8 caps a ``ConnectionPool`` at 100 connections by default and raises
``MaxConnectionsError`` at once past the cap (5, 6 and 7 cap at 2**31 unless
told otherwise).  Every path that takes a pool connection per check must wait
for one (bounded by the client's timeouts) instead of turning the error into
a ``StoreError``, which ``on_error="allow"`` or a fallback would let through.
The clock is frozen (``now=T0``), so the admitted counts are exact.  ``.ci/run``
runs this file on every redis-py major the ``redis`` extra admits.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any, List

import pytest
import redis
import redis.asyncio

from helpers.redis_servers import RedisServer, unique_prefix
from limiter import Limit, MemoryStore
from limiter.backends.redis import AsyncRedisStore, PoolFullError, RedisStore
from limiter.testing import T0

pytestmark = pytest.mark.redis

LIMIT = Limit(0.001, 5)  # with a frozen clock, exactly 5 per key pass
KEYS = 30
CHECKS = 300  # 10 per key: 150 admitted


class TracedAsync(redis.asyncio.Redis):
    """A client whose ``execute_command`` is wrapped, as a tracer does: the client's own path."""

    @functools.wraps(redis.asyncio.Redis.execute_command)
    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return await super().execute_command(*args, **options)


class Traced(redis.Redis):
    @functools.wraps(redis.Redis.execute_command)
    def execute_command(self, *args: Any, **options: Any) -> Any:
        return super().execute_command(*args, **options)


def _async_client(server: RedisServer, cls: Any = redis.asyncio.Redis, **kwargs: Any) -> Any:
    return cls(
        host="127.0.0.1", port=server.port, socket_timeout=10, socket_connect_timeout=10, **kwargs
    )


async def _burst(store: AsyncRedisStore) -> List[bool]:
    results = await asyncio.gather(
        *(store.aapply(f"k{i % KEYS}", LIMIT, 1, T0) for i in range(CHECKS)),
        return_exceptions=True,
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    return [r.allowed for r in results]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "cls, pipelining, max_connections",
    [
        (redis.asyncio.Redis, False, None),  # redis-py 8's default cap (100)
        (TracedAsync, True, None),  # a traced client keeps its own path
        (redis.asyncio.Redis, False, 7),
        (TracedAsync, True, 7),
        (redis.asyncio.Redis, True, 1),  # the pipeline's checkout waits too
    ],
    ids=["plain-default", "traced-default", "plain-7", "traced-7", "pipelined-1"],
)
def test_async_checks_wait_for_a_connection(
    server: RedisServer, cls: Any, pipelining: bool, max_connections: Any
) -> None:
    async def scenario() -> None:
        kwargs = {} if max_connections is None else {"max_connections": max_connections}
        client = _async_client(server, cls, **kwargs)
        # A fallback would answer a StoreError: it must never be asked.
        store = AsyncRedisStore(
            client, prefix=unique_prefix(), pipelining=pipelining, fallback=MemoryStore()
        )
        try:
            allowed = await _burst(store)
            assert sum(allowed) == KEYS * LIMIT.burst
        finally:
            await client.aclose() if hasattr(client, "aclose") else await client.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("cls", [Traced, redis.Redis], ids=["traced", "plain"])
def test_sync_checks_wait_for_a_connection(server: RedisServer, cls: Any) -> None:
    # Two connections for 40 threads: the client's own path (traced) meets a
    # full pool on nearly every check; the fast path (plain) never uses the pool.
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=server.port, socket_timeout=10, max_connections=2
    )
    client = cls(connection_pool=pool)
    store = RedisStore(client, prefix=unique_prefix())
    threads, per_thread = 40, 15  # 600 checks, 20 per key: 150 admitted
    start = threading.Barrier(threads)
    allowed: List[bool] = []
    errors: List[BaseException] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            try:
                result = store.apply(f"k{(n * per_thread + i) % KEYS}", LIMIT, 1, T0)
            except BaseException as exc:
                with lock:
                    errors.append(exc)
            else:
                with lock:
                    allowed.append(result.allowed)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    client.close()
    assert errors == []
    assert len(allowed) == threads * per_thread
    assert sum(allowed) == KEYS * LIMIT.burst


def test_a_pool_that_stays_full_is_not_a_store_error(server: RedisServer) -> None:
    # The only connection is held by the test: the check waits for the
    # client's timeout, then raises PoolFullError, which is no StoreError
    # (the fail-open path and the fallback never see it).
    pool = redis.ConnectionPool(
        host="127.0.0.1",
        port=server.port,
        socket_timeout=0.2,
        socket_connect_timeout=0.2,
        max_connections=1,
    )
    client = Traced(connection_pool=pool)
    store = RedisStore(client, prefix=unique_prefix(), fallback=MemoryStore())
    held = pool.get_connection("PING") if _needs_name(pool) else pool.get_connection()
    try:
        with pytest.raises(PoolFullError, match=r"0\.2 s"):
            store.apply("k", LIMIT, 1, T0)
    finally:
        pool.release(held)
    assert store.apply("k", LIMIT, 1, T0).allowed  # the connection is back: it goes through
    client.close()


def _needs_name(pool: Any) -> bool:
    import inspect

    parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    return parameter is not None and parameter.default is inspect.Parameter.empty


class CrowdedAtEval(Traced):
    """A client whose pool is full when the script must be loaded again: another user
    takes the only connection as ``EVAL`` starts and gives it back 50 ms later."""

    crowded = False

    def eval(self, *args: Any) -> Any:
        if not self.crowded:
            self.crowded = True
            pool = self.connection_pool
            held = pool.get_connection("EVAL") if _needs_name(pool) else pool.get_connection()
            threading.Timer(0.05, pool.release, [held]).start()
        return super().eval(*args)


def test_a_full_pool_while_the_script_is_loaded_again_waits(server: RedisServer) -> None:
    # SCRIPT FLUSH (a restart, a failover): EVALSHA meets NOSCRIPT and the EVAL
    # that follows meets a full pool. That is a local limit too: the check waits
    # and is answered; it used to be a StoreError, which the fallback answered.
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=server.port, socket_timeout=5, max_connections=1
    )
    client = CrowdedAtEval(connection_pool=pool)
    store = RedisStore(client, prefix=unique_prefix(), fallback=MemoryStore())
    assert [store.apply("k", LIMIT, 1, T0).remaining for _ in range(2)] == [4, 3]
    client.script_flush()
    assert store.apply("k", LIMIT, 1, T0).remaining == 2  # the server's count, not a fallback's
    assert client.crowded and not store.using_fallback
    client.close()
