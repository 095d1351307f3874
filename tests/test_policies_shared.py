"""Several limits on the shared stores: atomic across processes, and on Redis Cluster."""

from __future__ import annotations

import multiprocessing
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from limiter import Limit, ManualClock, RateLimiter
from limiter.backends.sqlite import SQLiteStore
from limiter.testing import T0

LIMITS = [Limit(0.001, 100, "long"), Limit(0.001, 60, "short")]  # frozen clock: no refill


def redis_limiter(prefix: str) -> RateLimiter:
    import redis

    from limiter.backends.redis import RedisStore

    store = RedisStore(redis.Redis(host="127.0.0.1", port=6379), prefix=prefix)
    return RateLimiter(LIMITS, store=store, clock=ManualClock(T0), name="multi")


def sqlite_limiter(path: str) -> RateLimiter:
    return RateLimiter(LIMITS, store=SQLiteStore(path), clock=ManualClock(T0), name="multi")


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
            return sum(p.get(60) for p in pending)


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    redis = pytest.importorskip("redis")
    client = redis.Redis(host="127.0.0.1", port=6379)
    try:
        client.ping()
    except redis.ConnectionError as exc:  # pragma: no cover - CI starts it
        pytest.fail(f"the shared redis-server at 127.0.0.1:6379 is not running: {exc}")
    prefix = f"test-policies-{uuid.uuid4().hex}:"
    yield prefix
    keys = list(client.scan_iter(match=prefix + "*"))
    if keys:
        client.delete(*keys)
    client.close()


def test_redis_four_processes_never_exceed_any_limit(redis_prefix: str) -> None:
    assert run_processes("redis", redis_prefix) == 60
    peek = redis_limiter(redis_prefix).peek("hot {tag} key")
    assert [r.remaining for r in peek.results] == [40, 0]  # refusals took nothing


def test_sqlite_four_processes_never_exceed_any_limit(tmp_path: Path) -> None:
    path = str(tmp_path / "limits.sqlite3")
    assert run_processes("sqlite", path) == 60
    peek = sqlite_limiter(path).peek("hot {tag} key")
    assert [r.remaining for r in peek.results] == [40, 0]
