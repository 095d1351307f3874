"""Waiting for tokens: acquire, aacquire and the throttle decorator."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import List, Optional, Tuple

import pytest

from limiter import (
    Concurrency,
    Limit,
    ManualClock,
    MemoryStore,
    RateLimiter,
    RateLimitExceeded,
    RateLimitResult,
    SystemClock,
)
from limiter.core.limits import CLOCK_TOLERANCE


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


class SteppedBack(ManualClock):
    """Its first sleep ends 0.9 s back (an NTP correction while asleep); it counts sleeps."""

    def __init__(self) -> None:
        super().__init__(1000.0)
        self.slept: List[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)
        if len(self.slept) == 1:
            self.set(self.now() - 0.9)

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


def test_a_clock_stepped_back_during_a_wait_does_not_stretch_the_timeout() -> None:
    """``acquire(timeout=1.5)`` slept 1 s, read the clock 0.1 s on, and slept 0.9 s more:
    1.9 s in all. The sleeps asked for count as waited, whatever the clock says."""
    for wait in ("sync", "async"):
        clock = SteppedBack()
        limiter = RateLimiter(Limit(1, 1), clock=clock)
        limiter.check("k")
        with pytest.raises(RateLimitExceeded):
            if wait == "sync":
                limiter.acquire("k", timeout=1.5)
            else:
                asyncio.run(limiter.aacquire("k", timeout=1.5))
        assert sum(clock.slept) <= 1.5, wait


def test_acquire_never_waits_for_the_impossible() -> None:
    limiter = RateLimiter(1, 3, clock=ManualClock())
    with pytest.raises(RateLimitExceeded) as info:
        limiter.acquire("k", cost=4)
    assert info.value.retry_after == math.inf


@pytest.mark.parametrize("timeout", [-1, math.nan])
def test_bad_timeout(timeout: object) -> None:
    with pytest.raises(ValueError, match="timeout"):
        RateLimiter(1).acquire("k", timeout=timeout)  # type: ignore[arg-type]


def test_wrong_types_are_type_errors() -> None:
    limiter = RateLimiter(1)
    for timeout in ("1", True):
        message = f"timeout must be None or a number of seconds >= 0, got {timeout!r}"
        with pytest.raises(TypeError) as info:
            limiter.acquire("k", timeout=timeout)  # type: ignore[arg-type]
        assert str(info.value) == message
        with pytest.raises(TypeError) as info:
            asyncio.run(limiter.aacquire("k", timeout=timeout))  # type: ignore[arg-type]
        assert str(info.value) == message
        with pytest.raises(TypeError) as info:
            limiter.throttle("k", timeout=timeout)  # type: ignore[arg-type]
        assert str(info.value) == message
    with pytest.raises(TypeError) as info:
        limiter.throttle(key=5)  # type: ignore[arg-type]
    assert str(info.value) == "key must be a str or a callable returning one, got 5"


def test_throttle_is_the_decorator_and_limit_is_gone() -> None:
    assert not hasattr(RateLimiter, "limit")
    assert not hasattr(RateLimiter(1), "limit")
    clock = ManualClock()
    limiter = RateLimiter(1, 1, clock=clock)

    @limiter.throttle("user/42", cost=1, wait=True, timeout=None)  # "/" in a key is fine
    def call() -> str:
        return "ok"

    assert call() == "ok" and call() == "ok"
    assert clock.now() == pytest.approx(1.0)
    with pytest.raises(TypeError):
        limiter.throttle("k", 1)  # type: ignore[misc]  # cost is keyword-only


RATE_KEYS = ["5/minute", "10 per second", "10/second;100/hour", " 2 PER 3 hours "]


@pytest.mark.parametrize("rate", RATE_KEYS)
def test_throttle_refuses_a_rate_as_key_at_decoration_time(rate: str) -> None:
    limiter = RateLimiter(1)
    with pytest.raises(TypeError) as info:
        limiter.throttle(rate)
    assert str(info.value) == (
        f"key {rate!r} looks like a rate: pass the rate to RateLimiter({rate!r}) "
        "(or a framework integration's limit()) and use a client key here"
    )


@pytest.mark.parametrize("wait", [True, False])
def test_throttle_refuses_a_slot_limiter_at_decoration_time(wait: bool) -> None:
    # A plain check cannot take a slot (nobody would give it back): told here,
    # not at the first call; a cost that leaves the slots out is paced as ever.
    limiter = RateLimiter({"rate": "2/second", "inflight": Concurrency(1)}, clock=ManualClock())
    for cost in (1, {"inflight": 1}):
        with pytest.raises(TypeError) as info:
            limiter.throttle("k", cost=cost, wait=wait)
        assert str(info.value) == (
            f"{limiter.name!r} has a Concurrency policy ('inflight'): a call cannot hold "
            "its slot; hold one with limiter.slot(key) around the call, or give it a cost of 0"
        )

    @limiter.throttle("k", cost={"rate": 1}, wait=wait)
    def paced() -> int:
        return limiter.peek("k").results[0].remaining

    assert [paced(), paced()] == [1, 0]


@pytest.mark.parametrize("wait", [True, False])
def test_throttle_refuses_a_rate_from_a_key_callable(wait: bool) -> None:
    limiter = RateLimiter(1, clock=ManualClock())

    @limiter.throttle(lambda k: k, wait=wait)
    def sync(k: str) -> str:
        return k

    @limiter.throttle(lambda k: k, wait=wait)
    async def asyn(k: str) -> str:
        return k

    assert sync("user/42") == "user/42"
    with pytest.raises(TypeError, match="looks like a rate"):
        sync("5/minute")
    with pytest.raises(TypeError, match="looks like a rate"):
        asyncio.run(asyn("5/minute"))


def test_acquire_waits_a_wait_of_exactly_the_timeout() -> None:
    # After the burst at 10/s the next token is 0.1 s away, computed as
    # 0.10000000000000003: a timeout of 0.1 must wait for it, not give up.
    clock = ManualClock(1_700_000_000.0)
    limiter = RateLimiter(10, 2, clock=clock)
    limiter.acquire("k")
    limiter.acquire("k")
    assert limiter.peek("k").remaining == 0
    result = limiter.acquire("k", 1, timeout=0.1)
    assert result.allowed
    assert clock.now() - 1_700_000_000.0 == pytest.approx(0.1, abs=1e-6)
    # Beyond the bucket's slack (one microsecond) it still gives up at once.
    before = clock.now()
    with pytest.raises(RateLimitExceeded) as info:
        limiter.acquire("k", 1, timeout=0.1 - 2e-6)
    assert info.value.retry_after == pytest.approx(0.1)
    assert clock.now() == before


def test_aacquire_waits_a_wait_of_exactly_the_timeout() -> None:
    clock = ManualClock(1_700_000_000.0)
    limiter = RateLimiter(10, 2, clock=clock)

    async def go() -> float:
        await limiter.aacquire("k")
        await limiter.aacquire("k")
        result = await limiter.aacquire("k", 1, timeout=0.1)
        assert result.allowed
        waited = clock.now() - 1_700_000_000.0
        with pytest.raises(RateLimitExceeded):
            await limiter.aacquire("k", 1, timeout=0.1 - 2e-6)
        return waited

    assert asyncio.run(go()) == pytest.approx(0.1, abs=1e-6)


def test_the_decorator_waits_a_wait_of_exactly_the_timeout() -> None:
    clock = ManualClock(1_700_000_000.0)
    limiter = RateLimiter(10, 2, clock=clock)

    @limiter.throttle(key="api", timeout=0.1)
    def call() -> str:
        return "ok"

    assert [call() for _ in range(4)] == ["ok"] * 4  # the 3rd and 4th wait 0.1 s each
    assert clock.now() - 1_700_000_000.0 == pytest.approx(0.2, abs=1e-6)


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

    @limiter.throttle(key="github")
    def fetch(n: int) -> int:
        return n * 10

    assert [fetch(i) for i in range(4)] == [0, 10, 20, 30]
    assert clock.now() == pytest.approx(1.0)
    assert fetch.__name__ == "fetch"

    @limiter.throttle(key=lambda user: f"user:{user}", wait=False)
    def strict(user: str) -> str:
        return user

    assert strict("a") == "a" and strict("a") == "a"
    with pytest.raises(RateLimitExceeded):
        strict("a")
    assert strict("b") == "b"

    @limiter.throttle(key="async", cost=2)
    async def afetch() -> str:
        return "ok"

    @limiter.throttle(key="async-strict", wait=False)
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
    """Each waiter's sleep moves the shared ManualClock on: a thread paused between its
    clock reading and the store's lock while the others moved it over CLOCK_TOLERANCE
    re-anchors the bucket, as a stepped-back clock does.  The bound counts that from
    the store's own log (the grants' clock readings alone once saw 193 against 192)."""
    store = OrderedStore()
    limiter = RateLimiter(10, 10, store=store, clock=ManualClock(5000.0))
    grants, finished = run_waiters(limiter, 50, timeout=math.inf)
    assert finished == 8 and len(grants) == 400
    assert admitted_within_the_rate(store.log, 10, 10) == 400


class OrderedStore(MemoryStore):
    """A ``MemoryStore`` logging ``(now, allowed)`` of each check in the order they took effect."""

    def __init__(self) -> None:
        super().__init__()
        self.log: List[Tuple[float, bool]] = []
        self._order = threading.Lock()

    def apply(self, key: str, limit: Limit, cost: float, now: Optional[float]) -> RateLimitResult:
        with self._order:
            result = super().apply(key, limit, cost, now)
            self.log.append((now, result.allowed))  # type: ignore[arg-type]
        return result


def admitted_within_the_rate(log: List[Tuple[float, bool]], rate: float, burst: int) -> int:
    """How many ``log`` admitted, checking that no prefix of it admitted too many.

    A thread reads the clock before it takes the store's lock: when the OS pauses it in
    between, it applies a time earlier than the bucket's last update.  Up to
    ``CLOCK_TOLERANCE`` behind, that request takes effect at the last update (as if the
    clock had been read under the lock), so at no moment may more have been admitted
    than the burst plus the rate times the span of the readings so far, plus the slack
    (a thousandth of a token at 1000/s): exactly, whatever the machine's load.  Only a
    pause longer than the tolerance (seconds: not seen, even on a busy machine) would
    count as a clock stepped back and re-anchor the bucket, handing back the time it
    went back; the bound counts that.
    """
    first = high = anchor = log[0][0]
    stepped_back = 0.0  # 0.0 unless a thread paused for over CLOCK_TOLERANCE
    admitted = 0
    for now, allowed in log:
        if now < anchor - CLOCK_TOLERANCE:
            stepped_back += anchor - now  # the bucket re-anchors at now
            anchor = now
        elif allowed:
            anchor = max(anchor, now)  # a late reading is applied at the anchor
        high = max(high, now)
        if allowed:
            admitted += 1
            bound = burst + rate * (high - first + stepped_back) + 1e-3
            assert admitted <= bound, (admitted, bound, stepped_back)
    return admitted


def test_waiters_never_over_admit_in_real_time() -> None:
    """A short real-time run (about 0.2 s): real sleeps, real threads, on any machine."""
    store = OrderedStore()
    limiter = RateLimiter(1000, 10, store=store, clock=SystemClock())
    grants, finished = run_waiters(limiter, 25, timeout=60.0)  # generous: a busy machine
    assert finished == 8 and len(grants) == 200  # nobody gave up
    assert admitted_within_the_rate(store.log, 1000, 10) == 200


def test_hammering_threads_never_over_admit_in_real_time() -> None:
    """4 threads check one key as fast as they can for 0.2 s: the bucket stays drained.

    Each GIL switch (5 ms) between a thread's clock reading and its turn at the store
    makes a late reading.  When the bucket re-anchored at late readings (before
    ``CLOCK_TOLERANCE``) this admitted about twice the rate on this test's machine.
    """
    store = OrderedStore()
    limiter = RateLimiter(1000, 10, store=store, clock=SystemClock())
    stop = time.monotonic() + 0.2

    def hammer() -> None:
        while time.monotonic() < stop:
            limiter.check("shared")

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert admitted_within_the_rate(store.log, 1000, 10) > 10  # refilled and spent again
