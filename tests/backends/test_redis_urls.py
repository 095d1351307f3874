"""``store_from_url``'s ``pipelining``: AsyncRedisStore's option, as a keyword or a query value."""

from __future__ import annotations

import asyncio

import pytest

from helpers.redis_servers import RedisServer, unique_prefix
from limiter import Limit
from limiter.backends.redis import AsyncRedisStore
from limiter.testing import T0
from limiter.urls import store_from_url

pytestmark = pytest.mark.redis

LIMIT = Limit(0.001, 5)


@pytest.mark.parametrize(
    "url, options, expected",
    [
        ("redis://127.0.0.1:{port}/0", {"pipelining": False}, False),
        ("redis://127.0.0.1:{port}/0", {"pipelining": True}, True),
        ("redis://127.0.0.1:{port}/0?pipelining=false", {}, False),
        ("redis://127.0.0.1:{port}/0?pipelining=off", {}, False),
        ("redis://127.0.0.1:{port}/0?pipelining=true", {}, True),
        (
            "redis://127.0.0.1:{port}/0?pipelining=true",
            {"pipelining": False},
            False,
        ),  # keyword wins
        ("redis://127.0.0.1:{port}/0", {}, True),  # the default
    ],
)
def test_pipelining_from_url(server: RedisServer, url: str, options: dict, expected: bool) -> None:
    async def scenario() -> None:
        store = store_from_url(
            url.format(port=server.port), asyncio=True, prefix=unique_prefix(), **options
        )
        assert isinstance(store, AsyncRedisStore)
        assert store.pipelining is expected
        assert (store._pipeline is not None) is expected
        results = await asyncio.gather(*(store.aapply("k", LIMIT, 1, T0) for _ in range(7)))
        assert sum(r.allowed for r in results) == 5  # unpipelined: in any order
        await store.client.aclose()

    asyncio.run(scenario())


@pytest.mark.usefixtures("current_loop")  # Python 3.9: redis.asyncio asks for the current loop
def test_bad_pipelining_values_are_named() -> None:
    with pytest.raises(ValueError, match=r"pipelining must be true or false.*'maybe'"):
        store_from_url("redis://127.0.0.1:1/0?pipelining=maybe", asyncio=True)
    with pytest.raises(TypeError, match="pipelining must be True or False, got 'no'"):
        store_from_url("redis://127.0.0.1:1/0", asyncio=True, pipelining="no")
    with pytest.raises(ValueError, match=r"pipelining=False: only an asyncio store"):
        store_from_url("redis://127.0.0.1:1/0", pipelining=False)
    with pytest.raises(ValueError, match=r"pipelining=True: only an asyncio store"):
        store_from_url("redis://127.0.0.1:1/0?pipelining=1")
