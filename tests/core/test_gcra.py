"""The token bucket is a GCRA (the generic cell rate algorithm of ATM, ITU-T I.371).

An independent GCRA, the textbook virtual-scheduling algorithm in exact
arithmetic (``Fraction``), admits exactly what ``limiter.core.bucket.step``
admits: emission interval ``T = 1 / rate``, delay tolerance
``tau = (burst - 1) * T``, and the theoretical arrival time ``TAT`` is the
bucket's ``updated_at + debt`` (``state.keep_until``).  The bucket's only
departure is rule 8's slack: it admits up to ``limit.slack`` seconds early
(a GCRA whose tolerance is ``tau + slack``).  docs/concepts.md, "GCRA".
"""

from __future__ import annotations

from fractions import Fraction
from typing import List, Optional, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from limiter import Limit
from limiter.core.bucket import step
from limiter.core.state import keep_until
from limiter.testing import T0


class GCRA:
    """Virtual scheduling: a cell arriving at ``t`` conforms unless ``TAT > t + tau``.

    A request of ``n`` cells (any real ``n >= 0``) conforms when its last
    cell would: ``max(TAT, t) + (n - 1) * T <= t + tau``; it then moves
    ``TAT`` to ``max(TAT, t) + n * T``.  A request that does not conform
    changes nothing.
    """

    def __init__(self, interval: Fraction, tolerance: Fraction) -> None:
        self.interval = interval
        self.tolerance = tolerance
        self.tat: Optional[Fraction] = None  # no cell yet

    def arrive(self, t: Fraction, n: Fraction = Fraction(1)) -> Tuple[bool, Fraction]:
        """``(conforms, retry)``: ``retry`` is when the same request would conform."""
        tat = t if self.tat is None or self.tat < t else self.tat
        earliest = tat + (n - 1) * self.interval - self.tolerance
        if earliest > t:
            return False, earliest - t
        if n > 0:
            self.tat = tat + n * self.interval
        return True, Fraction(0)


#: Rates whose emission intervals, with millisecond arrivals, keep every
#: exact difference from the conformance bound a multiple of 1/3000 s at
#: least: far beyond the bucket's microsecond of slack and float rounding.
RATES = st.sampled_from(
    [Fraction(1, 2), Fraction(1), Fraction(3), Fraction(10), Fraction(5, 3), Fraction(100)]
)
MILLISECONDS = st.integers(0, 3000)


def gcra_for(rate: Fraction, burst: int) -> GCRA:
    interval = 1 / rate
    return GCRA(interval, (burst - 1) * interval)


def moment(ms: int) -> Tuple[Fraction, float]:
    """The instant ``ms`` milliseconds after ``T0``, exact and as the float a clock reads."""
    exact = Fraction(T0) + Fraction(ms, 1000)
    return exact, float(exact)


@given(rate=RATES, burst=st.integers(1, 20), gaps=st.lists(MILLISECONDS, min_size=1, max_size=60))
def test_the_bucket_admits_what_the_gcra_admits_for_cost_1(
    rate: Fraction, burst: int, gaps: List[int]
) -> None:
    limit, gcra = Limit(float(rate), burst), gcra_for(rate, burst)
    state, ms = None, 0
    for gap in gaps:
        ms += gap
        exact, now = moment(ms)
        conforms, retry = gcra.arrive(exact)
        state, result = step(state, now, limit)
        assert result.allowed == conforms
        assert result.retry_after == pytest.approx(float(retry), abs=1e-6)
        assert gcra.tat is not None and state is not None
        # The state is the TAT: updated_at + debt.
        assert keep_until(state) == pytest.approx(float(gcra.tat), abs=1e-6)


COSTS = st.sampled_from([0, 1, 2, 3, Fraction(1, 2), Fraction(5, 2), 7]).map(Fraction)


@given(
    rate=RATES,
    burst=st.integers(1, 6),
    ops=st.lists(st.tuples(MILLISECONDS, COSTS), min_size=1, max_size=60),
)
def test_the_mapping_holds_for_any_cost(
    rate: Fraction, burst: int, ops: List[Tuple[int, Fraction]]
) -> None:
    # n cells at once, fractional n included, and n > burst never conforms
    # (its earliest instant lies ever ahead): the bucket's retry_after is inf.
    limit, gcra = Limit(float(rate), burst), gcra_for(rate, burst)
    state, ms = None, 0
    for gap, cost in ops:
        ms += gap
        exact, now = moment(ms)
        conforms, retry = gcra.arrive(exact, cost)
        state, result = step(state, now, limit, float(cost))
        assert result.allowed == conforms
        if cost > burst:
            assert result.retry_after == float("inf")
        else:
            assert result.retry_after == pytest.approx(float(retry), abs=1e-6)
        # What is left: the whole cells that would conform now, one by one.
        debt = max(gcra.tat - exact, Fraction(0)) if gcra.tat is not None else Fraction(0)
        assert result.remaining == int(burst - debt / gcra.interval)
        if debt:
            assert keep_until(state) == pytest.approx(float(gcra.tat), abs=1e-6)  # type: ignore[arg-type]


def test_the_slack_is_a_gcra_tolerance_larger_by_limit_slack() -> None:
    # One cell per second, no burst (tau = 0).  Half a microsecond early, the
    # exact GCRA refuses; the bucket admits (rule 8: waiting a retry_after
    # rounded at today's Unix time must get in), as a GCRA whose tolerance is
    # tau + slack does.  Two microseconds early, both refuse.
    limit = Limit(1, 1)
    assert limit.slack == 1e-6
    start = Fraction(1000)
    for early, bucket in ((Fraction(1, 2_000_000), True), (Fraction(2, 1_000_000), False)):
        exact, tolerant = GCRA(Fraction(1), Fraction(0)), GCRA(Fraction(1), Fraction(1, 10**6))
        state = None
        for gcra in (exact, tolerant):
            assert gcra.arrive(start)[0]
        state, _ = step(None, float(start), limit)
        t = start + 1 - early
        assert step(state, float(t), limit)[1].allowed is bucket
        assert (exact.arrive(t)[0], tolerant.arrive(t)[0]) == (False, bucket)
    # Above 1000 tokens/s the slack is a thousandth of a token's time, so it
    # never admits a token early by more than that.
    assert Limit(10_000, 5).slack == pytest.approx(1e-7)
