"""``StoreConformance``: the behaviour every store must show.

Private: ``limiter.testing`` loads it (with pytest and hypothesis) on first use.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterator, List

import pytest

from limiter.clock import ManualClock
from limiter.core.bucket import step
from limiter.core.concurrency import Concurrency
from limiter.core.costs import Charge, Hold, Refund
from limiter.core.limits import Limit
from limiter.core.lockout import Lockout
from limiter.core.quota import Quota
from limiter.core.result import RateLimitResult
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.ratelimiter import RateLimiter
from limiter.testing._shared import T0, property_test
from limiter.testing._slot_suite import SlotConformance
from limiter.testing._window_suite import WindowConformance


def _bucket_steps(st: Any) -> Dict[str, Any]:
    return {
        "rate": st.sampled_from([0.5, 1.0, 3.0, 10.0, 100 / 60]),
        "burst": st.integers(1, 20),
        "ops": st.lists(
            st.tuples(
                st.integers(-2000, 5000).map(lambda ms: ms / 1000),
                # Charges and refunds too: into debt (at most one burst owed) and back.
                st.sampled_from([0, 0.5, 1, 1, 1, 2, 3, 25, Charge(4), Charge(50), Refund(2)]),
            ),
            min_size=1,
            max_size=40,
        ),
    }


class StoreConformance(WindowConformance, SlotConformance):
    """Behaviour every store must show.  Subclass and define ``make_store``.

    The window policies' cases come from ``WindowConformance``, the
    ``Concurrency`` slots' from ``SlotConformance``.

    ``mode`` is ``"sync"`` (call ``apply``/``reset``) or ``"async"`` (await
    ``aapply``/``areset`` through ``run``).  ``threads`` is how many threads the
    concurrency test uses; set it to 0 for stores that are not thread-safe.
    """

    # -- hooks -------------------------------------------------------------

    def make_store(self) -> Any:
        """Return a new, empty store."""
        raise NotImplementedError("define make_store() in your test class")

    def close_store(self, store: Any) -> None:
        """Release what ``make_store`` acquired (connections, files)."""

    @pytest.fixture
    def store(self) -> Iterator[Any]:
        store = self.make_store()
        try:
            yield store
        finally:
            self.close_store(store)

    # -- the contract ------------------------------------------------------

    @property_test(_bucket_steps)
    def test_matches_the_pure_step(
        self, rate: float, burst: int, ops: List[Any], store: Any
    ) -> None:
        """The store computes exactly what ``limiter.core.bucket.step`` computes."""
        self.replay(store, "prop", Limit(rate, burst), ops)

    def test_new_key_starts_full_and_admits_exactly_burst(self, store: Any) -> None:
        limit = Limit(1, 5)
        results = [self.apply(store, "k", limit) for _ in range(7)]
        assert [r.allowed for r in results] == [True] * 5 + [False] * 2
        assert [r.remaining for r in results] == [4, 3, 2, 1, 0, 0, 0]
        assert all(r.limit == 5 for r in results)

    def test_refill_is_continuous_at_rate(self, store: Any) -> None:
        limit = Limit(2, 2)  # one token every 0.5 s
        assert self.apply(store, "k", limit, 2, T0).allowed
        assert not self.apply(store, "k", limit, 1, T0 + 0.4).allowed
        assert self.apply(store, "k", limit, 1, T0 + 0.5).allowed
        assert not self.apply(store, "k", limit, 1, T0 + 0.5).allowed
        result = self.apply(store, "k", limit, 0, T0 + 10)
        assert result.remaining == 2  # capped at burst, not 2 + 19

    def test_denied_request_takes_nothing_and_reports_exact_waits(self, store: Any) -> None:
        limit = Limit(10, 10)
        for _ in range(10):
            assert self.apply(store, "k", limit).allowed
        denied = self.apply(store, "k", limit, 3, T0 + 0.1)
        assert not denied.allowed
        assert denied.remaining == 1
        assert denied.retry_after == pytest.approx(0.2, abs=1e-6)
        assert denied.reset_after == pytest.approx(0.9, abs=1e-6)
        # The denial took nothing: exactly after retry_after, the 3 tokens are there.
        assert self.apply(store, "k", limit, 3, T0 + 0.3).allowed

    def test_allowed_result_fields(self, store: Any) -> None:
        result = self.apply(store, "k", Limit(4, 8), 2)
        assert (result.allowed, result.limit, result.remaining) == (True, 8, 6)
        assert (result.retry_after, result.window) == (0.0, 2.0)
        assert result.reset_after == pytest.approx(0.5, abs=1e-6)

    def test_cost_zero_is_a_peek(self, store: Any) -> None:
        limit = Limit(1, 3)
        peek = self.apply(store, "k", limit, 0)
        assert (peek.allowed, peek.remaining, peek.reset_after) == (True, 3, 0.0)
        assert self.apply(store, "k", limit, 2).allowed
        for _ in range(3):
            assert self.apply(store, "k", limit, 0).remaining == 1
        assert self.apply(store, "k", limit, 1).allowed
        assert not self.apply(store, "k", limit, 1).allowed

    def test_a_refund_gives_tokens_back_never_beyond_burst(self, store: Any) -> None:
        limit = Limit(1, 3)
        assert [self.apply(store, "k", limit, 1).remaining for _ in range(3)] == [2, 1, 0]
        refunded = self.apply(store, "k", limit, Refund(2))
        assert (refunded.allowed, refunded.remaining) == (True, 2)
        assert refunded.reset_after == pytest.approx(1.0, abs=1e-6)
        full = self.apply(store, "k", limit, Refund(100))
        assert (full.allowed, full.remaining, full.reset_after) == (True, 3, 0.0)
        assert [self.apply(store, "k", limit, 1).allowed for _ in range(4)] == [True] * 3 + [False]
        fresh = self.apply(store, "fresh", limit, Refund(1))
        assert fresh.remaining == 3  # a full bucket stays full

    def test_cost_above_burst_is_always_denied_and_takes_nothing(self, store: Any) -> None:
        limit = Limit(1, 3)
        result = self.apply(store, "k", limit, 4, T0 + 1e6)
        assert not result.allowed
        assert result.retry_after == math.inf
        assert result.remaining == 3
        assert self.apply(store, "k", limit, 3, T0 + 1e6).allowed

    def test_fractional_cost(self, store: Any) -> None:
        limit = Limit(1, 1)
        assert self.apply(store, "k", limit, 0.5).allowed
        assert self.apply(store, "k", limit, 0.5).allowed
        assert not self.apply(store, "k", limit, 0.5).allowed

    def test_bad_cost_is_a_value_error_and_keeps_state(self, store: Any) -> None:
        limit = Limit(1, 2)
        assert self.apply(store, "k", limit).allowed
        for bad in (-1, float("nan")):
            with pytest.raises(ValueError, match="cost"):
                self.apply(store, "k", limit, bad)
        assert self.apply(store, "k", limit, 0).remaining == 1

    def test_clock_going_backwards_grants_nothing_and_locks_no_one_out(self, store: Any) -> None:
        limit = Limit(1, 2)
        assert self.apply(store, "k", limit, 2, T0 + 100).allowed
        # The clock steps back an hour: no tokens appear ...
        assert not self.apply(store, "k", limit, 1, T0 - 3500).allowed
        # ... and the key is not locked out for an hour either: refill resumes
        # from the new reading.
        assert self.apply(store, "k", limit, 1, T0 - 3499).allowed
        assert not self.apply(store, "k", limit, 1, T0 - 3499).allowed

    def test_a_smaller_limit_never_shows_negative_tokens(self, store: Any) -> None:
        assert self.apply(store, "k", Limit(1, 10), 10).allowed
        shrunk = self.apply(store, "k", Limit(1, 2), 1, T0 + 0.5)
        # It owes at most one burst (2 tokens) under the new limit: 4 s of deficit.
        assert (shrunk.allowed, shrunk.remaining, shrunk.reset_after) == (False, 0, 4.0)
        assert not self.apply(store, "k", Limit(1, 2), 1, T0 + 3.4).allowed
        assert self.apply(store, "k", Limit(1, 2), 1, T0 + 3.5).allowed

    def test_large_forward_jump_refills_to_burst_only(self, store: Any) -> None:
        limit = Limit(1, 3)
        assert self.apply(store, "k", limit, 3).allowed
        result = self.apply(store, "k", limit, 0, T0 + 10 * 365 * 86400)
        assert result.remaining == 3
        later = [self.apply(store, "k", limit, 1, T0 + 1e8).allowed for _ in range(4)]
        assert later == [True, True, True, False]

    def test_reset_forgets_the_key(self, store: Any) -> None:
        limit = Limit(1, 1)
        assert self.apply(store, "k", limit).allowed
        assert not self.apply(store, "k", limit).allowed
        self.reset(store, "k")
        assert self.apply(store, "k", limit).allowed
        self.reset(store, "never-seen")  # no error

    def test_keys_are_independent_and_any_string_is_safe(self, store: Any) -> None:
        limit = Limit(1, 1)
        keys = ["a", "b", "{tag}", "}{", "line\nbreak", "ünïcødé ☃", " ", "", "x" * 10_000]
        for key in keys:
            assert self.apply(store, key, limit).allowed, key
        for key in keys:
            assert not self.apply(store, key, limit).allowed, key

    def test_store_time_when_now_is_none(self, store: Any) -> None:
        result = self.apply(store, "k", Limit(1, 2), 1, None)
        assert result.allowed and result.remaining == 1

    def test_several_limits_charge_all_or_none(self, store: Any) -> None:
        keys = ["k:fast", "k:slow"]
        limits = [Limit(10, 2), Limit(1, 3)]
        results = [self.apply_many(store, keys, limits) for _ in range(3)]
        assert [r.allowed for r in results] == [True, True, False]
        assert [r.remaining for r in results] == [1, 0, 0]
        assert [x.remaining for x in results[2].results] == [0, 1]
        assert results[2].retry_after == pytest.approx(0.1, abs=1e-6)
        # The denial took nothing from the slow limit: after 0.1 s the fast one
        # has a token and the slow one still has its last.
        assert self.apply_many(store, keys, limits, 1, T0 + 0.1).allowed
        denied = self.apply_many(store, keys, limits, 1, T0 + 0.3)
        assert not denied.allowed
        assert denied.limit == 3 and denied.retry_after == pytest.approx(0.7, abs=1e-6)
        assert [x.allowed for x in denied.results] == [True, False]
        assert self.apply(store, "k:fast", limits[0], 0, T0 + 0.3).remaining == 2

    def test_a_calendar_quota_counts_to_its_boundary_then_starts_afresh(self, store: Any) -> None:
        quota = Quota(3, per="day")  # UTC: T0 is 22:13:20, midnight 6400 s later
        results = [self.apply(store, "q", quota) for _ in range(4)]
        assert [r.allowed for r in results] == [True, True, True, False]
        assert [r.remaining for r in results] == [2, 1, 0, 0]
        assert results[3].retry_after == pytest.approx(6400, abs=1e-6)
        assert results[3].reset_after == pytest.approx(6400, abs=1e-6)
        assert self.apply(store, "q", quota, 1, T0 + 6400).remaining == 2  # the next day
        # Beside a token bucket, all or nothing: the bucket's refusal takes no unit.
        keys, limits = ["q:fast", "q:day"], [Limit(1, 1), quota]
        first, second = (self.apply_many(store, keys, limits) for _ in range(2))
        assert first.allowed and not second.allowed
        assert [x.remaining for x in second.results] == [0, 2]
        assert second.retry_after == pytest.approx(1, abs=1e-6)

    def test_per_limit_costs_are_charged_all_or_nothing(self, store: Any) -> None:
        keys = ["k:requests", "k:tokens"]
        limits = [Limit(1, 10, "requests"), Limit(100, 1000, "tokens")]
        results = [self.apply_many(store, keys, limits, (1, 350)) for _ in range(3)]
        assert [r.allowed for r in results] == [True, True, False]
        assert [[x.remaining for x in r.results] for r in results] == [[9, 650], [8, 300], [8, 300]]
        refused = results[2]
        assert refused.policy == "tokens"
        assert [x.policy for x in refused.results] == ["requests", "tokens"]
        assert [x.allowed for x in refused.results] == [True, False]  # a peek: nothing taken
        assert refused.retry_after == pytest.approx(0.5, abs=1e-6)  # 50 tokens at 100/s
        assert not self.apply_many(store, keys, limits, [1, 350], T0 + 0.49).allowed  # a list
        admitted = self.apply_many(store, keys, limits, [1, 350], T0 + 0.5)
        assert admitted.allowed and [x.remaining for x in admitted.results] == [7, 0]
        # 0 takes nothing from that limit; the other refuses on its own.
        by_requests = self.apply_many(store, keys, limits, (8, 0), T0 + 0.5)
        assert (by_requests.allowed, by_requests.policy) == (False, "requests")
        assert by_requests.retry_after == pytest.approx(0.5, abs=1e-6)
        assert self.apply_many(store, keys, limits, (7, 0), T0 + 0.5).allowed
        peeks = [self.apply(store, k, lim, 0, T0 + 0.5) for k, lim in zip(keys, limits)]
        assert [peek.remaining for peek in peeks] == [0, 0]

    def test_bad_per_limit_costs_are_a_value_error_and_change_nothing(self, store: Any) -> None:
        keys = ["k:a", "k:b"]
        limits = [Limit(1, 5), Limit(1, 10)]
        assert self.apply_many(store, keys, limits, (1, 2)).allowed
        for bad in ((1, 2, 3), [1], (), (1, -1), [float("nan"), 1]):
            with pytest.raises(ValueError, match="cost"):
                self.apply_many(store, keys, limits, bad)
        peek = self.apply_many(store, keys, limits, 0)
        assert [x.remaining for x in peek.results] == [4, 8]

    def test_a_charge_goes_into_debt_then_the_exact_wait(self, store: Any) -> None:
        limit = Limit(2, 4)  # a window of 2 s
        charged = self.apply(store, "k", limit, Charge(6))  # 2 tokens owed: 3 s of deficit
        assert (charged.allowed, charged.remaining, charged.retry_after) == (True, 0, 0.0)
        assert charged.reset_after == pytest.approx(3.0, abs=1e-6)
        denied = self.apply(store, "k", limit, 1)
        assert (denied.allowed, denied.remaining) == (False, 0)
        assert denied.retry_after == pytest.approx(1.5, abs=1e-6)
        assert not self.apply(store, "k", limit, 1, T0 + 1.49).allowed
        assert self.apply(store, "k", limit, 1, T0 + 1.5).allowed
        # At most one burst owed (Limit.max_debt, 4 s), however large the charge.
        most = self.apply(store, "k", limit, Charge(10**400), T0 + 1.5)
        assert most.allowed and most.reset_after == pytest.approx(4.0, abs=1e-6)
        assert not self.apply(store, "k", limit, 1, T0 + 3.99).allowed
        assert self.apply(store, "k", limit, 1, T0 + 4.0).allowed

    def test_a_refund_repays_debt(self, store: Any) -> None:
        limit = Limit(2, 4)
        assert self.apply(store, "k", limit, Charge(6)).allowed  # 2 tokens owed
        assert not self.apply(store, "k", limit, 1).allowed
        repaid = self.apply(store, "k", limit, Refund(4))  # 2 tokens in the bucket again
        assert (repaid.allowed, repaid.remaining) == (True, 2)
        assert repaid.reset_after == pytest.approx(1.0, abs=1e-6)
        assert [self.apply(store, "k", limit, 1).allowed for _ in range(3)] == [True, True, False]

    def test_a_refund_goes_only_to_the_window_that_took_the_units(self, store: Any) -> None:
        # Two checks of 50 at 23:59:58 UTC (T0 is 22:13:20, midnight 6400 s
        # later), the new day's 100 units, then the two refunds: nothing back.
        midnight = T0 + 6400
        clock = ManualClock(midnight - 2)
        limiter = RateLimiter(Quota(100, "day"), store=store, clock=clock)

        def call(method: str, *args: Any, **kwargs: Any) -> RateLimitResult:
            return self.call(limiter, method, *args, **kwargs)  # type: ignore[no-any-return]

        taken = clock.now()
        assert [call("check", "u", 50).allowed for _ in range(2)] == [True, True]
        clock.advance(3)  # 00:00:01, the next day
        assert call("check", "u", 100).allowed
        for _ in range(2):
            refunded = call("refund", "u", 50, taken_at=taken)
            assert (refunded.allowed, refunded.remaining) == (True, 0)
        assert not call("check", "u", 1).allowed
        # A refund taken in the current window gives its units back.
        assert call("refund", "u", 30, taken_at=clock.now()).remaining == 30
        assert [call("check", "u", 30).allowed, call("check", "u", 1).allowed] == [True, False]
        # The pure step says the same of a Refund tied to the day before.
        state = step(None, midnight - 2, Quota(100, "day"), 100)[0]
        after = step(state, midnight + 1, Quota(100, "day"), 100)[0]
        assert step(after, midnight + 1, Quota(100, "day"), Refund(50, midnight - 2))[0] == after

    def test_a_lockout_locks_out_after_n_denials_until_its_end(self, store: Any) -> None:
        keys = ["k:bucket", "k:lock"]
        limits = [Limit(1, 2, "bucket"), Lockout(breaches=3, within=60, duration=900)]
        results = [self.apply_many(store, keys, limits) for _ in range(5)]
        assert [r.allowed for r in results] == [True, True, False, False, False]
        assert [r.locked_out for r in results] == [False] * 4 + [True]
        locked = results[4]  # the third denial (breach) is the lockout already
        assert (locked.policy, locked.limit, locked.window) == ("lockout", 2, 2.0)
        assert locked.retry_after == pytest.approx(900, abs=1e-6)
        assert [x.policy for x in locked.results] == ["bucket", "lockout"]
        # Refused however full the bucket, peeking it (nothing taken), and the
        # refusals are no breaches: the lockout is not extended.
        for t in (100, 100, 500, 899.99):
            refused = self.apply_many(store, keys, limits, 1, T0 + t)
            assert (refused.allowed, refused.locked_out) == (False, True), t
            assert refused.retry_after == pytest.approx(900 - t, abs=1e-6)
            assert [(x.allowed, x.remaining) for x in refused.results] == [(True, 2), (False, 0)]
        assert self.apply(store, "k:bucket", limits[0], 0, T0 + 899.99).remaining == 2
        # It ends at duration, and the key starts afresh (no breaches).
        admitted = self.apply_many(store, keys, limits, 2, T0 + 900)
        assert (admitted.allowed, admitted.locked_out, admitted.policy) == (True, False, "bucket")
        assert len(admitted.results) == 1  # a lockout that does not refuse is left out
        after = [self.apply_many(store, keys, limits, 1, T0 + 900).locked_out for _ in range(3)]
        assert after == [False, False, True]

    def test_a_lockout_is_lifted_by_a_reset_of_its_key(self, store: Any) -> None:
        keys = ["k:bucket", "k:lock"]
        limits = [Limit(1, 1), Lockout(breaches=2, within=10, duration=60)]
        locked = [self.apply_many(store, keys, limits).locked_out for _ in range(3)]
        assert locked == [False, False, True]
        assert self.apply_many(store, keys, limits, 1, T0 + 30).locked_out
        self.reset(store, "k:lock")
        lifted = self.apply_many(store, keys, limits, 1, T0 + 30)
        assert (lifted.allowed, lifted.locked_out) == (True, False)

    def test_a_key_another_kind_of_policy_wrote_starts_afresh(self, store: Any) -> None:
        """A state of another shape reads as a new key's (``limiter.core.state``): same answers."""
        # A state's shape: a bucket's, a window's or a quota's two numbers, a
        # sliding window's three, or leases.
        writers = [(Limit(1, 5), 1), (SlidingWindow(5, 60), 2), (Concurrency(2), Hold(9.0))]
        readers = [
            Limit(1, 3),
            FixedWindow(3, 60),
            FixedWindow(3, 60, "first"),
            Quota(3, "hour"),
            SlidingWindow(3, 60),
            Concurrency(3),
        ]

        def shape(policy: Any) -> str:
            return {"sliding-window": "three", "concurrency": "leases"}.get(policy.kind, "two")

        def run(key: str, policy: Any) -> List[RateLimitResult]:
            costs = [Hold(float(h)) if shape(policy) == "leases" else 1 for h in range(1, 5)]
            return [self.apply(store, key, policy, cost, T0 + 1) for cost in costs]

        for w, (writer, cost) in enumerate(writers):
            for r, reader in enumerate(readers):
                if shape(reader) != shape(writer):
                    self.apply(store, f"k{w}:{r}", writer, cost)
                    seen = run(f"k{w}:{r}", reader)
                    assert seen == run(f"new{w}:{r}", reader), (writer, reader)
                    assert [x.allowed for x in seen] == [True] * 3 + [False], (writer, reader)
        # Beside other keys too (one call: Redis's and PostgreSQL's other path).
        self.apply(store, "m:a", Limit(1, 5))
        self.apply(store, "m:b", Concurrency(2), Hold(9.0))
        limits = [SlidingWindow(3, 60), Limit(1, 3)]
        seen = [self.apply_many(store, ["m:a", "m:b"], limits) for _ in range(4)]
        assert seen == [self.apply_many(store, ["n:a", "n:b"], limits) for _ in range(4)]
        assert [x.allowed for x in seen] == [True] * 3 + [False]

    def test_concurrent_checks_admit_exactly_burst(self, store: Any) -> None:
        assert self.flood(store, [("hot", Limit(1, 50))] * 200) == 50
