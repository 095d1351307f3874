"""Section ``redis``: round trips and latency against a PING, async throughput, several limits.

Needs the Redis server at ``REDIS_URL`` (default ``redis://127.0.0.1:6379/9``;
database 9 so a test suite flushing database 0 does not meet us, and every key
is under a ``bench:`` prefix that is deleted afterwards).

* Sequential: one ``check`` on a hot key against one ``PING`` on the same
  connection; limits' fixed window ``hit`` and pyrate-limiter's Redis token
  bucket do the same.  Round trips per operation are counted at the socket
  (``send_packed_command`` calls), not inferred.
* Async: 64 tasks on one event loop, each checking the hot key in a loop,
  against 64 tasks sending PINGs; ops/s.
* Several limits per request: ``RedisStore.apply_many`` with 1, 3 and 5
  limits; round trips stay at one.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable, Dict, List, Tuple

from .common import Measure, Progress, Settings, Unavailable, interleave, new_section, ratios
from .common import summary as _summary
from .peers import HIGH

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/9")
PREFIX = f"bench:{os.getpid()}:"
TASKS = 64


class _Timer:
    """The one stopwatch of this module: ``with _Timer() as t: ...``, then ``t.seconds``.

    A ``with`` block, so that it times an ``await`` as well as a loop of calls.
    """

    seconds = 0.0

    def __enter__(self) -> _Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start


def _us_per_call(op: Callable[[], Any], n: int) -> Callable[[], float]:
    """A case for ``interleave``: ``n`` sequential calls of ``op``, microseconds per call."""

    def case() -> float:
        with _Timer() as timer:
            for _ in range(n):
                op()
        return timer.seconds / n * 1e6

    return case


def _counting_client() -> Any:
    import redis

    class CountingConnection(redis.Connection):  # type: ignore[misc]
        sends = 0

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            CountingConnection.sends += 1
            super().send_packed_command(command, check_health)

    pool = redis.ConnectionPool.from_url(REDIS_URL, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    client.counter = CountingConnection  # type: ignore[attr-defined]
    return client


def _sync_ops() -> Tuple[Dict[str, Callable[[], Any]], Dict[str, Any]]:
    """name -> one operation, each on its own counting client; and name -> its counter."""
    ops: Dict[str, Callable[[], Any]] = {}
    counters: Dict[str, Any] = {}
    ping_client = _counting_client()
    ops["PING"] = ping_client.ping
    counters["PING"] = ping_client.counter
    from limiter import Limit, RateLimiter

    try:
        from limiter.backends.redis import RedisStore
    except ImportError as exc:
        raise Unavailable(f"limiter.backends.redis not available in this tree ({exc})") from None
    client = _counting_client()
    store = RedisStore(client, prefix=PREFIX)
    limiter = RateLimiter(HIGH, HIGH, store=store)
    check = limiter.check
    ops["limiter check()"] = lambda: check("hot")
    counters["limiter check()"] = client.counter
    for n in (3, 5):
        keys = [f"multi:{i}" for i in range(n)]
        lims = [Limit(HIGH / (i + 1), HIGH) for i in range(n)]
        many = _counting_client()
        mstore = RedisStore(many, prefix=PREFIX)
        ops[f"limiter apply_many() x{n}"] = lambda mstore=mstore, keys=keys, lims=lims: (
            mstore.apply_many(keys, lims, 1, None)
        )
        counters[f"limiter apply_many() x{n}"] = many.counter
    try:
        from limits import RateLimitItemPerSecond, storage, strategies

        counter = _counting_client().counter
        lstorage = storage.RedisStorage(REDIS_URL, connection_class=counter)
        counters["limits fixed window hit()"] = counter
        hit = strategies.FixedWindowRateLimiter(lstorage).hit
        item = RateLimitItemPerSecond(HIGH)
        ops["limits fixed window hit()"] = lambda: hit(item, PREFIX + "limits-hot")
    except ImportError:
        pass
    try:
        from pyrate_limiter import (
            Duration,
            Limiter,
            Rate,
            RedisStateStore,
            StateBucket,
            TokenBucket,
        )

        pclient = _counting_client()
        bucket = StateBucket(
            [Rate(HIGH, Duration.SECOND)],
            algorithm=TokenBucket(),
            store=RedisStateStore(pclient, PREFIX + "pyrate-hot"),
        )
        acquire = Limiter(bucket).try_acquire
        ops["pyrate-limiter try_acquire()"] = lambda: acquire("hot", 1, False)
        counters["pyrate-limiter try_acquire()"] = pclient.counter
    except ImportError:
        pass
    return ops, counters


def _round_trips(op: Callable[[], Any], counter: Any) -> float:
    before = counter.sends
    for _ in range(20):
        op()
    return (counter.sends - before) / 20


async def _async_case(name: str, n: int) -> float:
    """ops/s of ``TASKS`` tasks sharing one client, ``n`` operations in all."""
    import redis.asyncio as aredis

    per_task = max(1, n // TASKS)
    client = aredis.Redis.from_url(REDIS_URL, max_connections=TASKS)
    op: Callable[[], Any]
    closers: List[Any] = [client]
    if name == "PING":
        op = client.ping
    elif name == "limiter acheck()":
        from limiter import RateLimiter
        from limiter.backends.redis import AsyncRedisStore

        acheck = RateLimiter(HIGH, HIGH, store=AsyncRedisStore(client, prefix=PREFIX)).acheck

        def op() -> Any:
            return acheck("hot")

    elif name == "limits fixed window hit() (limits.aio)":
        from limits import RateLimitItemPerSecond
        from limits.aio import storage, strategies

        lstorage = storage.RedisStorage("async+" + REDIS_URL, implementation="redispy")
        hit = strategies.FixedWindowRateLimiter(lstorage).hit
        item = RateLimitItemPerSecond(HIGH)

        def op() -> Any:
            return hit(item, PREFIX + "limits-hot")

    else:
        from pyrate_limiter import (
            Duration,
            Limiter,
            Rate,
            RedisStateStore,
            StateBucket,
            TokenBucket,
        )

        bucket = StateBucket(
            [Rate(HIGH, Duration.SECOND)],
            algorithm=TokenBucket(),
            store=RedisStateStore(client, PREFIX + "pyrate-ahot"),
        )
        limiter = Limiter(bucket)

        def op() -> Any:
            return limiter.try_acquire_async("hot", 1, False)

    async def worker() -> None:
        for _ in range(per_task):
            await op()

    await op()  # warm-up: scripts loaded, connection open
    with _Timer() as timer:
        await asyncio.gather(*(worker() for _ in range(TASKS)))
    for c in closers:
        await c.aclose()
    return per_task * TASKS / timer.seconds


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    try:
        import redis
    except ImportError:
        raise Unavailable("redis-py is not installed") from None
    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=1).ping()
    except Exception as exc:
        raise Unavailable(f"no Redis server at {REDIS_URL} ({exc})") from None
    section = new_section("redis")
    if not settings.with_peers:
        section["notes"].append("peers skipped (--no-peers)")
    ops, counters = _sync_ops()
    if not settings.with_peers:
        ops = {k: v for k, v in ops.items() if k == "PING" or k.startswith("limiter")}
    n = settings.scale(3_000, 600, 50)
    rounds = max(3, settings.rounds) if not settings.tiny else 1
    trips: Dict[str, float] = {}
    for name, op in ops.items():
        op()  # script load, connection
        trips[name] = _round_trips(op, counters[name])

    samples = interleave(
        {k: _us_per_call(v, n) for k, v in ops.items()}, rounds, progress, "redis sync"
    )
    for name, values in samples.items():
        section["measures"].append(
            Measure(
                id=f"redis/sync/{name}",
                label=name,
                library="redis" if name == "PING" else _lib(name),
                unit="us/op",
                samples=values,
                group="sequential, one connection",
                note=f"{trips.get(name, float('nan')):g} round trips per op",
            ).as_dict()
        )
    vs_ping = {
        name: _summary(ratios(values, samples["PING"]))
        for name, values in samples.items()
        if name != "PING"
    }
    anames = ["PING", "limiter acheck()"]
    if settings.with_peers:
        anames += ["limits fixed window hit() (limits.aio)", "pyrate-limiter try_acquire_async()"]
    an = settings.scale(20_000, 4_000, 128)

    def acase(name: str) -> Callable[[], float]:
        return lambda: asyncio.run(_async_case(name, an))

    errors: Dict[str, str] = {}
    asamples = interleave(
        {name: acase(name) for name in anames},
        rounds,
        progress,
        "redis async",
        lambda name, exc: errors.update({name: repr(exc)}),
    )
    for name, values in asamples.items():
        section["measures"].append(
            Measure(
                id=f"redis/async/{name}",
                label=name,
                library="redis" if name == "PING" else _lib(name),
                unit="ops/s",
                samples=values,
                group=f"asyncio, {TASKS} concurrent tasks",
                note=errors.get(name, ""),
            ).as_dict()
        )
    section["data"] = {
        "url": REDIS_URL,
        "round_trips": trips,
        "vs_ping": vs_ping,
        "async_vs_ping": {
            name: _summary(ratios(values, asamples["PING"]))
            for name, values in asamples.items()
            if name != "PING" and values
        },
    }
    try:
        section["data"]["breakdown"] = _breakdown(n, rounds, progress)
    except Exception as exc:  # internals moved: the breakdown is a diagnostic only
        section["notes"].append(f"breakdown not measured: {exc!r}")
    _cleanup()
    return section


def _breakdown(n: int, rounds: int, progress: Progress) -> Dict[str, float]:
    """us per call: PING, a trivial EVALSHA, our script by raw EVALSHA, store.apply, check."""
    import redis

    from limiter import Limit, RateLimiter
    from limiter.backends.redis import SCRIPT, RedisStore

    client = redis.Redis.from_url(REDIS_URL)
    store = RedisStore(client, prefix=PREFIX)
    limit = Limit(HIGH, HIGH)
    limiter = RateLimiter(limit, store=store)
    trivial = client.script_load("return 1")
    sha = client.script_load(SCRIPT)
    rkey = store._key(limiter.storage_key("hot"))
    args = store._args((limit,), 1, None)
    ops: Dict[str, Callable[[], Any]] = {
        "PING": client.ping,
        "EVALSHA of `return 1`": lambda: client.evalsha(trivial, 0),
        "EVALSHA of the check script, ARGV prepared": lambda: client.evalsha(sha, 1, rkey, *args),
        "RedisStore.apply()": lambda: store.apply(limiter.storage_key("hot"), limit, 1, None),
        "RateLimiter.check()": lambda: limiter.check("hot"),
    }
    for op in ops.values():
        op()

    samples = interleave(
        {k: _us_per_call(v, n) for k, v in ops.items()}, rounds, progress, "redis profile"
    )
    return {k: sorted(v)[len(v) // 2] for k, v in samples.items() if v}


def _lib(name: str) -> str:
    if name.startswith("limiter"):
        return "tokenlimiter"
    return name.split()[0]


def _cleanup() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=PREFIX + "*", count=1000))
    keys += list(client.scan_iter(match="*" + PREFIX + "*", count=1000))
    if keys:
        client.delete(*set(keys))
