"""A full Redis (maxmemory, noeviction) never turns a denial into an error (issue 22, item 6).

Every SET is refused with OOM.  A denial's bookkeeping (a lockout's breach)
cannot be written; the denial stands all the same (a 429, never a
``StoreError`` that ``on_error="allow"`` would let through).  An admission
cannot be recorded either: it is a ``StoreError``, for ``on_error`` to decide.
"""

from __future__ import annotations

from typing import Iterator

import pytest
import redis

from helpers.redis_servers import RedisServer
from limiter import Lockout, ManualClock, RateLimiter, StoreError
from limiter.backends.redis import RedisStore
from limiter.testing import T0


@pytest.fixture(scope="module")
def full_server() -> Iterator[RedisServer]:
    server = RedisServer(None, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    try:
        yield server.start()
    finally:
        server.remove()


def fill(client: redis.Redis) -> None:
    """Redis over its maxmemory for the rest of the test: filling it to the brim
    is not enough (freed buffers let the next small write through), so the
    limit goes below what any server uses."""
    client.config_set("maxmemory", "1")
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set("fill", "x")


def room(client: redis.Redis) -> None:
    client.config_set("maxmemory", "2mb")
    client.flushall()


def outcomes(limiter: RateLimiter, n: int) -> list:
    seen = []
    for _ in range(n):
        try:
            result = limiter.check("user:1")
        except StoreError:
            seen.append("error")
        else:
            seen.append("locked" if result.locked_out else result.allowed)
    return seen


@pytest.mark.parametrize("lockout", [None, Lockout(breaches=3, within=3600, duration=3600)])
def test_13_checks_at_3_per_hour_on_a_full_redis_admit_3_and_deny_10(full_server, lockout):
    client = full_server.client()
    room(client)
    store = RedisStore(client, prefix="full:")
    limiter = RateLimiter("3/hour", store=store, clock=ManualClock(T0), lockout=lockout)
    assert outcomes(limiter, 3) == [True, True, True]  # written before Redis filled up
    fill(client)
    # Denials stay denials; the lockout's breaches cannot be written, so it
    # counts none and locks no one out (the buckets still refuse).
    assert outcomes(limiter, 10) == [False] * 10
    # A key never seen: its admission cannot be taken, a StoreError.
    assert limiter.check("user:2", 0).allowed  # a peek writes nothing
    with pytest.raises(StoreError, match="OutOfMemoryError"):
        limiter.check("user:2")
    room(client)  # room again: the lockout counts as before
    limiter2 = RateLimiter("3/hour", store=store, clock=ManualClock(T0), lockout=lockout)
    expected = (
        [True] * 3 + [False] * 10 if lockout is None else [True] * 3 + [False] * 2 + ["locked"] * 8
    )
    assert outcomes(limiter2, 13) == expected
