"""Section ``postgres``: ``PostgresStore`` against ``SELECT 1``, ``RedisStore`` and
pyrate-limiter's PostgreSQL bucket, in one run (issue 25).

The server is this run's one PostgreSQL (``bench/pgenv.py``: ``POSTGRES_URL``,
else a throwaway cluster with PostgreSQL's default durability); Redis is
``bench/redisenv.py``'s.  Every limiter checks one hot key at ``HIGH``/s (so
everything is admitted and each check writes).  Our tables live in a schema
of this process's own, dropped at the end, as is pyrate-limiter's table.

* Sequential latency, one connection: ``SELECT 1`` sent by psycopg on the
  store's own pooled connection (taken and given back per call, as a check
  does), and sent as a check is (prepared, through libpq: the round trip
  alone), against ``RateLimiter.check`` on a ``PostgresStore`` whose table is
  logged (its default: each check's transaction commits asynchronously), logged
  with ``synchronous_commit=True`` (each commit waits for the WAL to reach the
  disk), and ``UNLOGGED``; ``RedisStore``; pyrate-limiter's ``PostgresBucket`` (a log of
  items under a table lock; its clock is the server's, one more query).
* 8 threads sharing each limiter: checks per second, and the share
  admitted (all, at this rate: a refusal here would be a wrong answer).
  pyrate-limiter is called blocking, its API's default: its ``Limiter``
  serializes calls with a lock of its own, which, not blocking, refuses at
  once whatever the rate.
* 64 asyncio tasks on one event loop: ``AsyncPostgresStore``,
  ``AsyncRedisStore``, pyrate-limiter's ``try_acquire_async`` (its
  PostgreSQL bucket is synchronous: it runs in the loop).

Ratios come first in the data (``vs_select1``, ``vs_pyrate``, ``vs_redis``),
each per round, then the absolute figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import pgenv, redisenv
from .common import Measure, Progress, Settings, Unavailable, interleave, new_section, ratios
from .common import summary as _summary
from .peers import HIGH

SCHEMA = f"bench_{os.getpid()}"
PYRATE_TABLE = f"bench_{os.getpid()}"
THREADS = 8
TASKS = 64

SELECT_1 = "SELECT 1 (psycopg, the store's pooled connection)"
SELECT_1_LIBPQ = "SELECT 1 (libpq, prepared: as a check is sent)"
OURS = "PostgresStore check()"
OURS_SYNC_COMMIT = "PostgresStore check(), synchronous_commit=True"
OURS_UNLOGGED = "PostgresStore check(), UNLOGGED"
REDIS = "RedisStore check()"
PYRATE = "pyrate-limiter PostgresBucket try_acquire()"

#: Our rows against SELECT 1: the issue's ceiling for the ratio of times (the
#: synchronous commit's row has none: its time is the disk's).
CEILINGS = {OURS: 2.0, OURS_UNLOGGED: 1.5}

#: (row, PostgresStore keywords): our three tables and commit settings.
OUR_ROWS: List[Tuple[str, Dict[str, Any]]] = [
    (OURS, {"table": f"{SCHEMA}.logged"}),
    (
        OURS_SYNC_COMMIT,
        {"table": f"{SCHEMA}.logged", "prefix": "sync-commit:", "synchronous_commit": True},
    ),
    (OURS_UNLOGGED, {"table": f"{SCHEMA}.unlogged", "unlogged": True}),
]


def _pool(size: int) -> Any:
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(
        pgenv.url(), min_size=1, max_size=size, kwargs={"autocommit": True}, open=True
    )
    pool.wait(30)
    return pool


def _our_store(row: str, options: Dict[str, Any], size: int) -> Tuple[Any, Any]:
    """``(store, its pool)`` for one of ``OUR_ROWS``, installed."""
    from limiter.backends.postgres import PostgresStore

    pool = _pool(size)
    store = PostgresStore(pool, **options)
    store.install()
    return store, pool


def _pyrate(size: int) -> Any:
    """pyrate-limiter's ``Limiter`` on its PostgreSQL bucket, on this run's server.

    Called blocking, as its API's default: its ``Limiter`` takes a lock of its
    own around each call, which, not blocking, refuses at once whatever the
    rate while another thread holds it (no decision at all).
    """
    from psycopg_pool import ConnectionPool
    from pyrate_limiter import Duration, Limiter, PostgresBucket, Rate

    # Its bucket locks its table inside a transaction: no autocommit (its docs' pool).
    pool = ConnectionPool(pgenv.url(), min_size=1, max_size=size, open=True)
    return Limiter(PostgresBucket(pool, PYRATE_TABLE, [Rate(HIGH, Duration.SECOND)]))


def _check_ops(
    settings: Settings, size: int, notes: List[str]
) -> Tuple[Dict[str, Callable[[], Any]], List[Any]]:
    """row -> one check of the hot key, each limiter on ``size`` connections; what to close.

    With one connection, ``SELECT 1`` on our logged store's; rows that cannot
    run go to ``notes``.
    """
    from limiter import RateLimiter

    ops: Dict[str, Callable[[], Any]] = {}
    closers: List[Any] = []
    for row, options in OUR_ROWS:
        store, pool = _our_store(row, options, size)
        closers.append(pool)
        ops[row] = _hot(RateLimiter(HIGH, HIGH, store=store).check)
        if row == OURS and size == 1:
            ops[SELECT_1] = _select_1(pool)
            ops[SELECT_1_LIBPQ] = _select_1_libpq(pool)
    try:
        from limiter.backends.redis import RedisStore

        client = redisenv.sync_client()
        closers.append(client)
        ops[REDIS] = _hot(
            RateLimiter(HIGH, HIGH, store=RedisStore(client, prefix=f"{SCHEMA}:")).check
        )
    except (Unavailable, ImportError) as exc:
        notes.append(f"{REDIS}: not measured ({exc})")
    if settings.with_peers:
        try:
            limiter = _pyrate(size)
            closers.append(limiter)  # closes its bucket's pool too
            ops[PYRATE] = lambda: limiter.try_acquire("hot", 1, True)
        except ImportError as exc:
            notes.append(f"{PYRATE}: not measured (pip install pyrate-limiter: {exc})")
    return ops, closers


def _select_1_libpq(pool: Any) -> Callable[[], Any]:
    """``SELECT 1`` sent as the store sends a check: prepared, straight through libpq."""
    with pool.connection() as conn:
        conn.pgconn.prepare(b"bench_select_1", b"SELECT 1")

    def select_1() -> Any:
        conn = pool.getconn()
        try:
            return conn.pgconn.exec_prepared(b"bench_select_1", None).get_value(0, 0)
        finally:
            pool.putconn(conn)

    return select_1


def _hot(check: Callable[[str], Any]) -> Callable[[], Any]:
    return lambda: check("hot")


def _select_1(pool: Any) -> Callable[[], Any]:
    def select_1() -> Any:
        conn = pool.getconn()
        try:
            return conn.execute("SELECT 1").fetchone()
        finally:
            pool.putconn(conn)

    return select_1


def _us_per_call(op: Callable[[], Any], n: int) -> Callable[[], float]:
    def case() -> float:
        start = time.perf_counter()
        for _ in range(n):
            op()
        return (time.perf_counter() - start) / n * 1e6

    return case


def _threads_case(
    op: Callable[[], Any], seconds: float, admitted: List[float]
) -> Callable[[], float]:
    """``THREADS`` threads calling ``op`` for ``seconds``: checks per second (admitted
    share appended to ``admitted``)."""

    def case() -> float:
        counts: List[Tuple[int, int]] = []
        barrier = threading.Barrier(THREADS + 1)

        def worker() -> None:
            n = yes = 0
            barrier.wait()
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                yes += _allowed(op())
                n += 1
            counts.append((n, yes))

        threads = [threading.Thread(target=worker) for _ in range(THREADS)]
        for t in threads:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        total, yes = (sum(column) for column in zip(*counts))
        admitted.append(yes / total if total else float("nan"))
        return total / elapsed

    return case


def _allowed(outcome: Any) -> bool:
    return bool(getattr(outcome, "allowed", outcome))


async def _async_case(name: str, seconds: float) -> Tuple[float, float]:
    """``TASKS`` tasks on one loop checking the hot key for ``seconds``: (ops/s, admitted)."""
    from limiter import RateLimiter

    closers: List[Callable[[], Any]] = []
    if name == REDIS:
        from limiter.backends.redis import AsyncRedisStore

        client = redisenv.async_client()
        closers.append(client.aclose)
        acheck = RateLimiter(HIGH, HIGH, store=AsyncRedisStore(client, prefix=f"{SCHEMA}:")).acheck

        def op() -> Any:
            return acheck("hot")

    elif name == PYRATE:
        limiter = _pyrate(THREADS)
        closers.append(lambda: asyncio.to_thread(limiter.close))

        def op() -> Any:
            return limiter.try_acquire_async("hot", 1, True)

    else:
        from limiter.backends.postgres import AsyncPostgresStore

        store = AsyncPostgresStore(pgenv.url(), max_connections=THREADS, **dict(OUR_ROWS)[name])
        closers.append(store.aclose)
        acheck = RateLimiter(HIGH, HIGH, store=store).acheck

        def op() -> Any:
            return acheck("hot")

    counts: List[Tuple[int, int]] = []

    async def worker(deadline: float) -> None:
        n = yes = 0
        while time.perf_counter() < deadline:
            yes += _allowed(await op())
            n += 1
        counts.append((n, yes))

    await asyncio.gather(*(op() for _ in range(THREADS)))  # connections open, installed
    start = time.perf_counter()
    await asyncio.gather(*(worker(start + seconds) for _ in range(TASKS)))
    elapsed = time.perf_counter() - start
    for close in closers:
        await close()
    total, yes = (sum(column) for column in zip(*counts))
    return total / elapsed, (yes / total if total else float("nan"))


def _add(section: Dict[str, Any], samples: Dict[str, List[float]], kind: str, unit: str,
         group: str, notes: Optional[Dict[str, str]] = None) -> None:  # fmt: skip
    for name, values in samples.items():
        section["measures"].append(
            Measure(
                id=f"postgres/{kind}/{name}",
                label=name,
                library="pyrate-limiter" if name == PYRATE else "tokenlimiter",
                unit=unit,
                samples=values,
                group=group,
                note=(notes or {}).get(name, ""),
            ).as_dict()
        )


def _versus(samples: Dict[str, List[float]], other: str) -> Dict[str, Any]:
    """Each of our rows over ``other``'s, per round."""
    return {
        name: _summary(ratios(values, samples[other]))
        for name, values in samples.items()
        if name.startswith("PostgresStore") and samples.get(other) and values
    }


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    try:
        import psycopg_pool  # noqa: F401

        from limiter.backends.postgres import PostgresStore  # noqa: F401
    except ImportError as exc:
        raise Unavailable(f"PostgresStore needs the postgres extra ({exc})") from None
    pgenv.url()
    section = new_section("postgres")
    _create_schema()
    try:
        rounds = settings.rounds if not settings.tiny else 1
        seconds = settings.scale(1.0, 0.3, 0.1)
        ops, closers = _check_ops(settings, 1, section["notes"])
        n = settings.scale(2_000, 300, 50)
        for op in ops.values():
            op()
        seq = interleave(
            {k: _us_per_call(v, n) for k, v in ops.items()}, rounds, progress, "postgres seq"
        )
        _close(closers)
        _add(section, seq, "seq", "us/op", "sequential, one connection")
        tops, closers = _check_ops(settings, THREADS, [])
        admitted: Dict[str, List[float]] = {name: [] for name in tops}
        thr = interleave(
            {k: _threads_case(v, seconds, admitted[k]) for k, v in tops.items()},
            rounds,
            progress,
            "postgres threads",
        )
        _close(closers)
        _add(section, thr, "threads", "checks/s", f"{THREADS} threads, hot key")
        anames = [row for row, _ in OUR_ROWS] + [n for n in (REDIS, PYRATE) if n in ops]
        aadmitted: Dict[str, List[float]] = {name: [] for name in anames}

        def acase(name: str) -> Callable[[], float]:
            def case() -> float:
                rate, share = asyncio.run(_async_case(name, seconds))
                aadmitted[name].append(share)
                return rate

            return case

        asy = interleave({k: acase(k) for k in anames}, rounds, progress, "postgres async")
        _add(section, asy, "async", "checks/s", f"asyncio, {TASKS} tasks, hot key")
        section["data"] = {
            "server": pgenv.describe(),
            "vs_select1": _versus(seq, SELECT_1),
            "vs_select1_libpq": _versus(seq, SELECT_1_LIBPQ),
            "ceilings": CEILINGS,
            "vs_pyrate": {
                "sequential": _versus({k: [1 / v for v in vs] for k, vs in seq.items()}, PYRATE),
                "threads": _versus(thr, PYRATE),
                "async": _versus(asy, PYRATE),
            },
            "vs_redis": {
                "sequential": _versus({k: [1 / v for v in vs] for k, vs in seq.items()}, REDIS),
                "threads": _versus(thr, REDIS),
                "async": _versus(asy, REDIS),
            },
            "admitted_share": {
                "threads": {k: _summary(v) for k, v in admitted.items() if v},
                "async": {k: _summary(v) for k, v in aadmitted.items() if v},
            },
        }
    finally:
        _drop_schema()
    return section


def _close(closers: List[Any]) -> None:
    for c in closers:
        with contextlib.suppress(Exception):  # a benchmark's cleanup must not lose its figures
            c.close()


def _create_schema() -> None:
    import psycopg

    with psycopg.connect(pgenv.url(), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{SCHEMA}"')


def _drop_schema() -> None:
    import psycopg

    with psycopg.connect(pgenv.url(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        conn.execute(f'DROP TABLE IF EXISTS "ratelimit___{PYRATE_TABLE}"')
