"""RedisStore with the other clients users have: valkey-py and a Sentinel-managed master."""

from __future__ import annotations

import asyncio
import logging
from typing import Iterator, List

import pytest
import redis.sentinel
import valkey
import valkey.asyncio
import valkey.backoff
import valkey.retry
from redis.backoff import NoBackoff
from redis.retry import Retry

from helpers.redis_servers import RedisServer, sentinel_for, unique_prefix
from limiter import Limit, ManualClock, RateLimiter
from limiter.backends.redis import AsyncRedisStore, RedisStore
from limiter.testing import T0
from limiter.testing._store_suite import StoreConformance


class TestValkeyClient(StoreConformance):
    """valkey-py speaks the same protocol; the store needs nothing else from it."""

    @pytest.fixture(autouse=True)
    def _server(self, server: RedisServer) -> None:
        self.port = server.port

    def make_store(self) -> RedisStore:
        client = valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=10)
        return RedisStore(client, prefix=unique_prefix())

    def close_store(self, store: RedisStore) -> None:
        store.client.close()


def test_valkey_asyncio_client(server: RedisServer) -> None:
    async def go() -> list:
        client = valkey.asyncio.Valkey(host="127.0.0.1", port=server.port, socket_timeout=10)
        try:
            limiter = RateLimiter(
                "3/second",
                store=AsyncRedisStore(client, prefix=unique_prefix()),
                clock=ManualClock(T0),
            )
            return [(await limiter.acheck("k")).allowed for _ in range(4)]
        finally:
            await client.aclose()

    assert asyncio.run(go()) == [True, True, True, False]


@pytest.fixture(scope="module")
def sentinel(server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A redis-server in sentinel mode watching ``server`` as master "primary"."""
    with sentinel_for(server.port, tmp_path_factory.mktemp("sentinel")) as port:
        yield port


def test_sentinel_master_client(server: RedisServer, sentinel: int) -> None:
    fast = {"socket_timeout": 2, "socket_connect_timeout": 2, "retry": Retry(NoBackoff(), 0)}
    master = redis.sentinel.Sentinel([("127.0.0.1", sentinel)], sentinel_kwargs=fast).master_for(
        "primary", **fast
    )
    store = RedisStore(master, prefix=unique_prefix())
    store.ping()
    limiter = RateLimiter("2/second;5/minute", store=store, clock=ManualClock(T0))
    assert [limiter.allow("203.0.113.9") for _ in range(3)] == [True, True, False]
    result = store.apply("single", Limit(1, 1), 1, T0)
    assert result.allowed and not store.apply("single", Limit(1, 1), 1, T0).allowed
    assert master.connection_pool.get_master_address() == ("127.0.0.1", server.port)


def store_log(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "limiter.stores"]


def test_documented_sentinel_set_up_is_quiet_and_the_default_is_reported(
    server: RedisServer, sentinel: int, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/stores.md: give the Sentinel connections the master's settings (sentinel_kwargs)."""
    fast = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5, "retry": Retry(NoBackoff(), 0)}
    sentinels = [("127.0.0.1", sentinel)]
    with caplog.at_level(logging.WARNING, logger="limiter.stores"):
        quiet = RedisStore(
            redis.sentinel.Sentinel(sentinels, sentinel_kwargs=fast).master_for("primary", **fast),
            prefix=unique_prefix(),
        )
        assert store_log(caplog) == []
        quiet.ping()
        # Without sentinel_kwargs the Sentinel connections get the socket settings
        # only, and redis-py's default retry: with backoff up to 8.1, none from 8.2.
        default = redis.sentinel.Sentinel(sentinels, socket_timeout=0.5)
        retries = default.sentinels[0].get_retry()._retries
        RedisStore(default.master_for("primary", **fast))
    if retries == 0:
        assert store_log(caplog) == []
    else:
        [warning] = store_log(caplog)
        assert "each Sentinel client (sentinel_kwargs) retries" in warning.getMessage()


def test_valkey_clients_fail_fast_and_are_checked(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    no_retry = valkey.retry.Retry(valkey.backoff.NoBackoff(), 0)
    with caplog.at_level(logging.WARNING, logger="limiter.stores"):
        client = valkey.Valkey(
            host="127.0.0.1",
            port=server.port,
            socket_timeout=0.5,
            socket_connect_timeout=0.5,
            retry=no_retry,
        )
        RedisStore(client, prefix=unique_prefix()).ping()
        assert store_log(caplog) == []
        RedisStore(valkey.Valkey(host="127.0.0.1", port=server.port))  # no timeouts at all
    [warning] = store_log(caplog)
    assert "no socket_timeout" in warning.getMessage()

    async def go() -> None:
        aclient = valkey.asyncio.Valkey(
            host="127.0.0.1", port=server.port, socket_timeout=0.5, socket_connect_timeout=0.5
        )
        try:
            await AsyncRedisStore(aclient, prefix=unique_prefix()).aping()
        finally:
            await aclient.aclose()

    asyncio.run(go())
