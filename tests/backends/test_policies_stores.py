"""Issue 15's policies on every store, through the store API (``apply_many`` with explicit ``now``).

Per-limit costs (requests and tokens charged their own amounts, all or
nothing), charges into debt and the exact wait, and lockouts, on
``MemoryStore``, ``SQLiteStore`` (two handles on one file), ``RedisStore``
and ``AsyncRedisStore`` (a throwaway redis-server); then exact admitted
counts under 8 threads and across 4 processes on SQLite and Redis.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import pytest

from limiter import (
    Charge,
    Concurrency,
    FixedWindow,
    Limit,
    Lockout,
    ManualClock,
    MemoryStore,
    Quota,
    RateLimiter,
    SlidingWindow,
)
from limiter.backends.sqlite import SQLiteStore
from limiter.core.costs import Cost
from limiter.core.result import RateLimitResult
from limiter.testing import T0

REQUESTS = Limit.parse("10/minute")
TOKENS = Limit.parse("1000/minute")
LIMITS = (
    Limit(REQUESTS.rate, REQUESTS.burst, "requests"),
    Limit(TOKENS.rate, TOKENS.burst, "tokens"),
)
KEYS = ["{u}:requests", "{u}:tokens"]
LOCK_KEY = "{u}:lockout"


class Stores:
    """One store under test: sync handles taken in turn, or an asyncio store on its loop."""

    def __init__(
        self, handles: Sequence[Any], loop: Optional[asyncio.AbstractEventLoop] = None
    ) -> None:
        self.handles = list(handles)
        self.loop = loop
        self.turn = 0

    def _next(self) -> Any:
        self.turn += 1
        return self.handles[self.turn % len(self.handles)]

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Cost, now: float
    ) -> RateLimitResult:
        store = self._next()
        if self.loop is not None:
            result: RateLimitResult = self.loop.run_until_complete(
                store.aapply_many(keys, limits, cost, now)
            )
            return result
        result = store.apply_many(keys, limits, cost, now)
        return result

    def reset(self, key: str) -> None:
        store = self._next()
        if self.loop is not None:
            self.loop.run_until_complete(store.areset(key))
        else:
            store.reset(key)


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("async-redis", marks=pytest.mark.redis),
    ]
)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    kind = request.param
    if kind == "memory":
        yield Stores([MemoryStore()])
    elif kind == "sqlite":
        path = tmp_path / "limits.db"
        handles = [SQLiteStore(path), SQLiteStore(path)]  # two connections on one file
        yield Stores(handles)
        for handle in handles:
            handle.close()
    elif kind == "redis":
        from helpers.redis_servers import unique_prefix
        from limiter.backends.redis import RedisStore

        client = request.getfixturevalue("server").client()
        yield Stores([RedisStore(client, prefix=unique_prefix())])
        client.close()
    else:
        import redis.asyncio

        from helpers.redis_servers import unique_prefix
        from limiter.backends.redis import AsyncRedisStore

        port = request.getfixturevalue("server").port
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # Python 3.9: the client's pool asks for the current loop
        client = redis.asyncio.Redis(port=port, socket_timeout=10)
        try:
            yield Stores([AsyncRedisStore(client, prefix=unique_prefix())], loop)
        finally:
            loop.run_until_complete(client.aclose())
            asyncio.set_event_loop(None)
            loop.close()


# -- per-limit costs ----------------------------------------------------------------------


def test_per_limit_costs_are_charged_each_their_own_all_or_nothing(stores: Stores) -> None:
    results = [stores.apply_many(KEYS, LIMITS, (1, 350), T0) for _ in range(3)]
    assert [r.allowed for r in results] == [True, True, False]
    assert [[x.remaining for x in r.results] for r in results] == [[9, 650], [8, 300], [8, 300]]
    refused = results[2]
    assert refused.policy == "tokens" and refused.remaining == 300
    assert [(x.policy, x.allowed) for x in refused.results] == [
        ("requests", True),  # a peek: its request was not taken
        ("tokens", False),
    ]
    # 50 tokens at 1000/minute: 3 s.  The wait is exact.
    wait = refused.retry_after
    assert wait == pytest.approx(3.0, abs=1e-6)
    assert not stores.apply_many(KEYS, LIMITS, (1, 350), T0 + wait - 0.01).allowed
    admitted = stores.apply_many(KEYS, LIMITS, [1, 350], T0 + wait)  # a list too
    assert admitted.allowed and [x.remaining for x in admitted.results] == [7, 0]
    # Requests alone (0 tokens) until the requests run out: refused by "requests".
    alone = [stores.apply_many(KEYS, LIMITS, (1, 0), T0 + wait) for _ in range(8)]
    assert [r.allowed for r in alone] == [True] * 7 + [False]
    assert alone[-1].policy == "requests"
    assert alone[-1].retry_after == pytest.approx(3.0, abs=1e-6)  # half a request: 3 s


# -- charges ------------------------------------------------------------------------------


def test_a_charge_puts_the_tokens_into_debt_and_the_wait_is_exact(stores: Stores) -> None:
    # The response cost 1500 tokens more than estimated: 500 owed, 90 s to full.
    charged = stores.apply_many(KEYS, LIMITS, (0, Charge(1500)), T0)
    assert charged.allowed and [x.remaining for x in charged.results] == [10, 0]
    assert charged.results[1].reset_after == pytest.approx(90.0, abs=1e-6)
    refused = stores.apply_many(KEYS, LIMITS, (1, 1), T0 + 10)
    assert (refused.allowed, refused.policy, refused.remaining) == (False, "tokens", 0)
    wait = refused.retry_after  # 80 s of debt left, less a window, plus one token
    assert wait == pytest.approx(20.06, abs=1e-6)
    assert not stores.apply_many(KEYS, LIMITS, (1, 1), T0 + 10 + wait - 0.01).allowed
    assert stores.apply_many(KEYS, LIMITS, (1, 1), T0 + 10 + wait).allowed
    # However large, a charge owes at most one burst: two windows (120 s) to full.
    most = stores.apply_many(KEYS, LIMITS, Charge(10**400), T0 + 100)
    assert (
        most.allowed
        and [x.reset_after for x in most.results] == [pytest.approx(120.0, abs=1e-6)] * 2
    )
    refused = stores.apply_many(KEYS, LIMITS, (1, 1), T0 + 100)
    assert refused.policy == "requests"  # a request's 6 s beyond the debt, vs a token's 0.06
    assert refused.retry_after == pytest.approx(66.0, abs=1e-6)
    assert not stores.apply_many(KEYS, LIMITS, (1, 1), T0 + 100 + 65.99).allowed
    assert stores.apply_many(KEYS, LIMITS, (1, 1), T0 + 100 + 66).allowed


# -- a policy changed under one limiter name ----------------------------------------------


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]
)
def test_a_key_another_kind_of_policy_wrote_starts_afresh(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # A deployment changes its policy, keeping the limiter's name and store:
    # each key starts afresh under the new policy (limiter.core.state), where
    # memory and SQLite raised AttributeError or TypeError and Redis a StoreError.
    if kind == "memory":
        store: Any = MemoryStore()
    elif kind == "sqlite":
        store = SQLiteStore(tmp_path / "limits.db")
    else:
        from helpers.redis_servers import unique_prefix
        from limiter.backends.redis import RedisStore

        store = RedisStore(request.getfixturevalue("server").client(), prefix=unique_prefix())
    clock = ManualClock(T0)
    policies = [SlidingWindow(3, 60), "3/minute", Concurrency(3), FixedWindow(3, 60), "3/minute"]
    for policy in policies:
        limiter = RateLimiter(policy, store=store, name="api", clock=clock)
        if limiter.holds_slots:
            slots = [limiter.slot("k") for _ in range(4)]
            assert [slot.take().allowed for slot in slots] == [True] * 3 + [False], policy
        else:
            assert [limiter.check("k").allowed for _ in range(4)] == [True] * 3 + [False], policy
        clock.advance(1)


# -- lockouts -----------------------------------------------------------------------------

LOCKOUT = Lockout(breaches=3, within=60, duration=600)
LOCKED_KEYS = [*KEYS, LOCK_KEY]
LOCKED_LIMITS = (*LIMITS, LOCKOUT)


def drain_and_breach(stores: Stores, now: float) -> List[RateLimitResult]:
    """10 requests admitted, then 3 refused: the third locks the key out.

    A per-limit cost names one for the lockout too (ignored: it takes nothing).
    """
    return [stores.apply_many(LOCKED_KEYS, LOCKED_LIMITS, (1, 10, 0), now) for _ in range(13)]


def test_a_lockout_refuses_even_full_buckets_until_its_end(stores: Stores) -> None:
    results = drain_and_breach(stores, T0)
    assert [r.allowed for r in results] == [True] * 10 + [False] * 3
    assert [r.locked_out for r in results] == [False] * 12 + [True]
    locked = results[-1]
    assert locked.kind == "lockout" and locked.policy == "lockout"
    assert locked.retry_after == pytest.approx(600, abs=1e-6)
    assert [x.policy for x in locked.results] == ["requests", "tokens", "lockout"]
    # Past the buckets' refill (a minute), still refused, and nothing is taken.
    for t in (61, 61, 300, 599.99):
        refused = stores.apply_many(LOCKED_KEYS, LOCKED_LIMITS, (1, 10, 0), T0 + t)
        assert (refused.allowed, refused.locked_out) == (False, True), t
        assert refused.retry_after == pytest.approx(600 - t, abs=1e-6), t  # never extended
        assert [x.remaining for x in refused.results] == [10, 1000, 0], t
    # At its end the key starts afresh: a full burst, and three breaches to lock it.
    again = drain_and_breach(stores, T0 + 600)
    assert [r.allowed for r in again] == [True] * 10 + [False] * 3
    assert [r.locked_out for r in again] == [False] * 12 + [True]


def test_a_lockout_is_lifted_by_deleting_its_key(stores: Stores) -> None:
    assert drain_and_breach(stores, T0)[-1].locked_out
    assert stores.apply_many(LOCKED_KEYS, LOCKED_LIMITS, (1, 10, 0), T0 + 100).locked_out
    stores.reset(LOCK_KEY)
    lifted = stores.apply_many(LOCKED_KEYS, LOCKED_LIMITS, (1, 10, 0), T0 + 100)
    assert (lifted.allowed, lifted.locked_out, lifted.policy) == (True, False, "requests")
    assert [x.remaining for x in lifted.results] == [9, 990]


# -- threads and processes ----------------------------------------------------------------

#: A frozen clock (now = T0) and rates that refill nothing meanwhile: requests
#: admit 100 and tokens 10,000, so checks of (1, 350) admit exactly 28, and
#: the lockout counts exactly 4 ordinary denials before the 5th locks.
FROZEN = (Limit(0.001, 100, "requests"), Limit(0.001, 10_000, "tokens"))
FROZEN_LOCKOUT = Lockout(breaches=5, within=60, duration=600)


def outcomes(results: Sequence[RateLimitResult]) -> Tuple[int, int, int]:
    """(admitted, ordinary denials, locked out)."""
    admitted = sum(r.allowed for r in results)
    locked = sum(r.locked_out for r in results)
    return admitted, len(results) - admitted - locked, locked


def check_frozen(store: Any, prefix: str, checks: int) -> Tuple[int, int, int]:
    keys = [f"{{{prefix}}}:requests", f"{{{prefix}}}:tokens", f"{{{prefix}}}:lockout"]
    limits = (*FROZEN, FROZEN_LOCKOUT)
    return outcomes([store.apply_many(keys, limits, (1, 350, 0), T0) for _ in range(checks)])


def assert_frozen_left(store: Any, prefix: str) -> None:
    """Refusals took nothing: 28 requests and 9,800 tokens were taken, no more."""
    keys = [f"{{{prefix}}}:requests", f"{{{prefix}}}:tokens"]
    peek = store.apply_many(keys, FROZEN, 0, T0)
    assert [x.remaining for x in peek.results] == [72, 200]
    if isinstance(store, SQLiteStore):
        store.close()


def redis_store(port: int, prefix: str) -> Any:
    import redis

    from limiter.backends.redis import RedisStore

    client = redis.Redis(port=port, socket_timeout=30, socket_connect_timeout=30)
    return RedisStore(client, prefix=prefix)


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]
)
def test_eight_threads_admit_exactly(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    shared: Any = None
    if kind == "memory":
        shared = MemoryStore()
    elif kind == "redis":
        from helpers.redis_servers import unique_prefix

        shared = redis_store(request.getfixturevalue("server").port, unique_prefix())
    path = tmp_path / "limits.db"
    totals: List[Tuple[int, int, int]] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        # SQLite: a handle (a connection) per thread, all on one file.
        store = SQLiteStore(path, timeout=60) if kind == "sqlite" else shared
        barrier.wait()
        totals.append(check_frozen(store, "hot", 50))
        if kind == "sqlite":
            store.close()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted, denied, locked = (sum(column) for column in zip(*totals))
    assert (admitted, denied, locked) == (28, 4, 400 - 32)
    assert_frozen_left(SQLiteStore(path) if kind == "sqlite" else shared, "hot")


@pytest.mark.redis
def test_asyncio_checks_in_flight_together_admit_exactly(server: Any) -> None:
    # AsyncRedisStore pipelines checks issued while one is in flight.
    import redis.asyncio

    from helpers.redis_servers import unique_prefix
    from limiter.backends.redis import AsyncRedisStore

    async def flood() -> Tuple[int, int, int]:
        client = redis.asyncio.Redis(port=server.port, socket_timeout=10)
        store = AsyncRedisStore(client, prefix=unique_prefix())
        assert store._pipeline is not None  # the pipelined path, not one call per check
        keys = ["{a}:requests", "{a}:tokens", "{a}:lockout"]
        limits = (*FROZEN, FROZEN_LOCKOUT)
        try:
            results = await asyncio.gather(
                *(store.aapply_many(keys, limits, (1, 350, 0), T0) for _ in range(200))
            )
            peek = await store.aapply_many(keys[:2], FROZEN, 0, T0)
            assert [x.remaining for x in peek.results] == [72, 200]
            return outcomes(results)
        finally:
            await client.aclose()

    assert asyncio.run(flood()) == (28, 4, 200 - 32)


def hammer(kind: str, where: Any, checks: int, start: Any) -> Tuple[int, int, int]:
    # where: the SQLite file, or Redis's (port, prefix).
    store = redis_store(*where) if kind == "redis" else SQLiteStore(where, timeout=60)
    start.wait()
    return check_frozen(store, "hot", checks)


def in_processes(work: Any, kind: str, where: Any, calls: int) -> List[Any]:
    """``work(kind, where, calls, start)`` in 4 spawned processes started together."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        start = manager.Event()
        with ctx.Pool(4) as pool:
            pending = [pool.apply_async(work, (kind, where, calls, start)) for _ in range(4)]
            start.set()
            return [p.get(300) for p in pending]  # generous: a busy machine


def run_processes(kind: str, where: Any) -> Tuple[int, ...]:
    totals = in_processes(hammer, kind, where, 50)
    return tuple(sum(column) for column in zip(*totals))


def test_four_processes_on_one_sqlite_file_admit_exactly(tmp_path: Path) -> None:
    path = str(tmp_path / "limits.db")
    assert run_processes("sqlite", path) == (28, 4, 200 - 32)
    assert_frozen_left(SQLiteStore(path), "hot")


@pytest.mark.redis
def test_four_processes_on_redis_admit_exactly(server: Any) -> None:
    from helpers.redis_servers import unique_prefix

    prefix = unique_prefix()
    assert run_processes("redis", (server.port, prefix)) == (28, 4, 200 - 32)
    assert_frozen_left(redis_store(server.port, prefix), "hot")


def charge_frozen(kind: str, where: Any, charges: int, start: Any) -> int:
    """``charges`` charges of 30 tokens (no request) to the "paid" key; returns how many."""
    store = redis_store(*where) if kind == "redis" else SQLiteStore(where, timeout=60)
    keys = ["{paid}:requests", "{paid}:tokens"]
    start.wait()
    done = sum(store.apply_many(keys, FROZEN, (0, Charge(30)), T0).allowed for _ in range(charges))
    if kind == "sqlite":
        store.close()
    return done


def shared_place(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Where processes meet: Redis's (port, a fresh prefix), or a SQLite file."""
    if kind == "redis":
        from helpers.redis_servers import unique_prefix

        return (request.getfixturevalue("server").port, unique_prefix())
    return str(tmp_path / "limits.db")


def tokens_left(kind: str, where: Any) -> int:
    store = redis_store(*where) if kind == "redis" else SQLiteStore(where)
    left = store.apply_many(["{paid}:requests", "{paid}:tokens"], FROZEN, 0, T0).results
    assert left[0].remaining == 100  # a charge of 0 requests took none
    return int(left[1].remaining)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_charges_from_threads_and_processes_add_up_exactly(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # No charge may be lost to a race: 8 threads then 4 processes, 25 charges
    # of 30 tokens each, leave exactly 10,000 - 12 * 25 * 30 = 1,000 tokens.
    where = shared_place(kind, request, tmp_path)
    barrier = threading.Barrier(8)
    done: List[int] = []
    threads = [
        threading.Thread(target=lambda: done.append(charge_frozen(kind, where, 25, barrier)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(done) == 200 and tokens_left(kind, where) == 10_000 - 200 * 30
    assert sum(in_processes(charge_frozen, kind, where, 25)) == 100
    assert tokens_left(kind, where) == 1_000


#: A day quota of 100 beside a bucket that never refuses first.
DAY = (Limit(1000.0, 1000, "burst"), Quota(100, per="day", name="day"))


def spend_quota(kind: str, where: Any, calls: int, start: Any) -> int:
    """``calls`` checks of the day quota (at T0: no boundary crossed); returns the admitted."""
    store = redis_store(*where) if kind == "redis" else SQLiteStore(where, timeout=60)
    start.wait()
    keys = ["{q}:burst", "{q}:day"]
    admitted = sum(store.apply_many(keys, DAY, 1, T0).allowed for _ in range(calls))
    if kind == "sqlite":
        store.close()
    return admitted


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_a_quota_shared_by_four_processes_admits_exactly_its_count(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    where = shared_place(kind, request, tmp_path)
    assert sum(in_processes(spend_quota, kind, where, 40)) == 100  # of 160 checks
