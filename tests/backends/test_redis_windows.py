"""The window policies on Redis: ``bucket.lua`` against ``limiter.core.window``, bit for bit.

Hypothesis feeds the script and ``step``/``step_all`` the same random
sequences (time steps of seconds or of periods, to and about window
boundaries, late readings and clocks stepped back; requests, Charges and
Refunds with and without ``taken_at``) for ``FixedWindow`` (both anchors)
and ``SlidingWindow``, alone and beside a bucket, a second window and a
lockout, and compares every result field and every stored state.  Then
exact admitted counts from threads and asyncio, the server's clock, and
the error for a key another kind of policy wrote.  (Processes:
test_redis_store.py; pipelining and Cluster: their own modules.)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any, Iterator, List, Optional, Tuple

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers.redis_servers import RedisServer, unique_prefix
from helpers.redis_state import check_stored, check_stored_until, read_state
from helpers.step_strategies import (
    COMPANIONS,
    COUNTS,
    PERIODS,
    STARTS,
    WINDOWS,
    resolve,
    same_shape,
)
from helpers.step_strategies import MAYBE_LOCKOUTS as LOCKOUTS
from helpers.step_strategies import WINDOW_COSTS as WCOSTS
from helpers.step_strategies import WINDOW_OPS as OPS
from helpers.step_strategies import move_in_window as move
from limiter import Limit, Lockout, StoreError
from limiter.backends.redis import AsyncRedisStore, RedisStore, redis_key
from limiter.core.bucket import step
from limiter.core.costs import Charge, Refund
from limiter.core.many import step_all
from limiter.core.state import State
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def client(server: RedisServer) -> Iterator[redis.Redis]:
    with contextlib.closing(server.client()) as opened:
        yield opened


# -- the script is limiter.core.window ----------------------------------------------


@settings(
    max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    window=WINDOWS,
    other=st.tuples(COUNTS, PERIODS, st.sampled_from(["epoch", "first"])),
    start=STARTS,
    ops=OPS,
    switches=st.lists(st.sampled_from([False, False, False, True]), min_size=30, max_size=30),
)
def test_script_matches_step_for_a_window(
    client: redis.Redis, window: Any, other: Any, start: float, ops: Any, switches: List[bool]
) -> None:
    # Now and then a step goes under another window of the same state's shape:
    # a state written under another count, period or anchor is read alike.
    store = RedisStore(client, prefix=unique_prefix())
    rkey = redis_key("k", store.prefix)
    windows = (window, same_shape(window, *other))
    state: Optional[State] = None
    now = start
    for (how, cost), switch in zip(ops, switches):
        window = windows[switch]
        now = move(now, how, window, state)
        cost = resolve(cost, now, window)
        state, expected = step(state, now, window, cost)
        since = time.monotonic()
        got = store.apply("k", window, cost, now)
        assert got == expected  # every field, bit for bit
        assert got.results == () and got.__class__ is expected.__class__
        event(f"{window.kind} allowed: {got.allowed}")
        state = check_stored_until(client, rkey, state, now, since)
    client.delete(rkey)


def check_key(
    client: redis.Redis, rkey: str, policy: Any, state: Any, now: float, since: float
) -> Any:
    """The stored state of ``policy``'s key, checked against ``state`` (and PX)."""
    if policy.kind == "bucket":
        return check_stored(client, rkey, state, since)
    return check_stored_until(client, rkey, state, now, since)


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    window=WINDOWS,
    companions=COMPANIONS,
    lockout=LOCKOUTS,
    start=STARTS,
    ops=OPS,
    per_limit=st.lists(
        st.none() | st.lists(WCOSTS, min_size=4, max_size=4), min_size=30, max_size=30
    ),
)
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
    rkeys = [redis_key(k, store.prefix) for k in keys]
    states: List[Optional[State]] = [None] * len(policies)
    now = start
    for (how, cost), costs in zip(ops, per_limit):
        now = move(now, how, window, states[0])
        if costs is None:
            cost = resolve(cost, now, window)
        else:  # one cost per policy, each resolved against its own window
            cost = tuple(resolve(c, now, p) for c, p in zip(costs, policies))
        states, expected = step_all(states, now, policies, cost)
        since = time.monotonic()
        got = store.apply_many(keys, policies, cost, now)
        assert got == expected  # every field, bit for bit (results, policy too)
        assert [r.__class__ for r in got.results] == [r.__class__ for r in expected.results]
        event(f"allowed: {got.allowed}, locked out: {got.locked_out}")
        states = [
            check_key(client, rkey, policy, state, now, since)
            for rkey, policy, state in zip(rkeys, policies, states)
        ]
    client.delete(*rkeys)


@pytest.mark.parametrize(
    "window",
    [FixedWindow(3, 0.001), FixedWindow(2**53, 1.0, "first"), SlidingWindow(3, 0.001)],
    ids=repr,
)
def test_script_matches_step_over_many_boundaries(client: redis.Redis, window: Any) -> None:
    # Every 0.4 ms over 2,000 windows of 1 ms (and 2 s of one second): each
    # boundary's rounding (a moment floor puts on the end of its window) alike.
    store = RedisStore(client, prefix=unique_prefix())
    rkey = redis_key("k", store.prefix)
    state: Optional[State] = None
    for i in range(5000):
        now = T0 + i * 0.0004
        cost = (1, 2, Refund(1, now - 0.001), Charge(1), 0)[i % 5]
        state, expected = step(state, now, window, cost)
        assert store.apply("k", window, cost, now) == expected, (i, now)
        state = read_state(client, rkey)  # as step wrote it (checked below, once)
        client.persist(rkey)
    assert state == read_state(client, rkey)
    client.delete(rkey)


@pytest.mark.parametrize("window", [FixedWindow(1, 0.001), SlidingWindow(1, 0.001)])
def test_a_window_rounded_to_end_at_the_moment_is_the_next_one(
    client: redis.Redis, window: Any
) -> None:
    # The instant where floor's window would end at now + epsilon (test_window.py).
    store = RedisStore(client, prefix=unique_prefix())
    now = 1675119037.810999
    results = [store.apply("k", window, 1, now) for _ in range(5)]
    assert [r.allowed for r in results] == [True, False, False, False, False]
    state: Optional[State] = None
    for result in results:
        state, expected = step(state, now, window, 1)
        assert result == expected


@pytest.mark.parametrize("period", [1 / 3, 7.3, 60.0])
@pytest.mark.parametrize("count", [3, 5, 7])
def test_script_matches_slide_on_its_denials(
    client: redis.Redis, period: float, count: int
) -> None:
    # Checks every seventh of a period near the epoch, where every last bit of a
    # retry_after shows: a sliding window's denials with a previous window
    # counted, whose wait runs out within the window (previous's weight falls)
    # or in the next one (current's does).
    store = RedisStore(client, prefix=unique_prefix())
    rkey = redis_key("k", store.prefix)
    window = SlidingWindow(count, period)
    state: Optional[State] = None
    for i in range(120):
        now = 12.0 + i * period / 7
        cost = (1, 1, 2, 0.5, 1)[i % 5]
        state, expected = step(state, now, window, cost)
        assert store.apply("k", window, cost, now) == expected, (i, now)
        assert read_state(client, rkey) == state
    client.delete(rkey)


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


def test_a_key_of_another_kind_of_policy_is_a_store_error(client: redis.Redis) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    store.apply("k", SlidingWindow(5, 60), 1, T0)
    store.apply("b", Limit(1, 5), 1, T0)
    for key, policy in (("k", FixedWindow(5, 60)), ("k", Limit(1, 5)), ("b", SlidingWindow(5, 60))):
        with pytest.raises(StoreError, match="another kind of policy"):
            store.apply(key, policy, 1, T0)
    with pytest.raises(StoreError, match="another kind of policy"):
        store.apply_many(["{k}a", "k"], [FixedWindow(5, 60), Limit(1, 5)], 1, T0)
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

#: A frozen clock (T0, no boundary of an hour's windows): each admits exactly 100.
HOURLY = (FixedWindow(100, 3600), FixedWindow(100, 3600, "first"), SlidingWindow(100, 3600))


def test_eight_threads_admit_exactly_count(server: RedisServer) -> None:
    client = redis.Redis(port=server.port, socket_timeout=30)
    store = RedisStore(client, prefix=unique_prefix())
    admitted = [0] * len(HOURLY)
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(40):
            for i, window in enumerate(HOURLY):
                allowed = store.apply(f"hot{i}", window, 1, T0).allowed
                with lock:
                    admitted[i] += allowed

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert admitted == [100] * len(HOURLY)
    peeks = [store.apply(f"hot{i}", window, 0, T0) for i, window in enumerate(HOURLY)]
    assert [p.remaining for p in peeks] == [0] * len(HOURLY)
    client.close()


def test_threads_beside_a_bucket_and_a_lockout_admit_exactly(server: RedisServer) -> None:
    # Each check takes 1 from a sliding window of 30 and 10 tokens from a bucket
    # of 1,000 that refills nothing meanwhile: the window refuses first, all or
    # nothing, 4 ordinary denials and then the lockout holds.
    client = redis.Redis(port=server.port, socket_timeout=30)
    store = RedisStore(client, prefix=unique_prefix())
    policies = (SlidingWindow(30, 3600), Limit(0.001, 1000), Lockout(5, 60, 600))
    keys = ["{u}:window", "{u}:tokens", "{u}:lockout"]
    totals: List[Tuple[int, int]] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        results = [store.apply_many(keys, policies, (1, 10, 0), T0) for _ in range(25)]
        totals.append((sum(r.allowed for r in results), sum(r.locked_out for r in results)))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted, locked = (sum(column) for column in zip(*totals))
    assert (admitted, 200 - admitted - locked, locked) == (30, 4, 166)
    peek = store.apply_many(keys[:2], policies[:2], 0, T0)
    assert [r.remaining for r in peek.results] == [0, 700]  # refusals took nothing
    client.close()


def test_asyncio_checks_in_flight_admit_exactly_count(server: RedisServer) -> None:
    # One call per check (pipelining off; the pipelined path: test_redis_pipelining.py).
    async def flood() -> List[int]:
        client = redis.asyncio.Redis(port=server.port, socket_timeout=30)
        store = AsyncRedisStore(client, prefix=unique_prefix(), pipelining=False)
        try:
            counts = []
            for i, window in enumerate(HOURLY):
                results = await asyncio.gather(
                    *(store.aapply(f"hot{i}", window, 1, T0) for _ in range(250))
                )
                counts.append(sum(r.allowed for r in results))
            return counts
        finally:
            await client.aclose()

    assert asyncio.run(flood()) == [100] * len(HOURLY)
