"""``WindowConformance``: the window policies on a store, cases ``StoreConformance``
inherits (private: import the suites from ``limiter.testing``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List

import pytest

from limiter.core.costs import Charge, Refund
from limiter.core.limits import Limit
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing._shared import T0, StoreDriver, property_test

# T0 is 20 s into a minute (the 60 s windows start at T0 - 20) and on a
# boundary of 10 s windows.


def _window_steps(st: Any) -> Dict[str, Any]:
    periods = st.sampled_from([0.5, 1.0, 7.5, 60.0])
    costs = st.sampled_from(
        [0, 1, 1, 1, 2, 0.5, 3, 13, Charge(2), Charge(40), Refund(1), "refund-taken"]
    )
    return {
        "policy": st.one_of(
            st.builds(FixedWindow, st.integers(1, 8), periods, st.sampled_from(["epoch", "first"])),
            st.builds(SlidingWindow, st.integers(1, 8), periods),
        ),
        # Steps in periods: forwards, and back (within and beyond the clock tolerance).
        "ops": st.lists(st.tuples(st.floats(-3.0, 2.5), costs), min_size=1, max_size=30),
    }


class WindowConformance(StoreDriver):
    """The window cases of ``StoreConformance`` (which defines the ``store`` fixture)."""

    @property_test(_window_steps)
    def test_windows_match_the_pure_step(self, policy: Any, ops: List[Any], store: Any) -> None:
        """The store computes what ``step`` computes for a window, clock steps back included."""

        def taken_a_period_ago(now: float) -> Refund:  # maybe the previous window's units
            return Refund(1, taken_at=now - policy.period)

        steps = [
            (on * policy.period, taken_a_period_ago if cost == "refund-taken" else cost)
            for on, cost in ops
        ]
        self.replay(store, "window-prop", policy, steps)

    def test_a_fixed_window_admits_its_count_in_each_window(self, store: Any) -> None:
        fixed = FixedWindow(3, 60)
        results = [self.apply(store, "w", fixed) for _ in range(4)]
        assert [r.allowed for r in results] == [True, True, True, False]
        assert [r.remaining for r in results] == [2, 1, 0, 0]
        assert all((r.limit, r.window, r.kind) == (3, 60.0, "fixed-window") for r in results)
        denied = results[3]  # the window ends at T0 + 40, with the clock minute
        assert denied.retry_after == pytest.approx(40, abs=1e-6)
        assert denied.reset_after == pytest.approx(40, abs=1e-6)
        assert not self.apply(store, "w", fixed, 1, T0 + 39.99).allowed
        fresh = self.apply(store, "w", fixed, 1, T0 + 40)
        assert (fresh.allowed, fresh.remaining) == (True, 2)
        # anchor="first": the key's window starts at its first request.
        first = FixedWindow(2, 10, anchor="first")
        opened = [self.apply(store, "f", first, 1, T0 + t) for t in (3, 12.5, 12.9, 13)]
        assert [r.allowed for r in opened] == [True, True, False, True]
        assert [r.reset_after for r in opened] == pytest.approx([10, 0.5, 0.1, 10], abs=1e-6)

    def test_a_window_denial_takes_nothing_and_its_waits_are_exact(self, store: Any) -> None:
        fixed = FixedWindow(5, 10)  # T0 starts a window
        assert self.apply(store, "w", fixed, 4).remaining == 1
        denied = self.apply(store, "w", fixed, 2, T0 + 2.5)
        assert (denied.allowed, denied.remaining) == (False, 1)
        assert denied.retry_after == pytest.approx(7.5, abs=1e-6)
        assert self.apply(store, "w", fixed, 1, T0 + 2.5).allowed  # the denial took nothing
        assert not self.apply(store, "w", fixed, 0.5, T0 + 9.99).allowed
        assert self.apply(store, "w", fixed, 5, T0 + 2.5 + denied.retry_after).allowed
        for policy in (fixed, SlidingWindow(5, 10)):
            too_big = self.apply(store, "big", policy, 6, T0 + 20)
            assert (too_big.allowed, too_big.retry_after) == (False, math.inf)
            peek = self.apply(store, "big", policy, 0, T0 + 20)
            assert (peek.allowed, peek.remaining) == (True, 5)

    def test_a_sliding_window_weighs_the_previous_window_across_a_boundary(
        self, store: Any
    ) -> None:
        sliding = SlidingWindow(10, 60)
        assert all(self.apply(store, "s", sliding, 1, T0 + 10).allowed for _ in range(10))
        # 35 s into the next window, the previous one weighs 45/60: an estimate
        # of 7.5, rounded down, leaves room for 3.
        results = [self.apply(store, "s", sliding, 1, T0 + 55) for _ in range(4)]
        assert [r.allowed for r in results] == [True, True, True, False]
        assert [r.remaining for r in results] == [2, 1, 0, 0]
        denied = results[3]
        assert (denied.limit, denied.window, denied.kind) == (10, 60.0, "sliding-window")
        assert denied.retry_after == pytest.approx(3.0, abs=1e-6)
        assert denied.reset_after == pytest.approx(105.0, abs=1e-6)
        assert not self.apply(store, "s", sliding, 1, T0 + 57.99).allowed
        assert self.apply(store, "s", sliding, 1, T0 + 55 + denied.retry_after).allowed
        gone = self.apply(store, "s", sliding, 0, T0 + 160)  # two windows on: nothing counts
        assert (gone.remaining, gone.reset_after) == (10, 0.0)

    def test_window_refunds_and_charges(self, store: Any) -> None:
        fixed = FixedWindow(3, 60)
        charged = self.apply(store, "c", fixed, Charge(100))  # up to twice the count
        assert (charged.allowed, charged.remaining) == (True, 0)
        assert self.apply(store, "c", fixed, Refund(3)).remaining == 0  # 3 still used
        assert self.apply(store, "c", fixed, Refund(1)).remaining == 1
        assert self.apply(store, "c", fixed, 1, T0 + 40).remaining == 2  # a new window
        # A refund goes only to the window that took the units.
        assert self.apply(store, "c", fixed, Refund(1, taken_at=T0), T0 + 41).remaining == 2
        assert self.apply(store, "c", fixed, Refund(1, taken_at=T0 + 40), T0 + 41).remaining == 3
        sliding = SlidingWindow(10, 60)
        assert self.apply(store, "r", sliding, 8, T0 + 10).allowed
        assert self.apply(store, "r", sliding, 2, T0 + 69).remaining == 4  # 8 * 31/60 + 2
        # Taken in the previous window: that window gets them back (4 * 31/60 + 2).
        back = self.apply(store, "r", sliding, Refund(4, taken_at=T0 + 10), T0 + 69)
        assert back.remaining == 6
        back = self.apply(store, "r", sliding, Refund(5, taken_at=T0 + 69), T0 + 69)
        assert back.remaining == 8
        back = self.apply(store, "r", sliding, Refund(1, taken_at=T0 - 30), T0 + 69)
        assert back.remaining == 8  # two windows back: forgiven already

    def test_several_window_policies_admit_all_or_nothing(self, store: Any) -> None:
        keys = ["m:fixed", "m:sliding", "m:bucket"]
        limits = [
            FixedWindow(3, 60, name="fixed"),
            SlidingWindow(2, 60, name="sliding"),
            Limit(1, 5, "bucket"),
        ]
        results = [self.apply_many(store, keys, limits) for _ in range(3)]
        assert [r.allowed for r in results] == [True, True, False]
        denied = results[2]
        assert denied.policy == "sliding" and [x.remaining for x in denied.results] == [1, 0, 3]
        assert [x.allowed for x in denied.results] == [True, False, True]  # peeks
        assert denied.retry_after == pytest.approx(40, abs=1e-6)
        refused = self.apply_many(store, keys, limits, (2, 0, 1))
        assert (refused.allowed, refused.policy) == (False, "fixed")
        assert [x.remaining for x in refused.results] == [1, 0, 3]
        admitted = self.apply_many(store, keys, limits, (1, 0, 1))
        assert admitted.allowed and [x.remaining for x in admitted.results] == [0, 0, 2]
        # The next minute: the fixed window is fresh; the sliding one's previous
        # window weighs just under 1 (read a microsecond on), so 2 * weight
        # rounds down to 1 and one more passes; the bucket refilled.
        later = self.apply_many(store, keys, limits, 1, T0 + 40)
        assert later.allowed and [x.remaining for x in later.results] == [2, 0, 4]

    def test_concurrent_checks_admit_exactly_a_window_count(self, store: Any) -> None:
        policies = [FixedWindow(30, 3600), SlidingWindow(20, 3600)]
        checks = [(f"hot-{i}", p) for _ in range(20) for i, p in enumerate(policies)]
        assert self.flood(store, checks) == 50
        peeks = [self.apply(store, f"hot-{i}", p, 0) for i, p in enumerate(policies)]
        assert [peek.remaining for peek in peeks] == [0, 0]
