"""The window policies (issue 24): ``FixedWindow`` and ``SlidingWindow``, rule by rule.

One test per numbered rule of ``limiter.core.window`` with exact figures,
then validation, equality, ``RateLimiter(algorithm=...)``, all or nothing
beside the other policies, the clock rules, and properties (hypothesis):
waiting exactly ``retry_after`` admits, a millisecond less does not;
``remaining`` is exactly what passes now.  The peers (limits) are in
``test_window_peers.py``.
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal
from fractions import Fraction
from typing import Any, List, Optional, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from limiter import (
    FixedWindow,
    Limit,
    Lockout,
    ManualClock,
    MemoryStore,
    Quota,
    RateLimiter,
    SlidingWindow,
)
from limiter.core.bucket import step
from limiter.core.costs import Charge, Refund
from limiter.core.limits import CLOCK_TOLERANCE, TIME_EPSILON
from limiter.core.many import step_all
from limiter.core.state import keep_until, read_count, read_sliding, to_row
from limiter.core.window import MAX_PERIOD, MIN_PERIOD

#: A Unix time on a boundary of every window used here (60 s, 10 s, 1 s, 0.5 s).
W0 = 1_699_999_980.0
assert W0 % 60 == 0


def run(policy: Any, moments: List[float], cost: Any = 1, state: Any = None) -> Tuple[Any, list]:
    """``step`` at each moment in turn (cost ``cost``): the last state and every result."""
    results = []
    for now in moments:
        state, result = step(state, now, policy, cost)
        results.append(result)
    return state, results


def allowed(results: list) -> List[bool]:
    return [r.allowed for r in results]


# -- rule 1: windows -----------------------------------------------------------------------


def test_rule_1_epoch_windows_are_aligned_to_multiples_of_the_period() -> None:
    fixed = FixedWindow(3, 60)
    assert fixed.bounds(W0 + 20) == (W0, W0 + 60)
    state, results = run(fixed, [W0 + 20] * 4)
    assert allowed(results) == [True, True, True, False]
    assert [r.remaining for r in results] == [2, 1, 0, 0]
    assert [r.reset_after for r in results] == [40.0] * 4  # to W0 + 60, not 60 s
    assert results[3].retry_after == 40.0
    assert all((r.window, r.limit, r.kind) == (60.0, 3, "fixed-window") for r in results)
    # The next window counts afresh, at its very start.
    assert step(state, W0 + 60, fixed)[1].remaining == 2


def test_rule_1_the_window_holding_now_plus_the_epsilon_is_current() -> None:
    fixed = FixedWindow(1, 60)
    state, _ = step(None, W0 + 30, fixed)
    # Half a microsecond before the boundary already counts in the next window,
    # so a client waiting exactly retry_after (rounded at today's epoch) gets in.
    early = step(state, W0 + 60 - TIME_EPSILON / 2, fixed)[1]
    assert early.allowed and early.reset_after == pytest.approx(60 + TIME_EPSILON / 2)
    assert not step(state, W0 + 60 - 2 * TIME_EPSILON, fixed)[1].allowed


@pytest.mark.parametrize("policy", [FixedWindow(1, 0.001), SlidingWindow(1, 0.001)])
def test_rule_1_a_window_rounded_to_end_at_the_moment_is_the_next_one(policy: Any) -> None:
    # floor(moment / period) * period + period rounds to moment itself here: that
    # window would not hold the moment, and every request at it would pass.
    now = 1675119037.810999
    assert math.floor((now + TIME_EPSILON) / 0.001) * 0.001 + 0.001 == now + TIME_EPSILON
    limiter = RateLimiter(policy, clock=ManualClock(start=now))
    assert [limiter.allow("k") for _ in range(5)] == [True, False, False, False, False]
    # The window [.811, .812) holds the moment: its end is 1.001 ms away.
    assert limiter.check("k").retry_after == pytest.approx(0.001001, abs=5e-7)  # ulp: 2.4e-7


def test_rule_1_anchor_first_starts_a_window_at_the_request_finding_none_open() -> None:
    first = FixedWindow(2, 60, anchor="first")
    state, results = run(first, [W0 + 25, W0 + 50, W0 + 84.5])
    assert allowed(results) == [True, True, False]
    assert [r.reset_after for r in results] == [60.0, 35.0, 0.5]
    assert results[2].retry_after == 0.5
    assert read_count(state) == (2.0, W0 + 85)
    # At W0 + 85 the window is over; the next one starts at the next request.
    state, results = run(first, [W0 + 100, W0 + 159.5, W0 + 160], state=state)
    assert allowed(results) == [True, True, True]
    assert [r.reset_after for r in results] == [60.0, 0.5, 60.0]
    assert read_count(state) == (1.0, W0 + 220)


# -- rule 2: admission ---------------------------------------------------------------------


def test_rule_2_a_fixed_window_admits_while_used_plus_cost_fits() -> None:
    fixed = FixedWindow(5, 10)
    state, results = run(fixed, [W0, W0 + 1], cost=2)
    assert [r.remaining for r in results] == [3, 1]
    denied = step(state, W0 + 2, fixed, 2)[1]  # 4 + 2 > 5: all or nothing
    assert (denied.allowed, denied.remaining, denied.retry_after) == (False, 1, 8.0)
    state, half = step(state, W0 + 2, fixed, 0.5)  # fractional costs count as they are
    assert (half.allowed, half.remaining) == (True, 0)  # 0.5 left, no whole unit
    assert read_count(state) == (4.5, W0 + 10)
    assert step(state, W0 + 3, fixed, 0.5)[1].allowed
    assert not step(state, W0 + 3, fixed, 0.75)[1].allowed


def test_rule_2_a_sliding_window_weights_the_previous_window_and_rounds_down() -> None:
    sliding = SlidingWindow(10, 60)
    state, _ = run(sliding, [W0 + 30] * 10)
    # At W0 + 75, a quarter of the next window has passed: the previous window
    # weighs 45/60, so the estimate is 7.5, and floor(7.5) + 1 <= 10 three times.
    state, results = run(sliding, [W0 + 75] * 4, state=state)
    assert allowed(results) == [True, True, True, False]
    assert [r.remaining for r in results] == [2, 1, 0, 0]  # 10 - floor(8.5), ...
    assert read_sliding(state) == (10.0, 3.0, W0 + 180)
    denied = results[3]
    # 7 * 60 / 10 s before the window's end the estimate falls below 10.
    assert denied.retry_after == pytest.approx(3.0, abs=1e-6)
    assert denied.reset_after == 105.0  # the current window's units count until W0 + 180
    assert (denied.window, denied.limit, denied.kind) == (60.0, 10, "sliding-window")
    assert step(state, W0 + 75 + denied.retry_after, sliding)[1].allowed
    assert not step(state, W0 + 77.999, sliding)[1].allowed


def test_rule_2_a_sliding_window_forgets_a_window_two_periods_old() -> None:
    sliding = SlidingWindow(4, 10)
    state, _ = run(sliding, [W0 + 5] * 4)
    assert step(state, W0 + 19.9, sliding, 0)[1].remaining == 4  # 4 * 0.01 rounds down to 0
    peek = step(state, W0 + 14, sliding, 0)[1]
    assert (peek.remaining, peek.reset_after) == (2, 6.0)  # 4 * 0.6 = 2.4; forgotten at W0 + 20
    fresh = step(state, W0 + 20, sliding, 0)[1]
    assert (fresh.remaining, fresh.reset_after) == (4, 0.0)
    state, results = run(sliding, [W0 + 25] * 5, state=state)
    assert allowed(results) == [True] * 4 + [False]


# -- rule 3: peeks, costs above the count --------------------------------------------------


@pytest.mark.parametrize("policy", [FixedWindow(3, 60), SlidingWindow(3, 60)])
def test_rule_3_cost_zero_is_a_peek_and_above_the_count_is_never_admitted(policy: Any) -> None:
    state, peek = step(None, W0, policy, 0)
    assert state is None and peek.allowed and peek.remaining == 3
    state, _ = step(None, W0, policy, 2)
    assert step(state, W0 + 1, policy, 0)[0] is state  # nothing to store
    for cost in (4, 3.5, 10**400, Decimal("3.000001")):
        result = step(state, W0 + 1e6, policy, cost)[1]
        assert (result.allowed, result.retry_after) == (False, math.inf), cost
    assert step(None, W0, policy, 4)[0] is None  # a denial opens nothing
    assert step(None, W0, policy, 3)[1].allowed


# -- rule 4: refunds -----------------------------------------------------------------------


def test_rule_4_a_fixed_window_refund_goes_only_to_the_window_that_took_the_units() -> None:
    fixed = FixedWindow(5, 60)
    state, _ = step(None, W0 + 10, fixed, 4)
    state, back = step(state, W0 + 20, fixed, Refund(3, taken_at=W0 + 10))
    assert (back.allowed, back.remaining) == (True, 4)
    state, back = step(state, W0 + 20, fixed, Refund(9))  # at most what was used
    assert back.remaining == 5 and read_count(state) == (0.0, W0 + 60)
    # Units taken in the window before are forgiven at its end: nothing comes back.
    state, _ = step(state, W0 + 59, fixed, 5)
    state, _ = step(state, W0 + 61, fixed, 5)
    assert step(state, W0 + 62, fixed, Refund(5, taken_at=W0 + 59))[0] is state
    assert step(state, W0 + 62, fixed, Refund(2))[1].remaining == 2  # no taken_at: this window
    # anchor="first": the window that took them is the key's own.
    first = FixedWindow(5, 60, anchor="first")
    state, _ = step(None, W0 + 10, first, 5)
    assert step(state, W0 + 69, first, Refund(1, taken_at=W0 + 10))[1].remaining == 1
    state, _ = step(state, W0 + 70, first, 5)  # a new window, from W0 + 70
    assert step(state, W0 + 71, first, Refund(1, taken_at=W0 + 69))[0] is state


def test_rule_4_a_sliding_refund_returns_units_to_the_previous_window_too() -> None:
    sliding = SlidingWindow(10, 60)
    state, _ = step(None, W0 + 30, sliding, 8)
    state, _ = step(state, W0 + 89, sliding, 2)  # estimate 8 * 31/60 + 2 = 6.13
    assert step(state, W0 + 89, sliding, 0)[1].remaining == 4
    # Taken in the previous window: the previous window gets them back.
    state, back = step(state, W0 + 89, sliding, Refund(4, taken_at=W0 + 30))
    assert back.remaining == 6 and read_sliding(state) == (4.0, 2.0, W0 + 180)  # 4.07
    # Taken in the current window: the current one.
    state, back = step(state, W0 + 89, sliding, Refund(5, taken_at=W0 + 89))
    assert back.remaining == 8 and read_sliding(state) == (4.0, 0.0, W0 + 180)
    # Two windows back, or nothing left where they were taken: nothing changes.
    assert step(state, W0 + 89, sliding, Refund(1, taken_at=W0 - 1))[0] is state
    assert step(state, W0 + 89, sliding, Refund(1))[0] is state
    assert step(None, W0, sliding, Refund(1))[0] is None


# -- rule 5: charges -----------------------------------------------------------------------


def test_rule_5_a_charge_is_always_admitted_and_stops_at_twice_the_count() -> None:
    fixed = FixedWindow(3, 60)
    state, charged = step(None, W0 + 10, fixed, Charge(100))
    assert (charged.allowed, charged.remaining, charged.retry_after) == (True, 0, 0.0)
    assert read_count(state) == (6.0, W0 + 60)
    assert step(state, W0 + 20, fixed, Refund(3))[1].remaining == 0  # 3 still used
    assert step(state, W0 + 60, fixed)[1].remaining == 2  # the next window forgives it
    sliding = SlidingWindow(3, 60)
    state, charged = step(None, W0 + 10, sliding, Charge(math.inf))
    assert charged.allowed and read_sliding(state) == (0.0, 6.0, W0 + 120)
    # The charge weighs on the next window: 6 * 31/60 = 3.1 at W0 + 89, and
    # below 3 from W0 + 90.
    denied = step(state, W0 + 89, sliding)[1]
    assert not denied.allowed and denied.retry_after == pytest.approx(1.0, abs=1e-6)
    assert step(state, W0 + 90, sliding)[1].allowed


# -- rule 6: clocks stepped back -----------------------------------------------------------


def test_rule_6_a_clock_stepped_back_moves_the_units_to_the_window_holding_now() -> None:
    fixed = FixedWindow(3, 60)
    state, _ = run(fixed, [W0 + 3600 + 1] * 3)
    # An hour back: nothing is granted, no one waits the hour, and the moved
    # state is stored even though the request is denied.
    moved, denied = step(state, W0 + 10, fixed)
    assert not denied.allowed and denied.retry_after == 50.0
    assert moved is not state and read_count(moved) == (3.0, W0 + 60)
    assert step(moved, W0 + 60, fixed)[1].allowed


@pytest.mark.parametrize(("period", "back"), [(1.0, 100.0), (60.0, 6000.5), (0.5, 3.0)])
def test_rule_6_a_state_several_windows_ahead_is_moved_however_close_the_boundary(
    period: float, back: float
) -> None:
    # The bug fixed with the issue: a state more than one window ahead, read
    # within CLOCK_TOLERANCE of the current window's end, was kept in its own
    # window, locking the key out for the whole step back.
    fixed = FixedWindow(2, period)
    now = W0 + 10 * period - 0.25  # a quarter of a second before a boundary
    state, _ = run(fixed, [now + back] * 2)
    moved, denied = step(state, now, fixed)
    assert not denied.allowed and denied.retry_after == pytest.approx(0.25)
    assert read_count(moved)[0] == 2.0
    assert step(moved, now + 0.25, fixed)[1].allowed


def test_rule_6_a_quota_counts_as_a_fixed_window_does() -> None:
    # A Quota's count is count_step's too: a day back, read in the last half
    # second of an hour, its units come to that hour (they waited a day).
    hourly = Quota(3, "hour")
    hour_end = W0 + 3600 - W0 % 3600
    state, _ = run(hourly, [hour_end + 86400 + 10] * 3)
    moved, denied = step(state, hour_end - 0.5, hourly)
    assert not denied.allowed and denied.retry_after == 0.5
    assert read_count(moved) == (3.0, hour_end)
    # The next hour's state, read within the tolerance, counts in its own hour.
    state, _ = run(hourly, [hour_end + 10] * 3)
    assert step(state, hour_end - 0.5, hourly)[1].retry_after == 3600.5


def test_rule_6_within_the_tolerance_a_late_reading_counts_in_the_state_window() -> None:
    fixed = FixedWindow(3, 60)
    state, _ = run(fixed, [W0 + 60.2] * 3)  # the next window's three units
    # A reading taken at W0 + 59.5, applied after them: the same window.
    late, result = step(state, W0 + 59.5, fixed)
    assert late is state and not result.allowed
    assert result.reset_after == pytest.approx(60.5)
    # Exactly CLOCK_TOLERANCE before the state's window is still within it.
    assert step(state, W0 + 60 - CLOCK_TOLERANCE, fixed)[0] is state
    assert step(state, W0 + 60 - CLOCK_TOLERANCE - 0.01, fixed)[0] is not state


def test_rule_6_anchor_first_and_the_sliding_window_follow_the_same_rule() -> None:
    first = FixedWindow(2, 60, anchor="first")
    state, _ = run(first, [W0 + 3600] * 2)
    moved, denied = step(state, W0, first)  # an hour back: a window from now
    assert not denied.allowed and denied.retry_after == 60.0
    assert read_count(moved) == (2.0, W0 + 60)
    assert step(state, W0 + 3600 - CLOCK_TOLERANCE, first)[0] is state  # within: its own
    sliding = SlidingWindow(2, 60)
    state, _ = run(sliding, [W0 + 3600 + 30] * 2)
    moved, denied = step(state, W0 + 30, sliding)
    assert not denied.allowed and read_sliding(moved) == (0.0, 2.0, W0 + 120)
    # In the next window the estimate is 2 * weight, below 2 from its start.
    assert denied.retry_after == pytest.approx(30.0, abs=1e-6)
    late, result = step(state, W0 + 3600 - 0.5, sliding)
    assert late is state and not result.allowed  # counted in its own window


# -- rule 7: retry_after and reset_after ---------------------------------------------------


def test_rule_7_a_fixed_window_retry_is_its_end_and_reset_is_when_nothing_counts() -> None:
    fixed = FixedWindow(2, 10)
    state, results = run(fixed, [W0 + 2.5] * 3)
    assert [(r.retry_after, r.reset_after) for r in results] == [(0.0, 7.5)] * 2 + [(7.5, 7.5)]
    assert step(state, W0 + 2.5 + 7.5, fixed)[1].allowed
    assert not step(state, W0 + 9.999, fixed)[1].allowed


def test_rule_7_a_sliding_retry_in_the_next_window_when_the_current_one_is_full() -> None:
    sliding = SlidingWindow(4, 10)
    state, _ = run(sliding, [W0 + 1] * 4)
    denied = step(state, W0 + 2, sliding)[1]
    # The estimate 4 * weight falls below 4 only in the next window, at once:
    # retry at its start (W0 + 10); cost 3 needs it below 2: at W0 + 15.
    assert denied.retry_after == pytest.approx(8.0, abs=1e-6)
    assert step(state, W0 + 2, sliding, 3)[1].retry_after == pytest.approx(13.0, abs=1e-6)
    assert denied.reset_after == 18.0
    assert step(state, W0 + 20, sliding, 0)[1].reset_after == 0.0


# -- rule 8: the states --------------------------------------------------------------------


def test_rule_8_states_are_a_count_for_a_fixed_window_and_three_floats_for_a_sliding_one() -> None:
    state, _ = step(None, W0 + 5, FixedWindow(3, 60), 2)
    assert isinstance(state, complex) and read_count(state) == (2.0, W0 + 60)
    assert keep_until(state) == W0 + 60 == FixedWindow(3, 60).keep_until(state)
    assert sys.getsizeof(state) == sys.getsizeof(complex(1, 2))  # 32 bytes, like a bucket
    state, _ = step(None, W0 + 5, SlidingWindow(3, 60), 2)
    assert state == (0.0, 2.0, W0 + 120) and to_row(state) == state
    assert keep_until(state) == W0 + 120 == SlidingWindow(3, 60).keep_until(state)


# -- validation, equality, names -----------------------------------------------------------


@pytest.mark.parametrize("cls", [FixedWindow, SlidingWindow])
@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((0, 60), ValueError, "window count must be from 1 to 2\\*\\*53, got 0"),
        ((2**53 + 1, 60), ValueError, "window count"),
        ((2.0, 60), TypeError, "window count must be an int, got 2.0"),
        ((True, 60), TypeError, "window count must be an int, got True"),
        ((5, 0), ValueError, "period must be a number of seconds from 0.001 to 2\\*\\*40, got 0"),
        ((5, 9e-4), ValueError, "period"),
        ((5, 2.0**40 + 1), ValueError, "period"),
        ((5, math.nan), ValueError, "period.*nan"),
        ((5, math.inf), ValueError, "period.*inf"),
        ((5, 10**400), ValueError, "period"),
        ((5, "60"), TypeError, "period must be a number of seconds, got '60'"),
        ((5, True), TypeError, "period must be a number of seconds, got True"),
        ((5, None), TypeError, "period"),
    ],
)
def test_bad_parameters_are_errors_naming_the_value(
    cls: Any, args: Tuple[Any, ...], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        cls(*args)


@pytest.mark.parametrize("algorithm", ["fixed-window", "sliding-window"])
def test_a_rate_string_whose_span_is_beyond_a_float_is_a_value_error(algorithm: str) -> None:
    # It was an OverflowError from the division; the token bucket's was a ValueError.
    with pytest.raises(ValueError, match=r"period must be a number of seconds .*, got inf"):
        RateLimiter("1 per 1" + "0" * 400 + " seconds", algorithm=algorithm)


@pytest.mark.parametrize("cls", [FixedWindow, SlidingWindow])
def test_names_are_checked_and_any_real_period_in_range_is_taken(cls: Any) -> None:
    with pytest.raises(TypeError, match="limit name must be a str, got 5"):
        cls(5, 60, name=5)
    with pytest.raises(ValueError, match="limit name must be printable ASCII"):
        cls(5, 60, name='a "quoted" name')
    for period in (MIN_PERIOD, MAX_PERIOD, Fraction(3, 2), Decimal("1.5"), 2**40):
        assert cls(1, period).period == float(period)
    assert cls(2**53, 1).count == 2**53


@pytest.mark.parametrize(
    "policy", [FixedWindow(3, 60), FixedWindow(3, 60, "first"), SlidingWindow(3, 60)]
)
@pytest.mark.parametrize("cost", [1, 0, Refund(1), Charge(1)])
def test_a_now_that_is_no_finite_number_is_a_value_error_naming_it(policy: Any, cost: Any) -> None:
    # A refund or a charge too: windows are found from now (one was an
    # OverflowError, and anchor="first" stored a charge's window ending at inf).
    state, _ = step(None, W0, policy)
    for now in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match="now must be a finite number of seconds"):
            step(state, now, policy, cost)
    with pytest.raises(ValueError, match="cost must be a number of tokens >= 0, got -1"):
        step(state, math.nan, policy, -1)  # the cost's error first, as for a bucket


def test_an_anchor_is_epoch_or_first() -> None:
    with pytest.raises(ValueError, match="anchor must be 'epoch' or 'first', got 'last'"):
        FixedWindow(5, 60, anchor="last")
    for bad in (None, 1, ["first"]):
        with pytest.raises(TypeError, match="anchor must be 'epoch' or 'first'"):
            FixedWindow(5, 60, anchor=bad)  # type: ignore[arg-type]


def test_equality_hash_repr_and_labels() -> None:
    fixed = FixedWindow(10, 60)
    assert fixed == FixedWindow(10, 60.0, name="other") == FixedWindow(10, Fraction(60))
    assert hash(fixed) == hash(FixedWindow(10, 60.0, "epoch", "other"))
    assert fixed != FixedWindow(10, 60, anchor="first") and fixed != FixedWindow(11, 60)
    assert fixed != SlidingWindow(10, 60) and SlidingWindow(10, 60) == SlidingWindow(10, 60.0)
    assert len({fixed, FixedWindow(10, 60), SlidingWindow(10, 60), Limit(10 / 60, 10)}) == 3
    assert repr(fixed) == "FixedWindow(10, 60.0, anchor='epoch', name='default')"
    assert repr(SlidingWindow(3, 1.5, "x")) == "SlidingWindow(3, 1.5, name='x')"
    assert eval(repr(FixedWindow(3, 2, "first", "n"))) == FixedWindow(3, 2, "first")
    assert str(fixed) == "10 per 60s fixed window (default)"
    assert str(SlidingWindow(3, 1.5)) == "3 per 1.5s sliding window (default)"
    assert fixed.label == "10/60s:fixed"
    assert FixedWindow(10, 60, "first").label == "10/60s:fixed@first"
    assert SlidingWindow(10, 60).label == "10/60s:sliding"
    assert fixed.renamed("api").name == "api" and fixed.renamed("api") == fixed
    assert FixedWindow(3, 60, "first").numbered(2) == FixedWindow(3, 60, "first")
    assert SlidingWindow(3, 60).numbered(1).name == "3per60s#1"
    assert (fixed.burst, fixed.rate, fixed.interval, fixed.window) == (10, 10 / 60, 6.0, 60.0)
    with pytest.raises(AttributeError):
        fixed.count = 3  # type: ignore[misc]


def test_parse_reads_rate_strings() -> None:
    assert FixedWindow.parse("10/minute") == FixedWindow(10, 60)
    assert SlidingWindow.parse("5 per 2 seconds") == SlidingWindow(5, 2)
    assert FixedWindow.parse("3/hour", anchor="first").anchor == "first"
    assert [w.name for w in FixedWindow.parse_many("1/s;  10 per  minute")] == [
        "1/s",
        "10 per minute",
    ]
    with pytest.raises(ValueError, match="rate"):
        SlidingWindow.parse("10/fortnight")


# -- RateLimiter(algorithm=...) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "cls", "name"),
    [
        ("token-bucket", Limit, "0.166667/s:10"),
        ("fixed-window", FixedWindow, "10/60s:fixed"),
        ("sliding-window", SlidingWindow, "10/60s:sliding"),
    ],
)
def test_algorithm_says_what_a_rate_string_becomes(algorithm: str, cls: type, name: str) -> None:
    limiter = RateLimiter("10/minute", algorithm=algorithm)
    assert [type(p) for p in limiter.limits] == [cls] and limiter.name == name
    assert limiter.limits[0].name == "10/minute" and limiter.limits[0].burst == 10


def test_the_default_names_keep_each_algorithm_apart_in_a_shared_store() -> None:
    store, clock = MemoryStore(), ManualClock(W0 + 1)
    limiters = [
        RateLimiter("2/minute", store=store, clock=clock, algorithm=algorithm)
        for algorithm in ("token-bucket", "fixed-window", "sliding-window")
    ]
    assert len({limiter.name for limiter in limiters}) == 3
    # Each counts in its own state: a bucket's complex read as a count would refuse.
    assert [[limiter.allow("k") for _ in range(3)] for limiter in limiters] == [
        [True, True, False]
    ] * 3
    assert len(store) == 3


def test_windows_from_numbers_mappings_and_lists() -> None:
    assert RateLimiter(5, algorithm="fixed-window").limits == (FixedWindow(5, 1),)
    assert RateLimiter(5.0, algorithm="sliding-window").limits == (SlidingWindow(5, 1),)
    mapped = RateLimiter({"a": "10/minute", "b": 5}, algorithm="sliding-window")
    assert mapped.limits == (SlidingWindow(10, 60), SlidingWindow(5, 1))
    assert [p.name for p in mapped.limits] == ["a", "b"]
    listed = RateLimiter(["10/second", "100/minute"], algorithm="fixed-window")
    assert listed.limits == (FixedWindow(10, 1), FixedWindow(100, 60))
    assert listed.name == "10/1s:fixed+100/60s:fixed"
    # Policies given as objects stay as they are, whatever the algorithm.
    mixed = RateLimiter([Limit(1, 5), "3/minute"], algorithm="fixed-window")
    assert mixed.limits == (Limit(1, 5), FixedWindow(3, 60))
    assert RateLimiter(FixedWindow(3, 60, "first")).name == "3/60s:fixed@first"
    assert RateLimiter(FixedWindow(3, 60), burst=3).limits == (FixedWindow(3, 60),)


def test_bad_algorithms_and_a_burst_with_a_window_are_errors_naming_them() -> None:
    with pytest.raises(ValueError, match=r"algorithm must be one of .*got 'leaky'"):
        RateLimiter(1, algorithm="leaky")
    with pytest.raises(TypeError, match="algorithm must be a str, got 5"):
        RateLimiter(1, algorithm=5)  # type: ignore[arg-type]
    for rate in ("10/minute", 5):
        with pytest.raises(ValueError, match="burst=5 does not apply to a window"):
            RateLimiter(rate, 5, algorithm="fixed-window")
    with pytest.raises(ValueError, match="burst=4 does not apply to SlidingWindow"):
        RateLimiter(SlidingWindow(3, 60), burst=4)
    for bad in (2.5, True, None):
        with pytest.raises(TypeError, match="a window's rate must be a whole number"):
            RateLimiter(bad, algorithm="sliding-window")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit 'a': must be one rate"):
        RateLimiter({"a": "1/s;2/minute"}, algorithm="fixed-window")


def test_a_limiter_of_windows_checks_refunds_and_charges() -> None:
    clock = ManualClock(W0 + 50)
    limiter = RateLimiter("3/minute", clock=clock, algorithm="fixed-window")
    taken = clock.now()
    assert [limiter.check("k").remaining for _ in range(3)] == [2, 1, 0]
    denied = limiter.check("k")
    assert (denied.allowed, denied.retry_after, denied.policy) == (False, 10.0, "3/minute")
    clock.advance(10)  # a new window: the refund of the old one gives nothing
    assert limiter.check("k", 3).allowed
    assert limiter.refund("k", 2, taken_at=taken).remaining == 0
    assert limiter.refund("k", 2, taken_at=clock.now()).remaining == 2
    assert limiter.charge("k", 10).remaining == 0 and not limiter.allow("k")
    assert limiter.peek("k").reset_after == 60.0


# -- several policies: all or nothing ------------------------------------------------------


POLICIES = (
    Limit(1, 5, "bucket"),
    Quota(4, "day", name="day"),
    FixedWindow(3, 60, name="fixed"),
    SlidingWindow(2, 60, name="sliding"),
    Lockout(breaches=2, within=60, duration=300, name="lockout"),
)


def test_step_all_admits_through_every_policy_or_takes_from_none() -> None:
    states: List[Optional[Any]] = [None] * 5
    now = W0 + 1
    for _ in range(2):
        states, result = step_all(states, now, POLICIES)
        assert result.allowed
    states, denied = step_all(states, now, POLICIES)  # the sliding window's third
    assert (denied.allowed, denied.policy, denied.kind) == (False, "sliding", "sliding-window")
    assert [r.remaining for r in denied.results[:4]] == [3, 2, 1, 0]
    assert denied.retry_after == pytest.approx(59.0, abs=1e-6)  # to the next window
    # Per-limit costs: the sliding window takes nothing, the fixed one refuses,
    # and that second breach locks the key out.
    states, refused = step_all(states, now, POLICIES, (0, 1, 2, 0, 0))
    assert (refused.allowed, refused.policy, refused.locked_out) == (False, "lockout", True)
    assert refused.retry_after == 300.0
    assert [(r.allowed, r.remaining) for r in refused.results[:4]] == [
        (True, 3),
        (True, 2),
        (False, 1),
        (True, 0),
    ]
    # Nothing was taken by either refusal: after the lockout the same units remain.
    peek = step_all(states, now + 300, POLICIES, 0)[1]
    assert [r.remaining for r in peek.results] == [5, 2, 3, 2]


def test_a_window_refusing_beside_a_bucket_leaves_the_bucket_untouched() -> None:
    limits = (Limit(1, 10, "bucket"), FixedWindow(1, 1, name="second"))
    states, first = step_all([None, None], W0, limits)
    states, second = step_all(states, W0 + 0.5, limits)
    assert first.allowed and not second.allowed and second.policy == "second"
    assert second.retry_after == 0.5
    assert second.results[0].remaining == 9  # a peek: one token taken in all, by the first
    states, third = step_all(states, W0 + 1, limits, Charge(20))
    assert third.allowed and [r.remaining for r in third.results] == [0, 0]


# -- properties ----------------------------------------------------------------------------


WINDOWS = st.one_of(
    st.builds(
        FixedWindow,
        st.integers(1, 12),
        st.sampled_from([0.5, 1, 7.5, 60, 3600]),
        st.sampled_from(["epoch", "first"]),
    ),
    st.builds(SlidingWindow, st.integers(1, 12), st.sampled_from([0.5, 1, 7.5, 60, 3600])),
)
COSTS = st.sampled_from([1, 1, 1, 2, 3, 0.5, 2.5, 0, 13])
#: Gaps between requests, as fractions of the period (some a few periods long).
GAPS = st.floats(0, 2.5, allow_nan=False)


@given(policy=WINDOWS, ops=st.lists(st.tuples(GAPS, COSTS), min_size=1, max_size=40))
def test_waiting_exactly_retry_after_admits_and_a_millisecond_less_does_not(
    policy: Any, ops: List[Tuple[float, float]]
) -> None:
    state, now = None, W0 + 0.25 * policy.period
    for gap, cost in ops:
        now += gap * policy.period
        new, result = step(state, now, policy, cost)
        assert 0 <= result.remaining <= policy.count
        if cost > 0 and result.allowed:
            assert new is not None
        if not result.allowed and result.retry_after < math.inf:
            assert new is state  # a denial takes nothing
            assert step(state, now + result.retry_after, policy, cost)[1].allowed
            if result.retry_after >= 1e-3:
                assert not step(state, now + result.retry_after - 1e-3, policy, cost)[1].allowed
        state = new


@given(policy=WINDOWS, ops=st.lists(st.tuples(GAPS, COSTS), min_size=1, max_size=30))
def test_remaining_is_exactly_what_passes_now_and_reset_after_forgets_all(
    policy: Any, ops: List[Tuple[float, float]]
) -> None:
    state, now = None, W0 + 0.25 * policy.period
    for gap, cost in ops:
        now += gap * policy.period
        state, result = step(state, now, policy, cost)
    probe, passed = state, 0
    while step(probe, now, policy)[1].allowed:
        probe = step(probe, now, policy)[0]
        passed += 1
    peek = step(state, now, policy, 0)[1]
    assert passed == result.remaining == peek.remaining
    later = now + peek.reset_after
    assert step(state, later, policy, 0)[1].remaining == policy.count
