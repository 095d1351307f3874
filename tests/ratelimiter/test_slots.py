"""RateLimiter.slot / aslot: Concurrency slots held for a block, beside rate policies."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from limiter import (
    Concurrency,
    DenyCache,
    ManualClock,
    MemoryStore,
    RateLimiter,
    RateLimitExceeded,
    store_from_url,
)
from limiter.backends.sqlite import SQLiteStore
from limiter.core.concurrency import slot_step
from limiter.core.costs import Hold
from limiter.core.state import from_row, to_row
from limiter.testing import T0


def test_a_slot_is_held_for_the_block_and_given_back() -> None:
    clock = ManualClock(T0)
    limiter = RateLimiter(Concurrency(2, lease=30), clock=clock)
    with limiter.slot("k") as first, limiter.slot("k") as second:
        assert first.held and second.held
        assert first.result is not None and first.result.remaining == 1
        with pytest.raises(RateLimitExceeded) as refused, limiter.slot("k"):
            raise AssertionError("a third slot must not be taken")  # pragma: no cover
        result = refused.value.result
        assert (result.allowed, result.kind, result.remaining, result.limit) == (
            False,
            "concurrency",
            0,
            2,
        )
        assert result.retry_after == 30.0  # the earliest lease's end: a hint
    assert not first.held
    assert limiter.peek("k").remaining == 2


def test_an_exception_in_the_block_gives_the_slot_back() -> None:
    limiter = RateLimiter(Concurrency(1), clock=ManualClock(T0))
    with pytest.raises(KeyError), limiter.slot("k"):
        raise KeyError("boom")
    with limiter.slot("k") as slot:
        assert slot.held


def test_an_observer_that_raises_on_the_take_leaves_no_slot_held() -> None:
    """The store took the slot, then the observer raised inside ``with``'s enter: no block
    ran to give it back, and the key was refused for the whole lease."""
    failures: List[RuntimeError] = []

    def observer(event: Any) -> None:
        if failures and event.outcome == "allowed":
            raise failures.pop()

    for enter in ("sync", "async"):
        failures.append(RuntimeError("observer down"))
        limiter = RateLimiter(Concurrency(1, lease=60), clock=ManualClock(T0), on_decision=observer)
        if enter == "sync":
            with pytest.raises(RuntimeError, match="observer down"), limiter.slot("k"):
                raise AssertionError("the block must not run")  # pragma: no cover
        else:

            async def enter_async(limiter: RateLimiter = limiter) -> None:
                async with limiter.aslot("k"):
                    raise AssertionError("the block must not run")  # pragma: no cover

            with pytest.raises(RuntimeError, match="observer down"):
                asyncio.run(enter_async())
        assert limiter.peek("k").remaining == 1, enter
        with limiter.slot("k") as slot:
            assert slot.held


def test_aslot_holds_without_blocking_the_loop() -> None:
    limiter = RateLimiter(Concurrency(1), clock=ManualClock(T0))

    async def main() -> List[bool]:
        outcomes = []
        async with limiter.aslot("k"):
            try:
                async with limiter.aslot("k"):
                    outcomes.append(True)  # pragma: no cover
            except RateLimitExceeded:
                outcomes.append(False)
        async with limiter.aslot("k"):
            outcomes.append(True)
        return outcomes

    assert asyncio.run(main()) == [False, True]


def test_a_renewed_lease_outlives_its_first_term() -> None:
    clock = ManualClock(T0)
    limiter = RateLimiter(Concurrency(1, lease=10), clock=clock)
    slot = limiter.slot("k")
    assert slot.take().allowed
    clock.advance(8)
    assert slot.renew().reset_after == 10.0
    clock.advance(9)  # 17 s after the take: the first lease would have ended at 10
    assert not limiter.slot("k").take().allowed
    assert slot.give() is True
    assert limiter.slot("k").take().allowed


def test_a_give_after_the_lease_ended_says_so_and_frees_nobody() -> None:
    clock = ManualClock(T0)
    limiter = RateLimiter(Concurrency(1, lease=10), clock=clock)
    slow = limiter.slot("k")
    assert slow.take().allowed
    clock.advance(10)
    other = limiter.slot("k")
    assert other.take().allowed  # the lapsed lease freed the slot
    assert slow.give() is False
    assert not limiter.slot("k").take().allowed  # other's slot is still held


def test_rate_and_slots_are_all_or_nothing() -> None:
    clock = ManualClock(T0)
    limiter = RateLimiter({"rate": "2/minute", "inflight": Concurrency(1, lease=120)}, clock=clock)
    holder = limiter.slot("k")
    assert holder.take().allowed
    busy = limiter.slot("k").take()
    assert (busy.allowed, busy.policy) == (False, "inflight")
    rate, slots = limiter.peek("k").results
    assert (rate.remaining, slots.remaining) == (1, 0)  # the refusal took no token
    holder.give()
    last = limiter.slot("k")
    assert last.take().allowed  # the last token
    assert last.give() is True
    assert limiter.slot("k").give() is False  # a holder that never held: nothing changes
    refused = limiter.slot("k", cost={"rate": 1}).take()
    assert (refused.allowed, refused.policy) == (False, "rate")
    assert limiter.peek("k").results[1].remaining == 1  # the refusal took no slot


def test_a_slot_is_one_unit_and_a_cost_meaning_more_is_refused_at_the_call() -> None:
    # Concurrency alone: a cost can only mean slots, and a slot is one (the cost
    # was ignored: slot("k", 2) took one slot of 3, and so did 0 and 1.5).
    slots = RateLimiter(Concurrency(3), clock=ManualClock(T0))
    for cost, shown in ((2, "2"), (0, "0"), (1.5, "1.5"), ({"default": 2}, "2")):
        with pytest.raises(ValueError, match=rf"one unit.*'default'.*not a cost of {shown};"):
            slots.slot("k", cost)
    assert [slots.slot("k", cost).take().remaining for cost in (1, 1.0, {"default": 1})] == [
        2,
        1,
        0,
    ]
    # Beside a rate, a number is the rate's cost and the slot is one; naming
    # the Concurrency policy with anything but 1 is refused.
    limiter = RateLimiter({"rate": "10/minute", "inflight": Concurrency(3)}, clock=ManualClock(T0))
    for cost in ({"inflight": 2}, {"rate": 1, "inflight": 0}):
        with pytest.raises(ValueError, match=r"one unit.*'inflight'.*not a cost of (2|0)"):
            limiter.slot("k", cost)
    assert [x.remaining for x in limiter.slot("k", 4).take().results] == [6, 2]
    assert [x.remaining for x in limiter.slot("k", {"rate": 2}).take().results] == [4, 1]
    taken = limiter.slot("k", {"rate": 1, "inflight": 1}).take()
    assert [x.remaining for x in taken.results] == [3, 0]


def test_a_plain_check_on_a_slot_limiter_is_a_type_error() -> None:
    limiter = RateLimiter({"rate": "2/minute", "inflight": Concurrency(1)})
    with pytest.raises(TypeError, match=r"RateLimiter\.slot\(\)"):
        limiter.check("k")
    with pytest.raises(TypeError, match=r"RateLimiter\.slot\(\)"):
        RateLimiter(Concurrency(1)).check("k")
    assert limiter.peek("k").allowed


class AsyncOnly:
    """An async-only store (as ``AsyncRedisStore``): no ``apply`` at all."""

    def __init__(self) -> None:
        self.memory = MemoryStore()

    async def aapply(self, *args: Any) -> Any:
        return self.memory.apply(*args)

    async def aapply_many(self, *args: Any) -> Any:
        return self.memory.apply_many(*args)

    async def areset(self, key: str) -> None:
        self.memory.reset(key)


@pytest.mark.parametrize("rate", [Concurrency(1), {"rate": "2/minute", "inflight": Concurrency(1)}])
@pytest.mark.parametrize("wrap", [AsyncOnly, lambda: DenyCache(AsyncOnly())])
def test_a_sync_slot_on_an_async_only_store_is_a_type_error_naming_aslot(
    rate: Any, wrap: Any
) -> None:
    limiter = RateLimiter(rate, store=wrap(), clock=ManualClock(T0))
    for action in (limiter.slot("k").take, limiter.slot("k").give, limiter.slot("k").renew):
        with pytest.raises(TypeError, match=r"async only: use async with limiter\.aslot"):
            action()

    async def held() -> int:
        async with limiter.aslot("k"):
            return (await limiter.apeek("k")).remaining

    assert asyncio.run(held()) == 0


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((0,), ValueError, "from 1 to 1000, got 0"),
        ((1001,), ValueError, "got 1001"),
        ((2.0,), TypeError, "must be an int, got 2.0"),
        ((True,), TypeError, "got True"),
        ((3, 0), ValueError, "lease must be a number of seconds > 0"),
        ((3, float("nan")), ValueError, "got nan"),
        ((3, "60"), TypeError, "lease must be a number of seconds, got '60'"),
    ],
)
def test_bad_parameters_are_named(args: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Concurrency(*args)


@pytest.mark.parametrize(
    ("holder", "action", "match"),
    [(0.0, "take", "got 0.0"), (1.5, "take", "got 1.5"), (2.0**53, "give", "2\\*\\*53")],
)
def test_bad_holds_are_named(holder: float, action: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Hold(holder, action)
    with pytest.raises(ValueError, match="'borrow'"):
        Hold(1.0, "borrow")


def test_leases_survive_a_row_and_a_stepped_back_clock_is_bounded() -> None:
    slots = Concurrency(2, lease=10)
    state, _ = slot_step(None, T0, slots, Hold(7.0))
    state, _ = slot_step(state, T0 + 1, slots, Hold(9.0))
    assert from_row(*to_row(state)) == state
    assert to_row(state)[:2] == (2.0, T0 + 11)
    with pytest.raises(ValueError, match="not pairs"):
        from_row(1.0, T0, b"\x00" * 8)
    # The clock steps back 100 s: both leases end at most a lease from now (rule 6).
    state, result = slot_step(state, T0 - 100, slots, 0)
    assert result.reset_after == 10.0 and state[-1] == T0 - 90


def _hold_forever(url: str, start: Any, taken: Any) -> None:
    limiter = RateLimiter(Concurrency(3, lease=5), store=store_from_url(url), clock=ManualClock(T0))
    results: List[bool] = []
    lock = threading.Lock()

    def take() -> None:
        start.wait()
        allowed = limiter.slot("hot").take().allowed
        with lock:
            results.append(allowed)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    taken.put(sum(results))
    signal.pause()  # hold the slots until killed


@pytest.fixture(scope="module")
def pg() -> Iterator[Any]:
    """A throwaway PostgreSQL of this module's (skips without the binaries)."""
    from helpers.postgres_servers import postgres_server

    yield from postgres_server()


@pytest.mark.skipif(not hasattr(signal, "pause"), reason="needs POSIX signals")
@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
def test_four_processes_take_exactly_the_slots_and_dead_holders_lapse(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """4 processes x 8 threads take at once: 3 slots; the killed holders' slots come back."""
    if backend == "redis":  # the module's throwaway redis-server (skips without one)
        port = request.getfixturevalue("server").port
        url = f"redis://127.0.0.1:{port}/0?prefix=slots-{uuid.uuid4().hex}:"
    elif backend == "postgres":
        url = request.getfixturevalue("pg").url() + "?table=slots"
    else:
        url = f"sqlite:///{tmp_path / 'slots.db'}?timeout=30"
        SQLiteStore(str(tmp_path / "slots.db")).close()
    ctx = multiprocessing.get_context("spawn")
    start, taken = ctx.Event(), ctx.Queue()
    children = [ctx.Process(target=_hold_forever, args=(url, start, taken)) for _ in range(4)]
    for child in children:
        child.start()
    start.set()
    try:
        assert sum(taken.get(timeout=60) for _ in children) == 3
    finally:
        for child in children:
            os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
            child.join()
    clock = ManualClock(T0 + 4.999)
    store: Any = store_from_url(url)
    try:
        limiter = RateLimiter(Concurrency(3, lease=5), store=store, clock=clock)
        assert not limiter.slot("hot").take().allowed  # still held by the dead
        clock.advance(0.001)
        assert [limiter.slot("hot").take().allowed for _ in range(4)] == [True] * 3 + [False]
    finally:
        store.close()  # a pool left to the garbage collector may be collected on its own thread


def test_a_lapsed_lease_does_not_keep_another_policys_slot() -> None:
    clock = ManualClock(T0)
    limiter = RateLimiter(
        {"short": Concurrency(1, lease=10), "long": Concurrency(1, lease=100)}, clock=clock
    )
    slot = limiter.slot("k")
    assert slot.take().allowed
    clock.advance(20)  # the short lease lapsed, the long one holds
    assert slot.give() is False  # one lease had lapsed: said so
    short, long = limiter.peek("k").results
    assert (short.remaining, long.remaining) == (1, 1)  # and both slots are free
