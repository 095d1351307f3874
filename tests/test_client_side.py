"""Waiting for tokens: acquire, aacquire and the limit decorator."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import List, Tuple

import pytest

from limiter import ManualClock, RateLimiter, SystemClock
from limiter.ratelimiter import RateLimitExceeded


def test_acquire_waits_on_the_clock_not_the_wall() -> None:
    clock = ManualClock(1000.0)
    limiter = RateLimiter(2, 2, clock=clock)
    for _ in range(2):
        limiter.acquire("api")
    assert clock.now() == 1000.0
    result = limiter.acquire("api")  # one token takes 0.5 s: the fake clock moves
    assert result.allowed
    assert clock.now() == pytest.approx(1000.5)
    limiter.acquire("api", cost=2)
    assert clock.now() == pytest.approx(1001.5)


def test_acquire_gives_up_when_the_wait_passes_the_timeout() -> None:
    clock = ManualClock()
    limiter = RateLimiter(1, 1, clock=clock)
    limiter.acquire("k")
    with pytest.raises(RateLimitExceeded) as info:
        limiter.acquire("k", timeout=0.5)
    assert info.value.retry_after == pytest.approx(1.0)
    assert not info.value.result.allowed
    assert clock.now() == 0.0  # refused at once, without waiting in vain
    assert limiter.acquire("k", timeout=1.0).allowed


def test_acquire_never_waits_for_the_impossible() -> None:
    limiter = RateLimiter(1, 3, clock=ManualClock())
    with pytest.raises(RateLimitExceeded) as info:
        limiter.acquire("k", cost=4)
    assert info.value.retry_after == math.inf


@pytest.mark.parametrize("timeout", [-1, math.nan, "1", True])
def test_bad_timeout(timeout: object) -> None:
    with pytest.raises(ValueError, match="timeout"):
        RateLimiter(1).acquire("k", timeout=timeout)  # type: ignore[arg-type]


def test_aacquire() -> None:
    clock = ManualClock()
    limiter = RateLimiter(4, 1, clock=clock)

    async def go() -> float:
        for _ in range(5):
            await limiter.aacquire("k")
        return clock.now()

    assert asyncio.run(go()) == pytest.approx(1.0)


def test_decorator_waits_or_raises_for_sync_and_async_functions() -> None:
    clock = ManualClock()
    limiter = RateLimiter("2/second", clock=clock)

    @limiter.limit(key="github")
    def fetch(n: int) -> int:
        return n * 10

    assert [fetch(i) for i in range(4)] == [0, 10, 20, 30]
    assert clock.now() == pytest.approx(1.0)
    assert fetch.__name__ == "fetch"

    @limiter.limit(key=lambda user: f"user:{user}", wait=False)
    def strict(user: str) -> str:
        return user

    assert strict("a") == "a" and strict("a") == "a"
    with pytest.raises(RateLimitExceeded):
        strict("a")
    assert strict("b") == "b"

    @limiter.limit(key="async", cost=2)
    async def afetch() -> str:
        return "ok"

    @limiter.limit(key="async-strict", wait=False)
    async def astrict() -> str:
        return "ok"

    async def go() -> List[str]:
        out = [await afetch() for _ in range(2)]
        out += [await astrict(), await astrict()]
        try:
            await astrict()
        except RateLimitExceeded as exc:
            out.append(f"refused {exc.retry_after:.1f}")
        return out

    assert asyncio.run(go()) == ["ok", "ok", "ok", "ok", "refused 0.5"]


def grants_never_outrun_the_bucket(grants: List[float], start: float) -> None:
    grants.sort()
    for count, t in enumerate(grants, 1):
        assert count <= 10 + 10 * (t - start) + 1e-6, (count, t)


def run_waiters(limiter: RateLimiter, per_thread: int, timeout: float) -> Tuple[List[float], int]:
    grants: List[float] = []
    finished: List[int] = []
    lock = threading.Lock()

    def waiter() -> None:
        for _ in range(per_thread):
            limiter.acquire("shared", timeout=timeout)
            with lock:
                grants.append(limiter.clock.now())
        finished.append(1)

    threads = [threading.Thread(target=waiter) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return grants, len(finished)


def test_waiters_never_over_admit_with_a_manual_clock() -> None:
    clock = ManualClock(5000.0)
    limiter = RateLimiter(10, 10, clock=clock)
    grants, finished = run_waiters(limiter, 50, timeout=math.inf)
    assert finished == 8 and len(grants) == 400
    grants_never_outrun_the_bucket(grants, 5000.0)


def test_waiters_never_over_admit_in_real_time() -> None:
    """A short real-time run (about 0.2 s): real sleeps, real contention."""
    clock = SystemClock()
    limiter = RateLimiter(1000, 10, clock=clock)
    start = clock.now()
    grants, finished = run_waiters(limiter, 25, timeout=5.0)
    assert finished == 8 and len(grants) == 200
    grants.sort()
    for count, t in enumerate(grants, 1):
        assert count <= 10 + 1000 * (t - start) + 1e-3
    assert grants[-1] - start < 5.0  # nobody waited past the timeout
