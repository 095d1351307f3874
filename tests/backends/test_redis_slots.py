"""``Concurrency`` on Redis: ``bucket.lua``'s ``slots`` against ``concurrency.py``, bit for bit.

Hypothesis feeds the script and ``step``/``step_all`` the same random
sequences of takes, gives, renewals and peeks by several holders, with time
moves to and past lease expiries and clocks stepped back (within and beyond
the 1 s tolerance), under policies of another limit or lease now and then,
alone and beside a bucket, a window and a lockout; every result field, every
stored state and its PX are compared.  Then: never more slots held than the
limit from threads and from asyncio tasks (pipelined), all or nothing beside
a rate through ``RateLimiter.slot``, the error for a plain cost before any
round trip, and ``DenyCache`` passing slot refusals through.  (Cluster:
test_redis_cluster.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import threading
import time
from typing import Any, Iterator, List, Optional, Tuple

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry

from helpers.redis_servers import RedisServer, free_port, unique_prefix
from helpers.redis_state import check_stored, check_stored_until, read_state, read_state_of
from helpers.window_runs import read_as_new
from limiter import Concurrency, Limit, Lockout, RateLimiter, RateLimitExceeded, StoreError
from limiter.backends.denycache import DenyCache
from limiter.backends.redis import AsyncRedisStore, RedisStore, redis_key
from limiter.clock import ManualClock
from limiter.core.bucket import step
from limiter.core.costs import Charge, Hold, Refund
from limiter.core.limits import CLOCK_TOLERANCE
from limiter.core.many import step_all
from limiter.core.state import Leases, State, read_leases
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def client(server: RedisServer) -> Iterator[redis.Redis]:
    with contextlib.closing(server.client()) as opened:
        yield opened


# -- the draws ------------------------------------------------------------------------

HOLDERS = st.sampled_from([1.0, 1.0, 2.0, 2.0, 3.0, 2.0**53 - 1])
HOLDS = st.tuples(st.sampled_from(["take", "take", "give", "give", "renew"]), HOLDERS).map(
    lambda drawn: Hold(drawn[1], drawn[0])
)
#: What is no Hold is a peek (rule 5): 0, a Refund, a Charge.
PEEKS = st.sampled_from([0, 0.0, Refund(1), Refund(0, T0), Charge(2), Charge(math.inf)])
COSTS = st.one_of(HOLDS, HOLDS, HOLDS, PEEKS)
#: How now moves: seconds forward, fractions of the lease, back (within the
#: tolerance, at it, beyond it), and onto or just before a held expiry.
SMALL = st.sampled_from([0.0, 0.0, 1e-9, 0.001, 0.1, 0.25]).map(lambda s: ("lease", s))
MOVES = st.one_of(
    SMALL,
    SMALL,
    st.floats(0, 5, allow_nan=False).map(lambda s: ("by", s)),
    st.sampled_from([0.25, 0.5, 0.999, 1.0, 1.001, 1.5, 3.0]).map(lambda f: ("lease", f)),
    st.sampled_from(
        [0.5, CLOCK_TOLERANCE, math.nextafter(CLOCK_TOLERANCE, 2), 1.5, 2.5, 100.0]
    ).map(lambda s: ("back", s)),
    st.tuples(st.sampled_from(["onto", "before"]), st.integers(0, 3)),
)
LEASES = st.sampled_from([1 / 3, 0.5, 1.0, 2.5, 60.0, 120.0])
POLICIES = st.builds(Concurrency, st.integers(1, 4), LEASES)
STARTS = st.sampled_from([T0, T0 + 0.123456789, 1e9 + 1 / 3])


def move(now: float, how: Tuple[str, Any], lease: float, state: Optional[State]) -> float:
    """``now`` moved as ``how`` says (an expiry of ``state``'s leases: the i-th, if any)."""
    kind, amount = how
    if kind == "by":
        return now + amount
    if kind == "lease":
        return now + amount * lease
    if kind == "back":
        return now - amount
    expiries = read_leases(state)[1::2] if isinstance(state, Leases) else ()
    if not expiries:
        return now
    expiry = expiries[amount % len(expiries)]
    return expiry if kind == "onto" else math.nextafter(expiry, -math.inf)


def check_key(client: redis.Redis, rkey: str, policy: Any, state: Any, now: float) -> Any:
    """What ``rkey`` holds, checked against ``state`` bit for bit (and PX), made persistent."""
    since = time.monotonic() - 1.0  # the TTL ran at most since the step (1 s: a slow machine)
    if policy.kind == "bucket":
        return check_stored(client, rkey, state, since)
    return check_stored_until(client, rkey, state, now, since)


# -- the script is limiter.core.concurrency ----------------------------------------------


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    POLICIES,
    POLICIES,
    STARTS,
    st.lists(st.tuples(MOVES, COSTS, st.integers(0, 4)), min_size=1, max_size=30),
)
def test_script_matches_slot_step(
    client: redis.Redis, policy: Concurrency, other: Concurrency, start: float, ops: Any
) -> None:
    # Now and then (1 in 5) the key is stepped under another limit and lease:
    # leases taken under a longer one are brought back (rule 6).
    moves = [(other if switch == 0 else policy, how, cost) for how, cost, switch in ops]
    for (_, _, cost), allowed in zip(moves, slot_sequence(client, start, moves)):
        event(f"{getattr(cost, 'action', 'peek')} allowed: {allowed}")


def slot_sequence(client: redis.Redis, start: float, ops: Any) -> List[bool]:
    """``RedisStore.apply`` = ``step`` on one key for each ``(policy, how, cost)`` of ``ops``.

    Returns whether each step admitted.
    """
    answers = []
    store = RedisStore(client, prefix=unique_prefix())
    rkey = redis_key("k", store.prefix)
    state: Optional[State] = None
    now = start
    for policy, how, cost in ops:
        now = move(now, how, policy.lease, state)
        state, expected = step(state, now, policy, cost)
        got = store.apply("k", policy, cost, now)
        assert got == expected, (now, cost)  # every field, bit for bit
        assert got.__class__ is expected.__class__
        answers.append(got.allowed)
        state = check_key(client, rkey, policy, state, now)
    client.delete(rkey)
    return answers


def test_script_matches_slot_step_on_a_busy_key(client: redis.Redis) -> None:
    # 600 steps of 6 holders on 3 slots (leases of 2 s, some of 5 s), mostly
    # a few ms apart, now and then a second or three back: every branch of
    # every rule many times over (a draw of hypothesis is short).
    draw = random.Random(26)
    policies = (Concurrency(3, lease=2.0), Concurrency(3, lease=5.0))
    ops = []
    for _ in range(600):
        how = ("by", draw.choice([0.0, 0.001, 0.05, 0.3]))
        if draw.random() < 0.05:
            how = ("back", draw.choice([0.5, 1.0, 1.5, 3.0]))
        action = draw.choice(["take", "take", "give", "renew", "peek"])
        holder = float(draw.randint(1, 6))
        cost = 0 if action == "peek" else Hold(holder, action)
        ops.append((policies[draw.random() < 0.1], how, cost))
    slot_sequence(client, T0, ops)


COMPANIONS = st.sampled_from([Limit(1, 3), Limit(1000, 2), FixedWindow(2, 10), SlidingWindow(3, 5)])
#: One cost for every policy (a Hold is a request of 1 or a peek elsewhere), or one each.
STEP_ALL_COSTS = st.one_of(
    COSTS, st.tuples(st.sampled_from([0, 1, 2, Refund(1), Charge(1)]), COSTS)
)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    COMPANIONS,
    POLICIES,
    st.booleans(),
    st.booleans(),
    STARTS,
    st.lists(st.tuples(MOVES, STEP_ALL_COSTS), min_size=1, max_size=25),
)
def test_script_matches_step_all_beside_other_policies(
    client: redis.Redis,
    companion: Any,
    policy: Concurrency,
    first: bool,
    lockout: bool,
    start: float,
    ops: Any,
) -> None:
    # All or nothing: a take another key refuses is a peek (nothing held), and a
    # refused take takes nothing from the others; a lockout counts its breaches.
    store = RedisStore(client, prefix=unique_prefix())
    policies: List[Any] = [policy, companion] if first else [companion, policy]
    if lockout:
        policies.append(Lockout(3, 30, 60))
    keys = [f"{{u}}:{i}" for i in range(len(policies))]
    mine = policies.index(policy)
    states: List[Optional[State]] = [None] * len(policies)
    now = start
    for how, drawn in ops:
        now = move(now, how, policy.lease, states[mine])
        cost: Any = drawn
        if drawn.__class__ is tuple:
            other, slot = drawn
            cost = (slot, other) if first else (other, slot)
            if lockout:
                cost = (*cost, 0)
        states, expected = step_all(states, now, policies, cost)
        got = store.apply_many(keys, policies, cost, now)
        assert got == expected, (now, cost)  # every field and result, bit for bit
        event(f"allowed: {got.allowed}, locked out: {got.locked_out}")
        states = [
            check_key(client, redis_key(key, store.prefix), p, state, now)
            for key, p, state in zip(keys, policies, states)
        ]
    client.delete(*(redis_key(k, store.prefix) for k in keys))


# -- what the other tests rely on ---------------------------------------------------------


def test_leases_as_stored(client: redis.Redis) -> None:
    # "c", then holder expiry pairs in the order taken, then until (the last
    # expiry); a renewed holder keeps its place, a give drops its pair; PX the
    # time to until, at least a second.
    store = RedisStore(client, prefix=unique_prefix())
    rkey = redis_key("k", store.prefix)
    policy = Concurrency(3, lease=120)
    for holder, at in ((7.0, 0), (2.0**53 - 1, 1), (3.0, 2)):
        assert store.apply("k", policy, Hold(holder), T0 + at).allowed
    assert store.apply("k", policy, Hold(7.0, "renew"), T0 + 5).allowed
    pairs = f"7.0 {T0 + 125:.17g} {2.0**53 - 1!r} {T0 + 121:.17g} 3.0 {T0 + 122:.17g}"
    assert client.get(rkey) == f"c{pairs} {T0 + 125:.17g}".encode()
    assert 119_000 < client.pttl(rkey) <= 120_000  # until - now: stepped at T0 + 5
    assert store.apply("k", policy, Hold(2.0**53 - 1, "give"), T0 + 6).allowed
    assert read_state(client, rkey) == (7.0, T0 + 125, 3.0, T0 + 122, T0 + 125)
    for holder in (7.0, 3.0):
        store.apply("k", policy, Hold(holder, "give"), T0 + 7)
    assert client.get(rkey) == f"c{T0 + 7!r}".encode()  # none held: until is now
    assert 0 < client.pttl(rkey) <= 1000


def test_a_refusal_says_when_the_first_lease_ends(client: redis.Redis) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    policy = Concurrency(2, lease=60)
    store.apply("k", policy, Hold(1.0), T0)
    store.apply("k", policy, Hold(2.0), T0 + 10)
    refused = store.apply("k", policy, Hold(3.0), T0 + 20)
    assert (refused.allowed, refused.remaining, refused.retry_after, refused.reset_after) == (
        False,
        0,
        40.0,
        50.0,
    )
    late = store.apply("k", policy, Hold(1.0, "give"), T0 + 60)  # its lease ran out at T0 + 60
    assert (late.allowed, late.retry_after, late.remaining) == (False, 0.0, 1)
    assert store.apply("k", policy, Hold(3.0), T0 + 60).allowed


def test_a_plain_cost_is_refused_before_any_round_trip() -> None:
    # No server on this port: the TypeError comes first, as from step.
    nowhere = redis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    store = RedisStore(nowhere, prefix="x:")
    policy = Concurrency(3)
    with pytest.raises(TypeError, match="not a cost of 1"):
        store.apply("k", policy, 1, T0)
    with pytest.raises(TypeError, match="not a cost of 2"):
        store.apply_many(["{u}a", "{u}b"], [Limit(1, 5), policy], (1, 2), T0)
    with pytest.raises(TypeError, match=r"not a cost of 0\.5"):
        store.apply_many(["{u}a", "{u}b"], [Limit(1, 5), policy], 0.5, T0)
    with pytest.raises(StoreError):  # a peek is sent
        store.apply("k", policy, Refund(1), T0)


def test_a_key_of_another_kind_is_read_as_step_reads_it(client: redis.Redis) -> None:
    # Another shape's state reads as nothing (limiter.core.state), leases too.
    store = RedisStore(client, prefix=unique_prefix())
    store.apply("s", SlidingWindow(5, 60), 1, T0)
    store.apply("c", Concurrency(2), Hold(1.0), T0)
    for key, policy, cost in (
        ("s", Concurrency(2), 0),
        ("s", Concurrency(2), Hold(1.0)),
        ("c", SlidingWindow(5, 60), 0),
        ("c", SlidingWindow(5, 60), 1),
        ("c", Limit(1, 5), 1),
        ("c", FixedWindow(5, 60), 1),
    ):
        stored = read_state_of(client, store)
        read_as_new(store, key, policy, cost, stored)
        store.apply("c", Concurrency(2), Hold(1.0), T0)  # leases again
    for raw in ("c", "c1 2", "c1 x 3"):
        client.set(redis_key("bad", store.prefix), raw)
        with pytest.raises(StoreError, match="corrupt"):
            store.apply("bad", Concurrency(2), Hold(1.0), T0)


def test_slots_on_the_server_clock(client: redis.Redis) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    policy = Concurrency(2, lease=30)
    results = [store.apply("k", policy, Hold(h), None) for h in (1.0, 2.0, 3.0)]
    assert [r.allowed for r in results] == [True, True, False]
    assert 0 < results[-1].retry_after <= 30
    assert store.apply("k", policy, Hold(1.0, "give"), None).allowed
    assert store.apply("k", policy, Hold(3.0), None).allowed


# -- through RateLimiter: all or nothing beside a rate -------------------------------------


def test_a_slot_and_a_rate_all_or_nothing(client: redis.Redis) -> None:
    clock = ManualClock(T0)
    store = RedisStore(client, prefix=unique_prefix())
    limiter = RateLimiter(
        {"rate": Limit(1 / 60, 4), "inflight": Concurrency(3, lease=120)}, store=store, clock=clock
    )
    held = [limiter.slot("alice") for _ in range(4)]
    assert [slot.take().allowed for slot in held] == [True, True, True, False]
    # Refused for want of a slot: no token taken (one left of four).
    assert limiter.peek("alice").results[0].remaining == 1
    assert held[0].give() and not held[0].held
    assert held[3].take().allowed  # the fourth token, the freed slot
    assert held[1].give()
    # Refused by the rate alone (no token left): no slot taken, one still free.
    refused = held[0].take()
    assert not refused.allowed and refused.results[1].allowed  # the slot's: a peek
    assert limiter.peek("alice").results[1].remaining == 1
    clock.advance(120)  # every lease runs out (a give says so); two tokens back
    assert [held[2].give(), held[3].give()] == [False, False]
    with limiter.slot("alice"):
        assert limiter.peek("alice").results[1].remaining == 2
    assert limiter.peek("alice").results[1].remaining == 3


def test_a_lone_concurrency_on_the_async_stores(server: RedisServer) -> None:
    async def run(pipelining: bool) -> None:
        client = redis.asyncio.Redis(port=server.port, socket_timeout=30)
        try:
            store = AsyncRedisStore(client, prefix=unique_prefix(), pipelining=pipelining)
            limiter = RateLimiter(Concurrency(2, lease=60), store=store, clock=ManualClock(T0))
            async with limiter.aslot("k") as first:
                async with limiter.aslot("k"):
                    with pytest.raises(RateLimitExceeded) as refused:
                        async with limiter.aslot("k"):
                            pass  # pragma: no cover
                    assert refused.value.retry_after == 60.0
                assert (await first.arenew()).allowed
                assert (await limiter.apeek("k")).remaining == 1
            assert (await limiter.apeek("k")).remaining == 2
        finally:
            await client.aclose()

    asyncio.run(run(True))
    asyncio.run(run(False))


# -- exact under concurrency ----------------------------------------------------------------


def test_threads_never_hold_more_than_the_limit(server: RedisServer) -> None:
    # 8 threads, 60 take/give each on one key of Concurrency(3): the store's
    # answers never admit a fourth holder (each admitted take counts in
    # ``inside`` over a peek's round trip until its give is sent), every give
    # finds its lease, and at the end every slot is free.
    client = redis.Redis(port=server.port, socket_timeout=30)
    store = RedisStore(client, prefix=unique_prefix())
    policy = Concurrency(3, lease=120)
    lock = threading.Lock()
    inside, most, admitted, gives = [0], [0], [0], []
    barrier = threading.Barrier(8)

    def work(me: int) -> None:
        barrier.wait()
        for i in range(60):
            holder = float(me * 1000 + i + 1)
            result = store.apply("hot", policy, Hold(holder), T0)
            if not result.allowed:
                assert result.remaining == 0 and result.retry_after == 120.0
                continue
            with lock:
                inside[0] += 1
                admitted[0] += 1
                most[0] = max(most[0], inside[0])
                assert inside[0] <= 3
            assert store.apply("hot", policy, 0, T0).remaining <= 2  # a round trip held
            with lock:
                inside[0] -= 1
            gives.append(store.apply("hot", policy, Hold(holder, "give"), T0).allowed)

    threads = [threading.Thread(target=work, args=(me,)) for me in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client_free = store.apply("hot", policy, 0, T0).remaining
    client.close()
    assert 1 <= most[0] <= 3 and admitted[0] >= 60
    assert len(gives) == admitted[0] and all(gives)
    assert client_free == 3


def test_tasks_never_hold_more_than_the_limit_pipelined(server: RedisServer) -> None:
    # 200 tasks at once on the pipelined AsyncRedisStore: exactly 3 takes admitted;
    # then tasks that take and give back, never more than 3 inside.
    async def flood() -> Tuple[int, int, int]:
        client = redis.asyncio.Redis(port=server.port, socket_timeout=30)
        try:
            store = AsyncRedisStore(client, prefix=unique_prefix())
            policy = Concurrency(3, lease=120)
            first = await asyncio.gather(
                *(store.aapply("hot", policy, Hold(float(h)), T0) for h in range(1, 201))
            )
            takes = sum(r.allowed for r in first)
            await asyncio.gather(
                *(
                    store.aapply("hot", policy, Hold(float(h), "give"), T0)
                    for h, r in enumerate(first, 1)
                    if r.allowed
                )
            )
            inside, most = [0], [0]

            async def task(holder: float) -> None:
                for _ in range(5):
                    if (await store.aapply("hot", policy, Hold(holder), T0)).allowed:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                        # Held over a round trip, as a request would.
                        assert (await store.aapply("hot", policy, 0, T0)).remaining <= 2
                        inside[0] -= 1
                        give = await store.aapply("hot", policy, Hold(holder, "give"), T0)
                        assert give.allowed

            await asyncio.gather(*(task(float(h)) for h in range(1000, 1040)))
            free = (await store.aapply("hot", policy, 0, T0)).remaining
            return takes, most[0], free
        finally:
            await client.aclose()

    takes, most, free = asyncio.run(flood())
    assert (takes, free, most) == (3, 3, 3)


# -- DenyCache never replays a slot's refusal -------------------------------------------------


def test_deny_cache_passes_slot_refusals_through(client: redis.Redis) -> None:
    # A slot may be given back any moment, by another process too: every take
    # goes to the store, refused or not, alone or beside a rate.
    store = RedisStore(client, prefix=unique_prefix())
    cache = DenyCache(store, max_stale=None)
    clock = ManualClock(T0)
    for spec in (Concurrency(1), {"rate": Limit(1, 100), "inflight": Concurrency(1)}):
        limiter = RateLimiter(spec, store=cache, clock=clock)
        holder = limiter.slot("k")
        assert holder.take().allowed
        assert [limiter.slot("k").take().allowed for _ in range(3)] == [False] * 3
        assert len(cache) == 0
        # The holder gives back elsewhere (another process: the bare store).
        twin = RateLimiter(spec, store=store, clock=clock, name=limiter.name).slot("k")
        twin.holder = holder.holder
        assert twin.give()
        assert limiter.slot("k").take().allowed  # no refusal replayed
        assert len(cache) == 0


def test_a_lapsed_lease_does_not_keep_another_policys_slot(client: redis.Redis) -> None:
    clock = ManualClock(T0)
    policies = {"short": Concurrency(1, lease=10), "long": Concurrency(1, lease=100)}
    store = RedisStore(client, prefix=unique_prefix())
    limiter = RateLimiter(policies, store=store, clock=clock)
    slot = limiter.slot("k")
    assert slot.take().allowed
    clock.advance(20)  # the short lease lapsed, the long one holds
    assert slot.give() is False  # as step_all: said so, and every lease goes
    assert [r.remaining for r in limiter.peek("k").results] == [1, 1]
