"""Hypothesis strategies for the tests that hold a server's step equal to ``limiter.core``.

The Redis script (tests/backends/test_redis_store.py, test_redis_windows.py)
and the PostgreSQL function (tests/backends/test_postgres_store.py) speak the
same argument: both meet the same inputs, drawn here.

* Token buckets, quotas and lockouts: ``RATES``, ``COSTS``, ``OPS`` (time
  steps and costs), ``PER_LIMIT``, ``LOCKOUTS``, with ``move`` and ``op_cost``.
* Window policies: ``WINDOWS``, ``WINDOW_COSTS``, ``WINDOW_OPS``, ``STARTS``,
  ``COMPANIONS``, ``MAYBE_LOCKOUTS``, with ``move_in_window``, ``resolve``
  and ``same_shape``; ``given_a_window`` and ``given_windows_and_others``
  draw the arguments of ``window_runs``' sequences.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any, List, Optional

from hypothesis import given
from hypothesis import strategies as st

from limiter import Limit
from limiter.core.costs import Charge, Refund
from limiter.core.limits import CLOCK_TOLERANCE, TIME_EPSILON
from limiter.core.lockout import Lockout
from limiter.core.state import State
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0

# -- token buckets (and quotas, lockouts) ---------------------------------------------

RATES = st.sampled_from([0.001, 0.5, 1.0, 3.0, 100 / 60, 7.3, 1000.0, 2500.0, 1e6])
COSTS = st.one_of(
    st.sampled_from([0, 1, 1, 1, 2, 3, 0.5, 25, 1e9]),
    st.floats(0, 50, allow_nan=False),
    # Any real number, of any size and type (issue 9): the store sends the
    # server what step uses, and anything above 2**53 as 2**54 (never "inf").
    st.sampled_from(
        [
            *(10**400, 10**5000, math.inf, 1e308, 2**53, 2**53 + 1, 2**60, 5e-324),
            *(Fraction(1, 3), Fraction(10**400, 3), Fraction(1, 10**400), Fraction(61, 2)),
            *(Decimal("2.5"), Decimal("1e999"), Decimal("Infinity"), Decimal("1e-400")),
        ]
    ),
    # Above burst by less than the slack: denied however close (bursts are 1..30).
    st.integers(1, 30).map(lambda n: n + 1e-7),
    # Refunds, the one negative cost: the server stops the debt at 0 as step does;
    # a bucket ignores a refund's taken_at (a quota's: tests/core/test_quota.py).
    st.one_of(st.sampled_from([0, 1, 2.5, 30, 1e9, math.inf]), st.floats(0, 50)).map(Refund),
    st.sampled_from([0, 1, 2.5, 1e9, math.inf]).map(lambda t: Refund(t, T0 - 1e9)),
    # Charges, taken unconditionally: into debt, up to one burst owed (max_debt);
    # above 2**54 sent as 2**54, which takes max_debt as any charge >= 2 * burst.
    st.one_of(
        st.sampled_from([0, 1, 2.5, 30, 59.5, 60, 1e9, math.inf, 2**53 + 2, 2**54, 2**60]),
        st.floats(0, 50),
    ).map(Charge),
)
#: How far behind the latest stored updated_at a late reading goes: within
#: ``CLOCK_TOLERANCE`` (applied at updated_at), exactly at it, and just beyond
#: it or well beyond (a clock stepped back: re-anchored).
BEHIND = st.one_of(
    st.sampled_from(
        [
            *(1e-9, 0.001, 0.25, 0.999, CLOCK_TOLERANCE, math.nextafter(CLOCK_TOLERANCE, 2)),
            *(CLOCK_TOLERANCE + 1e-6, CLOCK_TOLERANCE + 0.001, 2.0, 3600.0),
        ]
    ),
    st.floats(0, 2 * CLOCK_TOLERANCE, exclude_min=True),
).map(lambda seconds: ("behind", seconds))
OPS = st.lists(
    st.tuples(
        st.one_of(
            st.integers(-3000, 8000).map(lambda ms: ms / 1000),
            st.floats(-1e4, 1e4, allow_nan=False),
            st.just(0.0),
            BEHIND,
        ),
        COSTS,
    ),
    min_size=1,
    max_size=40,
)
#: One cost per limit (the first n of four), or None: the op's one cost for all.
PER_LIMIT = st.one_of(st.none(), st.lists(COSTS, min_size=4, max_size=4))
LOCKOUTS = st.builds(
    Lockout,
    breaches=st.integers(1, 4),
    within=st.sampled_from([0.5, 1.0, 3.0, 30.0]),
    duration=st.sampled_from([0.4, 2.0, 5.0, 100.0]),
)


def move(now: float, dt: Any, states: List[Optional[complex]]) -> float:
    """``now + dt``, or for ``("behind", s)`` s seconds before the latest stored update."""
    if not isinstance(dt, tuple):
        return now + dt
    anchors = [state.imag for state in states if state is not None]
    return max(anchors) - dt[1] if anchors else now


def op_cost(cost: Any, per_limit: Optional[List[Any]], n: int, tuple_form: bool) -> Any:
    """The op's cost for ``n`` limits: the one cost, or a tuple (or list) of ``n``."""
    if per_limit is None:
        return cost
    costs = per_limit[:n]
    return tuple(costs) if tuple_form else costs


# -- window policies --------------------------------------------------------------------

PERIODS = st.sampled_from([0.001, 0.25, 1.0, 1 / 3, 7.3, 60.0, 86400.0])
COUNTS = st.one_of(st.integers(1, 6), st.sampled_from([10, 2**53 - 1, 2**53]))
WINDOWS = st.one_of(
    st.builds(FixedWindow, COUNTS, PERIODS, st.sampled_from(["epoch", "first"])),
    st.builds(SlidingWindow, COUNTS, PERIODS),
)
#: Costs: requests (fractional, above the count, any size), Charges, and
#: Refunds without a taken_at or with one resolved against now (``resolve``).
WINDOW_COSTS = st.one_of(
    st.sampled_from([0, 1, 1, 1, 2, 3, 0.5, 7, 1e9, 2**53, 2**53 + 1, 10**400, math.inf]),
    st.sampled_from([5e-324, 2**53 - 1, 2.0**52 + 0.5]),
    st.floats(0, 8, allow_nan=False),
    st.one_of(st.sampled_from([0, 0.95, 1, 2.5, 100, math.inf, 2**54 + 4]), st.floats(0, 3)).map(
        Refund
    ),
    # (tokens, "now" | "start", offset): taken offset seconds (or, for a tuple,
    # periods plus seconds) after now or the current epoch window's start.
    st.tuples(
        st.one_of(st.sampled_from([0.95, 1, 2.5, 100]), st.floats(0, 3)),
        st.sampled_from(["now", "start"]),
        st.one_of(
            st.sampled_from([0.0, 1e-7, -1e-7, -1e-6, -2e-6, -0.5, -1.0, 1.0, -60.0]),
            st.sampled_from([-1.0, -0.5, -1.5, -2.0, 0.5]).map(lambda p: (p, 0.0)),
            # taken_at + TIME_EPSILON at a window's start: counted there (rule 4)
            st.sampled_from([-1.0, 0.0]).map(lambda p: (p, -TIME_EPSILON)),
        ),
    ),
    st.one_of(
        st.sampled_from([0, 1, 2.5, 6, 13.5, 100, math.inf, 2**53 + 2, 2**54, 2**60]),
        st.floats(0, 20),
    ).map(Charge),
)
#: Time steps: seconds, periods, a boundary of the window (k periods on,
#: shifted by about the epsilon), or seconds before the stored window's start
#: (a late reading within CLOCK_TOLERANCE, a clock stepped back beyond it).
WINDOW_STEPS = st.one_of(
    st.sampled_from([0.0, 1e-7, 0.5, 1.0, -0.5]).map(lambda s: ("s", s)),
    st.floats(-1e4, 1e4, allow_nan=False).map(lambda s: ("s", s)),
    st.integers(-3000, 8000).map(lambda ms: ("s", ms / 1000)),
    st.one_of(
        st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0, -0.5, -1.0, 0.999, 1.001]),
        st.floats(-3, 3, allow_nan=False),
    ).map(lambda p: ("p", p)),
    st.tuples(
        st.integers(-1, 2),
        st.sampled_from([-2e-6, -TIME_EPSILON, -5e-7, -1e-9, 0.0, 1e-9, 5e-7, TIME_EPSILON]),
    ).map(lambda edge: ("edge", *edge)),
    st.one_of(
        st.sampled_from(
            [1e-9, 0.25, 0.999, CLOCK_TOLERANCE, math.nextafter(CLOCK_TOLERANCE, 2), 1.5, 3600.0]
        ),
        st.floats(0, 2 * CLOCK_TOLERANCE, exclude_min=True),
    ).map(lambda s: ("behind", s)),
)
#: Where a sequence starts: today, or near the epoch (times of a few seconds,
#: or below 0 after a few steps back), where every last bit of a result shows.
STARTS = st.sampled_from([T0, T0, 12.0, 1e6])
#: Sequences of any steps, or of steps that go a period on (a previous window
#: counted) and back over the boundary just passed (a late reading, or a clock
#: stepped back): a sliding window's weight above 1, its units moved.
WINDOW_OPS = st.one_of(
    st.lists(st.tuples(WINDOW_STEPS, WINDOW_COSTS), min_size=1, max_size=30),
    st.lists(
        st.tuples(
            st.sampled_from([("s", 0.0), ("p", 0.5), ("p", 1.0), ("behind", 0.3), ("behind", 1.5)]),
            WINDOW_COSTS,
        ),
        min_size=1,
        max_size=30,
    ),
)
#: What stands beside the window in one apply_many call: nothing, a bucket,
#: another window, a lockout last (small: denials and lockouts are frequent).
COMPANIONS = st.lists(
    st.one_of(
        st.builds(Limit, st.sampled_from([0.5, 3.0, 1000.0]), st.integers(1, 5)),
        WINDOWS,
    ),
    max_size=2,
)
MAYBE_LOCKOUTS = st.none() | st.builds(
    Lockout,
    breaches=st.integers(1, 4),
    within=st.sampled_from([0.5, 3.0, 30.0]),
    duration=st.sampled_from([0.4, 5.0, 100.0]),
)


def window_start(state: Optional[State], window: Any) -> Optional[float]:
    """The start of the window ``state`` counts in (``None``: no state)."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return state[2] - 2.0 * window.period
    return state.imag - window.period


def move_in_window(now: float, how: Any, window: Any, state: Optional[State]) -> float:
    """``now`` moved as a ``WINDOW_STEPS`` element says, ``window`` and its ``state`` the scale."""
    kind, *args = how
    period = window.period
    if kind == "s":
        return now + args[0]
    if kind == "p":
        return now + args[0] * period
    if kind == "edge":
        return (math.floor(now / period) + 1 + args[0]) * period + args[1]
    start = window_start(state, window)
    return now if start is None else start - args[0]


def resolve(cost: Any, now: float, policy: Any) -> Any:
    """A ``WINDOW_COSTS`` element as a cost: a tied Refund's taken_at from ``now``.

    Periods are ``policy``'s (a bucket's or a lockout's: seconds).
    """
    if not isinstance(cost, tuple):
        return cost
    tokens, base, offset = cost
    period = getattr(policy, "period", 1.0)
    moment = now if base == "now" else math.floor((now + TIME_EPSILON) / period) * period
    if isinstance(offset, tuple):
        return Refund(tokens, moment + offset[0] * period + offset[1])
    return Refund(tokens, moment + offset)


def same_shape(window: Any, count: int, period: float, anchor: str) -> Any:
    """Another window whose state is of ``window``'s shape (a deploy changed the policy)."""
    if window.kind == "sliding-window":
        return SlidingWindow(count, period)
    return FixedWindow(count, period, anchor)


#: The arguments of a test of one window over a sequence (``window_runs.window_sequence``).
given_a_window = given(
    window=WINDOWS,
    other=st.tuples(COUNTS, PERIODS, st.sampled_from(["epoch", "first"])),
    start=STARTS,
    ops=WINDOW_OPS,
    switches=st.lists(st.sampled_from([False, False, False, True]), min_size=30, max_size=30),
)
#: The arguments of a test of a window beside others (``window_runs.window_sequence_all``).
given_windows_and_others = given(
    window=WINDOWS,
    companions=COMPANIONS,
    lockout=MAYBE_LOCKOUTS,
    start=STARTS,
    ops=WINDOW_OPS,
    per_limit=st.lists(
        st.none() | st.lists(WINDOW_COSTS, min_size=4, max_size=4), min_size=30, max_size=30
    ),
)
