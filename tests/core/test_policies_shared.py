"""Several limits on the shared stores: atomic across processes (Redis and SQLite).

The Redis test starts its own throwaway redis-server (``helpers/redis_servers.py``);
without the binary it skips with the reason.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any, Iterator

import pytest

from limiter import Limit, ManualClock, RateLimiter
from limiter.backends.sqlite import SQLiteStore
from limiter.testing import T0

LIMITS = [Limit(0.001, 100, "long"), Limit(0.001, 60, "short")]  # frozen clock: no refill


def redis_limiter(url: str) -> RateLimiter:
    import redis

    from limiter.backends.redis import RedisStore

    client = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=30)
    return RateLimiter(LIMITS, store=RedisStore(client), clock=ManualClock(T0), name="multi")


def sqlite_limiter(path: str) -> RateLimiter:
    store = SQLiteStore(path, timeout=60)  # generous lock wait: a busy machine
    return RateLimiter(LIMITS, store=store, clock=ManualClock(T0), name="multi")


def hammer(kind: str, where: str, checks: int, start: Any) -> int:
    limiter = redis_limiter(where) if kind == "redis" else sqlite_limiter(where)
    start.wait()
    return sum(limiter.allow("hot {tag} key") for _ in range(checks))


def run_processes(kind: str, where: str) -> int:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        start = manager.Event()
        with ctx.Pool(4) as pool:
            pending = [pool.apply_async(hammer, (kind, where, 500, start)) for _ in range(4)]
            start.set()
            return sum(p.get(300) for p in pending)  # generous: a busy machine


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The URL of a throwaway redis-server of this test's own (empty)."""
    pytest.importorskip("redis", reason="redis-py is not installed: pip install -e '.[dev]'")
    from helpers.redis_servers import redis_server

    for server in redis_server():
        yield server.url


@pytest.mark.redis
def test_redis_four_processes_never_exceed_any_limit(redis_url: str) -> None:
    assert run_processes("redis", redis_url) == 60
    peek = redis_limiter(redis_url).peek("hot {tag} key")
    assert [r.remaining for r in peek.results] == [40, 0]  # refusals took nothing


def test_sqlite_four_processes_never_exceed_any_limit(tmp_path: Path) -> None:
    path = str(tmp_path / "limits.sqlite3")
    assert run_processes("sqlite", path) == 60
    peek = sqlite_limiter(path).peek("hot {tag} key")
    assert [r.remaining for r in peek.results] == [40, 0]
