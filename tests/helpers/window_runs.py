"""What the window tests of the server-side stores (Redis, PostgreSQL) run alike.

* ``window_sequence`` and ``window_sequence_all``: one store and
  ``step``/``step_all`` fed the same drawn sequence (``step_strategies``),
  every result compared bit for bit, the stored state checked by a function
  of the store's (a Redis key and its PX, a PostgreSQL row).
* ``fixed_sequence`` over ``boundary_pairs`` or ``slide_pairs``, and
  ``rounded_to_the_moment``: sequences where every last bit shows.
* ``threads_admit_exactly_count``, ``threads_beside_a_bucket_and_a_lockout``
  and ``tasks_admit_exactly_count``: exact admitted counts under
  concurrency.
* ``read_as_new``: a key another kind of policy wrote answers as a new key.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from hypothesis import event

from helpers.step_strategies import move_in_window, resolve, same_shape
from limiter import Limit, Lockout
from limiter.core.bucket import step
from limiter.core.costs import Charge, Refund
from limiter.core.many import step_all
from limiter.core.state import State
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0

#: ``stored(key, policy, state, now, since) -> state``: asserts that ``key`` holds
#: ``state`` (``since``: ``time.monotonic()`` before the step) and returns what it holds.
Stored = Callable[[str, Any, Optional[State], float, float], Optional[State]]


def window_sequence(
    store: Any, stored: Stored, window: Any, other: Any, start: float, ops: Any, switches: Any
) -> None:
    """``store.apply`` = ``step`` on key ``"k"`` over ``ops``.

    Now and then (``switches``) a step goes under another window of the same
    state's shape (``other``: count, period, anchor): a state written under
    another count, period or anchor is read alike.
    """
    windows = (window, same_shape(window, *other))
    state: Optional[State] = None
    now = start
    for (how, cost), switch in zip(ops, switches):
        window = windows[switch]
        now = move_in_window(now, how, window, state)
        cost = resolve(cost, now, window)
        state, expected = step(state, now, window, cost)
        since = time.monotonic()
        got = store.apply("k", window, cost, now)
        assert got == expected  # every field, bit for bit
        assert got.results == () and got.__class__ is expected.__class__
        event(f"{window.kind} allowed: {got.allowed}")
        state = stored("k", window, state, now, since)


def window_sequence_all(
    store: Any,
    stored: Stored,
    keys: Sequence[str],
    policies: Sequence[Any],
    start: float,
    ops: Any,
    per_limit: Any,
) -> None:
    """``store.apply_many`` = ``step_all`` over ``ops``; the first policy is a window.

    ``per_limit``: for each op, ``None`` (the op's cost for all) or a cost per
    policy, each resolved against its own policy.
    """
    window = policies[0]
    states: List[Optional[State]] = [None] * len(policies)
    now = start
    for (how, cost), costs in zip(ops, per_limit):
        now = move_in_window(now, how, window, states[0])
        if costs is None:
            cost = resolve(cost, now, window)
        else:
            cost = tuple(resolve(c, now, p) for c, p in zip(costs, policies))
        states, expected = step_all(states, now, policies, cost)
        since = time.monotonic()
        got = store.apply_many(keys, policies, cost, now)
        assert got == expected  # every field, bit for bit (results, policy too)
        assert [r.__class__ for r in got.results] == [r.__class__ for r in expected.results]
        event(f"allowed: {got.allowed}, locked out: {got.locked_out}")
        states = [stored(*args, now, since) for args in zip(keys, policies, states)]


def fixed_sequence(store: Any, stored: Stored, policy: Any, pairs: Sequence[Any]) -> None:
    """``store.apply`` = ``step`` on key ``"k"`` for each ``(now, cost)`` of ``pairs``."""
    state: Optional[State] = None
    for i, (now, cost) in enumerate(pairs):
        state, expected = step(state, now, policy, cost)
        since = time.monotonic()
        assert store.apply("k", policy, cost, now) == expected, (i, now)
        state = stored("k", policy, state, now, since)


def boundary_pairs(count: int) -> List[Tuple[float, Any]]:
    """A check every 0.4 ms from T0, of each kind of cost in turn: windows of 1 ms see
    each boundary's rounding (a moment floor puts on the end of its window)."""
    pairs = []
    for i in range(count):
        now = T0 + i * 0.0004
        pairs.append((now, (1, 2, Refund(1, now - 0.001), Charge(1), 0)[i % 5]))
    return pairs


def slide_pairs(period: float) -> List[Tuple[float, Any]]:
    """A check every seventh of ``period`` near the epoch, where every last bit of a
    retry_after shows: a sliding window's denials with a previous window counted,
    whose wait runs out within the window or in the next one."""
    return [(12.0 + i * period / 7, (1, 1, 2, 0.5, 1)[i % 5]) for i in range(120)]


def rounded_to_the_moment(store: Any, window: Any) -> None:
    """At the instant where floor's window would end at now + epsilon (test_window.py),
    a window of 1 ms admits its one request, then none."""
    now = 1675119037.810999
    results = [store.apply("k", window, 1, now) for _ in range(5)]
    assert [r.allowed for r in results] == [True, False, False, False, False]
    state: Optional[State] = None
    for result in results:
        state, expected = step(state, now, window, 1)
        assert result == expected


#: A frozen clock (T0, no boundary of an hour's windows): each admits exactly 100.
HOURLY = (FixedWindow(100, 3600), FixedWindow(100, 3600, "first"), SlidingWindow(100, 3600))


def _in_threads(work: Callable[[], Any], count: int = 8) -> List[Any]:
    """``work()`` in ``count`` threads started together: what each returned."""
    barrier = threading.Barrier(count)
    out: List[Any] = []

    def run() -> None:
        barrier.wait()
        out.append(work())

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def threads_admit_exactly_count(store: Any) -> None:
    """8 threads, 40 checks each of every ``HOURLY`` window: exactly 100 admitted each."""

    def work() -> List[int]:
        admitted = [0] * len(HOURLY)
        for _ in range(40):
            for i, window in enumerate(HOURLY):
                admitted[i] += store.apply(f"hot{i}", window, 1, T0).allowed
        return admitted

    assert [sum(column) for column in zip(*_in_threads(work))] == [100] * len(HOURLY)
    peeks = [store.apply(f"hot{i}", window, 0, T0) for i, window in enumerate(HOURLY)]
    assert [p.remaining for p in peeks] == [0] * len(HOURLY)


def threads_beside_a_bucket_and_a_lockout(store: Any, keys: Sequence[str]) -> None:
    """8 threads of 25 checks on 3 ``keys``: a sliding window, a bucket, a lockout.

    Each check takes 1 from a sliding window of 30 and 10 tokens from a bucket
    of 1,000 that refills nothing meanwhile: the window refuses first, all or
    nothing, 4 ordinary denials and then the lockout holds.
    """
    policies = (SlidingWindow(30, 3600), Limit(0.001, 1000), Lockout(5, 60, 600))

    def work() -> Tuple[int, int]:
        results = [store.apply_many(keys, policies, (1, 10, 0), T0) for _ in range(25)]
        return sum(r.allowed for r in results), sum(r.locked_out for r in results)

    admitted, locked = (sum(column) for column in zip(*_in_threads(work)))
    assert (admitted, 200 - admitted - locked, locked) == (30, 4, 166)
    peek = store.apply_many(keys[:2], policies[:2], 0, T0)
    assert [r.remaining for r in peek.results] == [0, 700]  # refusals took nothing


async def tasks_admit_exactly_count(store: Any) -> None:
    """250 checks in flight at once of each ``HOURLY`` window: exactly 100 admitted each."""
    counts = []
    for i, window in enumerate(HOURLY):
        results = await asyncio.gather(
            *(store.aapply(f"hot{i}", window, 1, T0) for _ in range(250))
        )
        counts.append(sum(r.allowed for r in results))
    assert counts == [100] * len(HOURLY)


def read_as_new(
    store: Any, key: str, policy: Any, cost: Any, read: Callable[[str], Optional[State]]
) -> None:
    """``key`` holds another kind of policy's state: ``policy`` answers at ``T0 + 1`` as
    ``step`` does from it, which is a new key's answer, and the key then holds ``step``'s
    state (``read``: the state a key holds).
    """
    written = read(key)
    state, expected = step(written, T0 + 1, policy, cost)
    assert store.apply(key, policy, cost, T0 + 1) == expected == step(None, T0 + 1, policy, cost)[1]
    assert read(key) == state, (key, policy)
