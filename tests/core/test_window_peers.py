"""The window policies admit what the peers admit (issue 24, "Done when").

``FixedWindow(count, period, anchor="first")`` and ``SlidingWindow(count,
period)`` against limits 5.x's ``FixedWindowRateLimiter`` and
``SlidingWindowCounterRateLimiter`` on its ``MemoryStorage``, driven by
time-machine at the very same instants; the epoch-aligned ``FixedWindow``
against a model written here.  Times are drawn with ``random.Random(seed)``
(exponential gaps): "nice" decimal times would land on the instants where the
two differ on purpose, shown by the last tests (docs/concepts.md, "Windows").
limits is in the ``full`` extra: without it these tests skip and say so
(under ``CI=true`` they fail).
"""

from __future__ import annotations

import math
import random
import time
from fractions import Fraction
from typing import Any, Dict, List, Sequence, Tuple

import pytest

from helpers.needs import need_module
from limiter import FixedWindow, SlidingWindow
from limiter.core.bucket import step
from limiter.core.limits import TIME_EPSILON

W0 = 1_699_999_980.0  # a multiple of every period used here
#: (count, period): periods are whole seconds, the only ones limits takes.
SHAPES = [(1, 1), (3, 1), (2, 5), (5, 10), (10, 60), (7, 3600)]
SEEDS = range(20)
REQUESTS = 250


def request_times(seed: int, count: int, period: float) -> List[float]:
    """Random instants, on average 1.5 times as fast as the limit allows, now and then idle."""
    rng = random.Random(seed)
    now = W0 + rng.uniform(0, period)
    times = []
    for _ in range(REQUESTS):
        if rng.random() < 0.03:
            now += rng.uniform(1, 3) * period  # idle: the previous window empties
        now += rng.expovariate(1.5 * count / period)
        times.append(now)
    return times


def peer(kind: str, count: int, period: int, times: Sequence[float], costs: Sequence[int]) -> Any:
    """limits' decisions at ``times`` (frozen there by time-machine), and the instants it read.

    The instants are what ``time.time()`` returned (time-machine keeps
    nanoseconds), so the library is given exactly the same ones.
    """
    need_module("limits")
    time_machine = need_module("time_machine", "pip install -e '.[dev]'")
    from limits import RateLimitItemPerSecond
    from limits.storage import MemoryStorage
    from limits.strategies import FixedWindowRateLimiter, SlidingWindowCounterRateLimiter

    item = RateLimitItemPerSecond(count, period)
    strategy = FixedWindowRateLimiter if kind == "fixed" else SlidingWindowCounterRateLimiter
    decisions, seen = [], []
    with time_machine.travel(times[0], tick=False) as traveller:
        storage = MemoryStorage()
        limiter = strategy(storage)
        try:
            for t, cost in zip(times, costs):
                traveller.move_to(t)
                seen.append(time.time())
                decisions.append(limiter.hit(item, "key", cost=cost))
        finally:
            # limits' expiry thread reads time.time(): stopped while time-machine still
            # answers it (after the travel its clock has no coordinates: an IndexError
            # in the thread, which pytest reports as a warning).
            storage.timer.cancel()
            storage.timer.join()
    return decisions, seen


def ours(policy: Any, times: Sequence[float], costs: Sequence[float]) -> List[bool]:
    state, decisions = None, []
    for now, cost in zip(times, costs):
        state, result = step(state, now, policy, cost)
        decisions.append(result.allowed)
    return decisions


def first_difference(a: Sequence[bool], b: Sequence[bool], times: Sequence[float]) -> Any:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i, times[i], x, y
    return None


@pytest.mark.parametrize(("count", "period"), SHAPES)
def test_anchor_first_admits_what_limits_fixed_window_admits(count: int, period: int) -> None:
    admitted = 0
    for seed in SEEDS:
        costs = [1] * REQUESTS
        theirs, seen = peer("fixed", count, period, request_times(seed, count, period), costs)
        mine = ours(FixedWindow(count, period, anchor="first"), seen, costs)
        assert first_difference(mine, theirs, seen) is None, seed
        admitted += sum(mine)
    assert 0 < admitted < REQUESTS * len(SEEDS)  # both decisions were exercised


@pytest.mark.parametrize(("count", "period"), SHAPES)
def test_sliding_window_admits_what_limits_sliding_window_counter_admits(
    count: int, period: int
) -> None:
    admitted = 0
    for seed in SEEDS:
        costs = [1] * REQUESTS
        theirs, seen = peer("sliding", count, period, request_times(seed, count, period), costs)
        mine = ours(SlidingWindow(count, period), seen, costs)
        assert first_difference(mine, theirs, seen) is None, seed
        admitted += sum(mine)
    assert 0 < admitted < REQUESTS * len(SEEDS)


@pytest.mark.parametrize(("count", "period"), [(5, 10), (10, 60)])
def test_the_sliding_window_agrees_for_larger_costs_too(count: int, period: int) -> None:
    # limits' sliding-window counter refuses a hit without counting it, as we do.
    for seed in SEEDS:
        costs = random.Random(-seed).choices([1, 2, 3, count, count + 1], k=REQUESTS)
        theirs, seen = peer("sliding", count, period, request_times(seed, count, period), costs)
        assert (
            first_difference(ours(SlidingWindow(count, period), seen, costs), theirs, seen) is None
        )


def test_limits_fixed_window_counts_refused_hits_and_we_do_not() -> None:
    # Documented difference: limits' fixed window adds every hit's cost, even a
    # refused one's, so a refused large request uses up the window for small
    # ones.  Ours is all or nothing: a refusal takes nothing.
    costs = [3, 3, 1, 1, 2]
    times = [W0 + 5 + i for i in range(len(costs))]
    theirs, seen = peer("fixed", 5, 60, times, costs)
    assert theirs == [True, False, False, False, False]  # 3, then 6, 7, 8, 10 counted
    assert ours(FixedWindow(5, 60, anchor="first"), seen, costs) == [True, False, True, True, False]


# -- the epoch-aligned fixed window against a model ---------------------------------------


def model(count: int, period: float, times: Sequence[float], costs: Sequence[float]) -> Any:
    """Units per window index ``floor(t / period)``: admitted while they fit, all or nothing."""
    used: Dict[int, float] = {}
    out: List[Tuple[bool, int, float]] = []
    for t, cost in zip(times, costs):
        index = math.floor(t / period)
        taken = used.get(index, 0.0)
        ok = taken + cost <= count
        if ok:
            used[index] = taken = taken + cost
        retry = 0.0 if ok else (math.inf if cost > count else (index + 1) * period - t)
        out.append((ok, max(0, math.trunc(count - taken)), retry))
    return out


@pytest.mark.parametrize(("count", "period"), [*SHAPES, (4, 0.25), (100, 86400)])
def test_epoch_fixed_window_matches_a_dict_of_window_counts(count: int, period: float) -> None:
    for seed in SEEDS:
        times = request_times(seed, count, period)
        costs = random.Random(seed).choices([1, 1, 1, 2, 0.5, count + 1], k=len(times))
        state, got = None, []
        for now, cost in zip(times, costs):
            state, result = step(state, now, FixedWindow(count, period), cost)
            got.append(result)
        for (ok, remaining, retry), result in zip(model(count, period, times, costs), got):
            assert (result.allowed, result.remaining) == (ok, remaining), seed
            assert result.retry_after == pytest.approx(retry, abs=1e-6)


# -- the deliberate differences at ties ---------------------------------------------------


def test_at_a_tie_we_read_the_estimate_a_microsecond_later_than_limits() -> None:
    # Ten hits at W0 + 30; at W0 + 90 exactly, half of the previous window is
    # still within the last minute: limits' estimate is 10 * 0.5 = 5.0, ours
    # (read at now + TIME_EPSILON, so that waiting exactly retry_after admits)
    # is 4.9999998.  Rounded down, limits admits 5 more hits, we admit 6: the
    # one instant where they differ, and one microsecond later they agree.
    times = [W0 + 30] * 10 + [W0 + 90] * 7
    costs = [1] * len(times)
    theirs, seen = peer("sliding", 10, 60, times, costs)
    mine = ours(SlidingWindow(10, 60), seen, costs)
    assert theirs == [True] * 10 + [True] * 5 + [False] * 2
    assert mine == [True] * 10 + [True] * 6 + [False]
    later = [W0 + 30] * 10 + [W0 + 90 + 2 * TIME_EPSILON] * 7
    theirs, seen = peer("sliding", 10, 60, later, costs)
    assert ours(SlidingWindow(10, 60), seen, costs) == theirs


def test_limits_weight_is_rounded_at_decimal_times_by_less_than_our_microsecond() -> None:
    # limits weighs the previous window by 1 - ((now - p) / p) % 1, rounded
    # to an ulp of now / p (about 1e-9 at today's Unix time for a minute);
    # we by (end - (now + TIME_EPSILON)) / p, a microsecond on.  Equal in
    # exact arithmetic but for that microsecond, they differ in the last bits
    # at "nice" decimal instants, and ours is always the lower: where the
    # estimate is exactly a whole number (only such instants hit one) we
    # admit a unit that limits refuses.  Those instants are why the
    # comparisons above draw random times.
    period, end = 60.0, W0 + 120
    rounded = 0
    for tenths in range(1, 600):
        now = W0 + 60 + tenths / 10
        theirs = 1 - ((now - period) / period) % 1
        exact = (Fraction(end) - Fraction(now)) / Fraction(period)
        mine = (end - (now + TIME_EPSILON)) / period
        assert abs(theirs - exact) < 1e-8 and mine < theirs, now
        rounded += theirs != float(exact)
    assert rounded > 100
