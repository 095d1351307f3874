"""The window policies on Redis: ``bucket.lua`` against ``limiter.core.window``, bit for bit.

Hypothesis feeds the script and ``step``/``step_all`` the same random
sequences (time steps of seconds or of periods, to and about window
boundaries, late readings and clocks stepped back; requests, Charges and
Refunds with and without ``taken_at``) for ``FixedWindow`` (both anchors)
and ``SlidingWindow``, alone and beside a bucket, a second window and a
lockout, and compares every result field and every stored state.  Then
exact admitted counts from threads and asyncio, the server's clock, and
a key another kind of policy wrote read as new, as ``step`` reads it.  (Processes:
test_redis_store.py; pipelining and Cluster: their own modules.)
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Iterator, List, Optional

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, settings

from helpers.redis_servers import RedisServer, unique_prefix
from helpers.redis_state import check_stored, check_stored_until, read_state, read_state_of
from helpers.step_strategies import given_a_window, given_windows_and_others
from helpers.window_runs import (
    boundary_pairs,
    fixed_sequence,
    read_as_new,
    rounded_to_the_moment,
    slide_pairs,
    tasks_admit_exactly_count,
    threads_admit_exactly_count,
    threads_beside_a_bucket_and_a_lockout,
    window_sequence,
    window_sequence_all,
)
from limiter import Limit, Lockout, StoreError
from limiter.backends.redis import AsyncRedisStore, RedisStore, redis_key
from limiter.core.many import step_all
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def client(server: RedisServer) -> Iterator[redis.Redis]:
    with contextlib.closing(server.client()) as opened:
        yield opened


# -- the script is limiter.core.window ----------------------------------------------


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given_a_window
def test_script_matches_step_for_a_window(
    client: redis.Redis, window: Any, other: Any, start: float, ops: Any, switches: List[bool]
) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    window_sequence(store, stored_in(client, store), window, other, start, ops, switches)
    client.delete(redis_key("k", store.prefix))


def stored_in(client: redis.Redis, store: RedisStore) -> Any:
    """``window_runs.Stored`` for ``store``'s keys: each checked, PX too, and made persistent."""

    def stored(key: str, policy: Any, state: Any, now: float, since: float) -> Any:
        return check_key(client, redis_key(key, store.prefix), policy, state, now, since)

    return stored


def check_key(
    client: redis.Redis, rkey: str, policy: Any, state: Any, now: float, since: float
) -> Any:
    """The stored state of ``policy``'s key, checked against ``state`` (and PX)."""
    if policy.kind == "bucket":
        return check_stored(client, rkey, state, since)
    return check_stored_until(client, rkey, state, now, since)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given_windows_and_others
def test_script_matches_step_all_with_windows(
    client: redis.Redis,
    window: Any,
    companions: List[Any],
    lockout: Optional[Lockout],
    start: float,
    ops: Any,
    per_limit: List[Any],
) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    policies = [window, *companions, *([lockout] if lockout else [])]
    keys = [f"{{user}}:{i}" for i in range(len(policies))]
    window_sequence_all(store, stored_in(client, store), keys, policies, start, ops, per_limit)
    client.delete(*(redis_key(k, store.prefix) for k in keys))


@pytest.mark.parametrize(
    "window",
    [FixedWindow(3, 0.001), FixedWindow(2**53, 1.0, "first"), SlidingWindow(3, 0.001)],
    ids=repr,
)
def test_script_matches_step_over_many_boundaries(client: redis.Redis, window: Any) -> None:
    # Over 2,000 windows of 1 ms (and 2 s of one second).
    store = RedisStore(client, prefix=unique_prefix())
    fixed_sequence(store, stored_in(client, store), window, boundary_pairs(5000))
    client.delete(redis_key("k", store.prefix))


@pytest.mark.parametrize("window", [FixedWindow(1, 0.001), SlidingWindow(1, 0.001)])
def test_a_window_rounded_to_end_at_the_moment_is_the_next_one(
    client: redis.Redis, window: Any
) -> None:
    rounded_to_the_moment(RedisStore(client, prefix=unique_prefix()), window)


@pytest.mark.parametrize("period", [1 / 3, 7.3, 60.0])
@pytest.mark.parametrize("count", [3, 5, 7])
def test_script_matches_slide_on_its_denials(
    client: redis.Redis, period: float, count: int
) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    window = SlidingWindow(count, period)
    fixed_sequence(store, stored_in(client, store), window, slide_pairs(period))
    client.delete(redis_key("k", store.prefix))


# -- what the other tests rely on ---------------------------------------------------------


def test_window_states_as_stored(client: redis.Redis) -> None:
    # A fixed window keeps a quota's two numbers (used * 2**-600, end), a sliding
    # window three (previous, current, until); PX is the time to the end.
    store = RedisStore(client, prefix=unique_prefix())
    hour = 1_699_999_200.0  # an hour's start (T0 is 800 s into the hour)
    store.apply("f", FixedWindow(5, 60), 2, hour + 30)
    assert read_state(client, redis_key("f", store.prefix)) == complex(2 * 2**-600, hour + 60)
    store.apply("a", FixedWindow(5, 60, "first"), 2, hour + 30)
    assert read_state(client, redis_key("a", store.prefix)) == complex(2 * 2**-600, hour + 90)
    store.apply("s", SlidingWindow(5, 60), 2, hour + 30)
    store.apply("s", SlidingWindow(5, 60), 1, hour + 90)
    assert read_state(client, redis_key("s", store.prefix)) == (2.0, 1.0, hour + 180)
    assert 89_000 < client.pttl(redis_key("s", store.prefix)) <= 90_000


def test_a_key_of_another_kind_of_policy_is_read_as_step_reads_it(client: redis.Redis) -> None:
    # Another shape's state reads as nothing (limiter.core.state): the key
    # starts afresh, and keeps that state until the new policy writes its own.
    store = RedisStore(client, prefix=unique_prefix())
    sliding, bucket, fixed = SlidingWindow(5, 60), Limit(1, 5), FixedWindow(5, 60)
    cases = [("k", sliding, fixed, 1), ("j", sliding, bucket, 1), ("b", bucket, sliding, 1)]
    cases += [("d", sliding, fixed, 6), ("p", bucket, sliding, 0)]  # denied, a peek: no write
    for key, writer, reader, cost in cases:
        store.apply(key, writer, 1, T0)
        stored = read_state_of(client, store)
        read_as_new(store, key, reader, cost, stored)
    store.apply("m", sliding, 1, T0)
    keys, limits = ["n", "m"], [fixed, bucket]
    states = [None, read_state(client, redis_key("m", store.prefix))]
    new_states, expected = step_all(states, T0 + 1, limits, 1)
    assert store.apply_many(keys, limits, 1, T0 + 1) == expected
    assert [read_state(client, redis_key(key, store.prefix)) for key in keys] == new_states
    client.set(redis_key("c", store.prefix), "1 2 x")
    with pytest.raises(StoreError, match="corrupt"):
        store.apply("c", SlidingWindow(5, 60), 1, T0)


def test_windows_on_the_server_clock(client: redis.Redis) -> None:
    # Not timed: the script finds the window from the server's TIME itself.
    store = RedisStore(client, prefix=unique_prefix())
    for window in (FixedWindow(3, 3600), FixedWindow(3, 3600, "first"), SlidingWindow(3, 3600)):
        results = [store.apply(window.label, window, 1, None) for _ in range(4)]
        assert [r.allowed for r in results] == [True, True, True, False]
        assert 0 < results[-1].retry_after <= 7200
    seconds = client.time()[0]
    _, end = client.get(redis_key("3/3600s:fixed", store.prefix)).split()
    assert float(end) == (seconds // 3600 + 1) * 3600


# -- exact under concurrency ----------------------------------------------------------------


def test_eight_threads_admit_exactly_count(server: RedisServer) -> None:
    client = redis.Redis(port=server.port, socket_timeout=30)
    threads_admit_exactly_count(RedisStore(client, prefix=unique_prefix()))
    client.close()


def test_threads_beside_a_bucket_and_a_lockout_admit_exactly(server: RedisServer) -> None:
    client = redis.Redis(port=server.port, socket_timeout=30)
    store = RedisStore(client, prefix=unique_prefix())
    threads_beside_a_bucket_and_a_lockout(store, ["{u}:window", "{u}:tokens", "{u}:lockout"])
    client.close()


def test_asyncio_checks_in_flight_admit_exactly_count(server: RedisServer) -> None:
    # One call per check (pipelining off; the pipelined path: test_redis_pipelining.py).
    async def flood() -> None:
        client = redis.asyncio.Redis(port=server.port, socket_timeout=30)
        try:
            await tasks_admit_exactly_count(
                AsyncRedisStore(client, prefix=unique_prefix(), pipelining=False)
            )
        finally:
            await client.aclose()

    asyncio.run(flood())
