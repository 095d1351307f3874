"""The conformance suites behind ``limiter.testing``: ``StoreConformance``, ``AdapterConformance``.

Private: import them from ``limiter.testing``.  They live apart so that the
pytest plugin (``limiter.testing``, loaded by every pytest run wherever
tokenlimiter is installed) stays tiny; this module, pytest's helpers and
hypothesis load only when a test suite uses one of the suites.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
from typing import (
    Any,
    Coroutine,
    Dict,
    Iterable,
    Iterator,
    List,
    NamedTuple,
    NoReturn,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
)

import pytest

from limiter.adapters import DENIED_BODY, UNAVAILABLE_BODY, RequestInfo, Response
from limiter.clock import ManualClock
from limiter.core.bucket import step
from limiter.core.costs import Charge, Cost, Refund
from limiter.core.limits import Limit, Policy
from limiter.core.lockout import Lockout
from limiter.core.quota import Quota
from limiter.core.result import RateLimitResult
from limiter.events import DecisionEvent
from limiter.http.keys import header_key
from limiter.http.rules import Rule
from limiter.ratelimiter import RateLimiter
from limiter.store import StoreError

#: The suites' start time, equal to ``limiter.testing.T0`` (a test checks it):
#: defined here too so that this module does not import the plugin that loads it.
T0 = 1_700_000_000.0

__all__ = ["AdapterConformance", "StoreConformance"]

T = TypeVar("T")


_keys = itertools.count()  # a fresh key per property-test example


def _property_test() -> Any:
    # hypothesis is a test dependency, not a runtime one: the suite must load without it.
    try:
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st
    except ImportError:  # pragma: no cover

        def needs_hypothesis(self: Any) -> None:
            pytest.skip("install hypothesis to run the property test")

        return needs_hypothesis

    @settings(
        max_examples=60,
        deadline=None,
        # One test function serves every subclass (one executor per store);
        # each example uses its own key, so the shared fixture is harmless.
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        rate=st.sampled_from([0.5, 1.0, 3.0, 10.0, 100 / 60]),
        burst=st.integers(1, 20),
        ops=st.lists(
            st.tuples(
                st.integers(-2000, 5000).map(lambda ms: ms / 1000),
                # Charges and refunds too: into debt (at most one burst owed) and back.
                st.sampled_from([0, 0.5, 1, 1, 1, 2, 3, 25, Charge(4), Charge(50), Refund(2)]),
            ),
            min_size=1,
            max_size=40,
        ),
    )
    def test_matches_the_pure_step(
        self: Any, rate: float, burst: int, ops: List[Any], store: Any
    ) -> None:
        """The store computes exactly what ``limiter.core.bucket.step`` computes."""
        limit = Limit(rate, burst)
        key = f"prop-{next(_keys)}"
        state = None
        now = T0
        for dt, cost in ops:
            now += dt
            state, expected = step(state, now, limit, cost)
            got = self.apply(store, key, limit, cost, now)
            assert (got.allowed, got.limit, got.remaining) == (
                expected.allowed,
                expected.limit,
                expected.remaining,
            )
            assert got.reset_after == pytest.approx(expected.reset_after, abs=1e-5)
            assert got.retry_after == pytest.approx(expected.retry_after, abs=1e-5)
        self.reset(store, key)

    return test_matches_the_pure_step


class StoreConformance:
    """Behaviour every store must show.  Subclass and define ``make_store``.

    ``mode`` is ``"sync"`` (call ``apply``/``reset``) or ``"async"`` (await
    ``aapply``/``areset`` through ``run``).  ``threads`` is how many threads the
    concurrency test uses; set it to 0 for stores that are not thread-safe.
    """

    mode = "sync"
    threads = 16

    # -- hooks -------------------------------------------------------------

    def make_store(self) -> Any:
        """Return a new, empty store."""
        raise NotImplementedError("define make_store() in your test class")

    def close_store(self, store: Any) -> None:
        """Release what ``make_store`` acquired (connections, files)."""

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine to completion (async mode)."""
        return asyncio.run(coro)

    # -- plumbing ----------------------------------------------------------

    def apply(
        self, store: Any, key: str, limit: Any, cost: float = 1, now: Optional[float] = T0
    ) -> RateLimitResult:
        if self.mode == "async":
            result: RateLimitResult = self.run(store.aapply(key, limit, cost, now))
            return result
        result = store.apply(key, limit, cost, now)
        return result

    def apply_many(
        self,
        store: Any,
        keys: List[str],
        limits: Sequence[Any],
        cost: Cost = 1,
        now: Optional[float] = T0,
    ) -> RateLimitResult:
        if self.mode == "async":
            result: RateLimitResult = self.run(store.aapply_many(keys, limits, cost, now))
            return result
        result = store.apply_many(keys, limits, cost, now)
        return result

    def reset(self, store: Any, key: str) -> None:
        if self.mode == "async":
            self.run(store.areset(key))
        else:
            store.reset(key)

    @pytest.fixture
    def store(self) -> Iterator[Any]:
        store = self.make_store()
        try:
            yield store
        finally:
            self.close_store(store)

    # -- the contract ------------------------------------------------------

    test_matches_the_pure_step = _property_test()

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
        assert (
            self.apply(store, "fresh", limit, Refund(1)).remaining == 3
        )  # a full bucket stays full

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
        assert [self.apply(store, "k", limit, 1, T0 + 1e8).allowed for _ in range(4)] == [
            True,
            True,
            True,
            False,
        ]

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
        assert refused.policy == "tokens" and [x.policy for x in refused.results] == [
            "requests",
            "tokens",
        ]
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
        assert [
            self.apply(store, k, lim, 0, T0 + 0.5).remaining for k, lim in zip(keys, limits)
        ] == [
            0,
            0,
        ]

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
            if self.mode == "async":
                result: RateLimitResult = self.run(getattr(limiter, "a" + method)(*args, **kwargs))
                return result
            return getattr(limiter, method)(*args, **kwargs)  # type: ignore[no-any-return]

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
        assert [self.apply_many(store, keys, limits).locked_out for _ in range(3)] == [
            False,
            False,
            True,
        ]
        assert self.apply_many(store, keys, limits, 1, T0 + 30).locked_out
        self.reset(store, "k:lock")
        lifted = self.apply_many(store, keys, limits, 1, T0 + 30)
        assert (lifted.allowed, lifted.locked_out) == (True, False)

    def test_concurrent_checks_admit_exactly_burst(self, store: Any) -> None:
        limit = Limit(1, 50)
        if self.mode == "async":

            async def flood() -> int:
                calls = [store.aapply("hot", limit, 1, T0) for _ in range(1000)]
                return sum(r.allowed for r in await asyncio.gather(*calls))

            assert self.run(flood()) == 50
            return
        if self.threads == 0:
            pytest.skip("this store is documented as not thread-safe")
        admitted: List[int] = []
        barrier = threading.Barrier(self.threads)

        def worker() -> None:
            barrier.wait()
            admitted.append(sum(self.apply(store, "hot", limit).allowed for _ in range(200)))

        threads = [threading.Thread(target=worker) for _ in range(self.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(admitted) == 50


# -- adapters ------------------------------------------------------------------


class AdapterReply(NamedTuple):
    """What ``AdapterConformance.request`` returns (a plain 3-tuple does too)."""

    status: int
    headers: List[Tuple[str, str]]  # as received, in order, repeats kept
    body: bytes


class AdapterBug(Exception):
    """Raised by the suite's own callables: it must leave the adapter, never be swallowed."""


def _fail(*args: object) -> NoReturn:
    raise AdapterBug("bug in a callable the app gave the adapter")


class _DownStore:
    """A store whose backend is down: every call, sync or async, raises ``StoreError``."""

    def _down(self) -> NoReturn:
        raise StoreError("connection refused (AdapterConformance's store is down)")

    def apply(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> NoReturn:
        self._down()

    def apply_many(
        self, keys: List[str], limits: Sequence[Any], cost: float, now: Optional[float]
    ) -> NoReturn:
        self._down()

    def reset(self, key: str) -> NoReturn:
        self._down()

    async def aapply(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> NoReturn:
        self._down()

    async def aapply_many(
        self, keys: List[str], limits: Sequence[Any], cost: float, now: Optional[float]
    ) -> NoReturn:
        self._down()

    async def areset(self, key: str) -> NoReturn:
        self._down()


class _BuggyStore(_DownStore):
    """A store with a bug (not an outage): its error is not a ``StoreError``."""

    def _down(self) -> NoReturn:
        raise AdapterBug("bug in the store")


#: The headers the adapters add, in the order they add them.
RATE_LIMIT_HEADERS = (
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "Retry-After",
    "RateLimit-Policy",
    "RateLimit",
)
_JSON = ("Content-Type", "application/json")


class AdapterConformance:
    """Behaviour every web adapter must show.  Subclass; define ``make_app`` and ``request``.

    The suite builds limiters on ``self.clock``, a ``ManualClock`` at
    ``limiter.testing.T0`` (so header values are exact), wraps the app with
    ``make_app(limiter, **options)`` (the options of ``limiter.adapters``:
    ``key_func``, ``trusted_proxies``, ``proxy_header``, ``header_style``,
    ``exempt``, ``on_error``, ``cost``, ``on_limited``, ``rules``) and sends
    requests with ``request``.  Each app is closed (``close_app``) after its test.

    ``limiter`` may also be a function of the request returning the limiter
    (a plan chosen per request); pass it to the adapter as it is.

    ``client_peer`` is the address requests come from; ``proxy_peer`` is the
    trusted reverse proxy of the ``proxy_header`` test.  A driver whose client
    cannot choose its address (a real socket on loopback) sets both to that
    address.  Set ``fold_header_case`` if the client lowercases header names,
    and ``awaits`` if the adapter runs on asyncio: ``async def`` key, cost,
    exempt and limiter functions are then tested too.  Set
    ``takes_rate_strings`` if a limiter function may return a rate string
    (the framework integrations).
    """

    client_peer = "203.0.113.7"
    proxy_peer = "10.0.0.1"
    fold_header_case = False
    awaits = False
    takes_rate_strings = False

    clock: ManualClock

    # -- hooks -------------------------------------------------------------

    def make_app(self, limiter: Any, **options: Any) -> Any:
        """The adapter under test with ``options``, around an app that answers
        every request ``200`` with the header ``X-App: 1`` and the body
        ``b"hello"`` (no body for ``HEAD``), except a path ``/status/<code>``:
        answered with that status code (same header and body)."""
        raise NotImplementedError("define make_app(limiter, **options) in your test class")

    def request(
        self,
        app: Any,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> Tuple[int, Sequence[Tuple[str, str]], bytes]:
        """Send one request through ``app`` from ``peer`` (``None``: ``client_peer``).

        Return ``(status, headers, body)``: the status code as an ``int``, the
        response headers as ``(name, value)`` pairs in the order received.
        """
        raise NotImplementedError("define request(app, method, path, headers, peer)")

    def close_app(self, app: Any) -> None:
        """Release what ``make_app`` acquired (a server, its thread)."""

    def expect_error(self, app: Any, error: Type[BaseException]) -> None:
        """Send a request whose handling raises ``error`` inside the adapter.

        The exception must leave the adapter as one from the app would: no
        rate-limit answer, no fail-open ``200``.  By default ``request`` must
        raise it; a driver on a real server (which answers 500 or drops the
        connection) overrides this to check what its server did.
        """
        with pytest.raises(error):
            self.request(app)

    # -- plumbing ----------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _adapter_conformance_apps(self) -> Iterator[None]:
        self.clock = ManualClock(T0)
        self._apps: List[Any] = []
        try:
            yield
        finally:
            for app in self._apps:
                self.close_app(app)

    def limiter(self, rate: str = "3/second", **kwargs: Any) -> RateLimiter:
        """A ``RateLimiter`` on ``self.clock``."""
        return RateLimiter(rate, clock=self.clock, **kwargs)

    def app(self, limiter: Any, **options: Any) -> Any:
        """``make_app``, closed after the test."""
        app = self.make_app(limiter, **options)
        self._apps.append(app)
        return app

    def send(
        self,
        app: Any,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> AdapterReply:
        status, got, body = self.request(app, method, path, headers, peer)
        return AdapterReply(status, list(got), body)

    def named(self, headers: Iterable[Tuple[str, str]], *names: str) -> List[Tuple[str, str]]:
        """The pairs of ``headers`` called one of ``names`` (default: the rate-limit ones)."""
        wanted = names or RATE_LIMIT_HEADERS
        if self.fold_header_case:
            folded = {n.lower() for n in wanted}
            return [(k.lower(), v) for k, v in headers if k.lower() in folded]
        return [(k, v) for k, v in headers if k in wanted]

    def expected(self, *pairs: Tuple[str, str]) -> List[Tuple[str, str]]:
        if self.fold_header_case:
            return [(k.lower(), v) for k, v in pairs]
        return list(pairs)

    def x_headers(self, limit: int, remaining: int, reset_in: int) -> List[Tuple[str, str]]:
        """The ``X-RateLimit-*`` headers; the bucket is full again ``reset_in`` s after T0."""
        return self.expected(
            ("X-RateLimit-Limit", str(limit)),
            ("X-RateLimit-Remaining", str(remaining)),
            ("X-RateLimit-Reset", str(int(T0) + reset_in)),
        )

    # -- the contract ------------------------------------------------------

    def test_admits_exactly_burst_then_429_with_the_exact_response(self) -> None:
        app = self.app(self.limiter("3/second"))
        for remaining in (2, 1, 0):
            status, headers, body = self.send(app)
            assert (status, body) == (200, b"hello")
            assert self.named(headers) == self.x_headers(3, remaining, 1)
        status, headers, body = self.send(app)
        assert (status, body) == (429, DENIED_BODY)
        assert self.named(headers, *RATE_LIMIT_HEADERS, *_JSON[:1], "Content-Length") == [
            *self.x_headers(3, 0, 1),
            *self.expected(("Retry-After", "1"), _JSON, ("Content-Length", str(len(DENIED_BODY)))),
        ]
        assert self.named(headers, "X-App") == []  # the app never saw it

    def test_headers_on_success_keep_the_apps_own(self) -> None:
        status, headers, body = self.send(self.app(self.limiter("3/second")))
        assert (status, body) == (200, b"hello")
        assert self.named(headers, "X-App") == self.expected(("X-App", "1"))
        assert self.named(headers) == self.x_headers(3, 2, 1)

    def test_head_429_has_the_headers_and_no_body(self) -> None:
        app = self.app(self.limiter("1/second"))
        assert self.send(app, "HEAD")[0] == 200
        status, headers, body = self.send(app, "HEAD")
        assert (status, body) == (429, b"")
        assert self.named(headers) == [
            *self.x_headers(1, 0, 1),
            *self.expected(("Retry-After", "1")),
        ]

    def test_time_refills_the_bucket(self) -> None:
        app = self.app(self.limiter("2/second"))
        assert [self.send(app).status for _ in range(3)] == [200, 200, 429]
        self.clock.advance(0.5)  # one token
        assert [self.send(app).status for _ in range(2)] == [200, 429]

    def test_draft_headers(self) -> None:
        app = self.app(self.limiter("2/second"), header_style="draft")
        assert self.named(self.send(app).headers) == self.expected(
            ("RateLimit-Policy", '"2/second";q=2;w=1'), ("RateLimit", '"2/second";r=1;t=1')
        )
        self.send(app)
        status, headers, _ = self.send(app)
        assert status == 429
        assert self.named(headers) == self.expected(
            ("RateLimit-Policy", '"2/second";q=2;w=1'),
            ("RateLimit", '"2/second";r=0;t=1'),
            ("Retry-After", "1"),
        )

    def test_both_header_styles(self) -> None:
        app = self.app(self.limiter("2/second"), header_style="both")
        assert self.named(self.send(app).headers) == [
            *self.x_headers(2, 1, 1),
            *self.expected(
                ("RateLimit-Policy", '"2/second";q=2;w=1'), ("RateLimit", '"2/second";r=1;t=1')
            ),
        ]

    def test_exempt_requests_pass_without_headers_and_are_not_counted(self) -> None:
        app = self.app(self.limiter("1/second"), exempt=lambda r: r.path == "/health")
        for _ in range(3):
            status, headers, body = self.send(app, path="/health")
            assert (status, body, self.named(headers)) == (200, b"hello", [])
        assert self.send(app).status == 200  # the bucket is still full
        assert self.send(app, path="/health").status == 200
        assert self.send(app).status == 429

    def test_fixed_cost(self) -> None:
        app = self.app(self.limiter("10/second"), cost=4)
        replies = [self.send(app) for _ in range(3)]
        assert [r.status for r in replies] == [200, 200, 429]
        assert self.named(replies[1].headers, "X-RateLimit-Remaining") == self.expected(
            ("X-RateLimit-Remaining", "2")
        )

    def test_cost_callable_sees_the_request(self) -> None:
        app = self.app(self.limiter("10/second"), cost=lambda r: 10 if r.method == "POST" else 1)
        assert self.send(app, "POST").status == 200
        assert self.send(app).status == 429

    def test_a_cost_above_the_burst_is_denied_without_retry_after_and_takes_nothing(
        self,
    ) -> None:
        app = self.app(self.limiter("10/second"), cost=lambda r: int(r.headers.get("X-Items") or 1))
        status, headers, body = self.send(app, "POST", headers={"X-Items": "9" * 400})
        assert (status, body) == (429, DENIED_BODY)
        assert self.named(headers) == self.x_headers(10, 10, 0)  # can never pass
        status, headers, _ = self.send(app)
        assert (status, self.named(headers)) == (200, self.x_headers(10, 9, 1))

    def test_key_func_with_the_client_address_as_fallback(self) -> None:
        app = self.app(self.limiter("1/second"), key_func=header_key("X-API-Key"))
        assert [self.send(app, headers={"X-API-Key": "a"}).status for _ in range(2)] == [200, 429]
        assert self.send(app, headers={"X-API-Key": "b"}).status == 200
        assert [self.send(app).status for _ in range(2)] == [200, 429]  # no key: the address

    def test_rules_use_their_own_limiter_and_key(self) -> None:
        clock = self.clock
        default = RateLimiter("10/second", clock=clock, name="default")
        login = RateLimiter("2/second", clock=clock, name="login")
        api = RateLimiter("1/second", clock=clock, name="api")
        rules = [
            Rule("/login", login, methods=["POST"]),
            Rule("/api/*", api, key_func=header_key("X-API-Key")),
        ]
        app = self.app(default, rules=rules)
        replies = [self.send(app, "POST", "/login") for _ in range(3)]
        assert [r.status for r in replies] == [200, 200, 429]
        assert self.named(replies[2].headers, "X-RateLimit-Limit") == self.expected(
            ("X-RateLimit-Limit", "2")
        )
        # GET is not the rule's method: the default limiter, untouched so far.
        assert self.named(self.send(app, "GET", "/login").headers) == self.x_headers(10, 9, 1)
        key1, key2 = {"X-API-Key": "k1"}, {"X-API-Key": "k2"}
        assert [self.send(app, path="/api/items", headers=key1).status for _ in range(2)] == [
            200,
            429,
        ]
        assert self.send(app, path="/api", headers=key2).status == 200  # another key
        assert self.named(self.send(app, path="/apiary").headers) == self.x_headers(10, 8, 1)

    def test_rule_cost(self) -> None:
        default = self.limiter("10/second", name="default")
        export = self.limiter("10/second", name="export")
        app = self.app(default, rules=[Rule("/export", export, cost=4)])
        remaining = [
            self.named(self.send(app, path="/export").headers, "X-RateLimit-Remaining")
            for _ in range(2)
        ]
        assert remaining == [
            self.expected(("X-RateLimit-Remaining", "6")),
            self.expected(("X-RateLimit-Remaining", "2")),
        ]
        assert self.send(app, path="/export").status == 429
        assert self.send(app, path="/other").status == 200

    def test_on_limited_builds_the_response(self) -> None:
        def on_limited(
            request: RequestInfo, result: RateLimitResult, headers: List[Tuple[str, str]]
        ) -> Response:
            body = b"slow down " + request.path.encode()
            extra = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
            return Response(429, [*headers, *extra], body)

        app = self.app(self.limiter("1/second"), on_limited=on_limited)
        self.send(app)
        status, headers, body = self.send(app, path="/x")
        assert (status, body) == (429, b"slow down /x")
        assert self.named(headers, *RATE_LIMIT_HEADERS, "Content-Type") == [
            *self.x_headers(1, 0, 1),
            *self.expected(("Retry-After", "1"), ("Content-Type", "text/plain")),
        ]

    def test_store_down_with_on_error_allow_lets_the_app_answer_without_headers(
        self,
    ) -> None:
        app = self.app(self.limiter("1/second", store=_DownStore()), on_error="allow")
        for _ in range(3):
            status, headers, body = self.send(app)
            assert (status, body) == (200, b"hello")
            assert self.named(headers) == []
            assert self.named(headers, "X-App") == self.expected(("X-App", "1"))

    def test_store_down_with_on_error_deny_is_a_503(self) -> None:
        app = self.app(self.limiter("1/second", store=_DownStore()), on_error="deny")
        status, headers, body = self.send(app)
        assert (status, body) == (503, UNAVAILABLE_BODY)
        assert self.named(headers, *RATE_LIMIT_HEADERS, "Content-Type", "X-App") == (
            self.expected(_JSON)
        )

    @pytest.mark.parametrize("option", ["key_func", "cost", "exempt"])
    @pytest.mark.parametrize("on_error", ["allow", "deny"])
    def test_an_error_in_the_apps_callable_propagates(self, option: str, on_error: str) -> None:
        app = self.app(self.limiter("1/second"), on_error=on_error, **{option: _fail})
        self.expect_error(app, AdapterBug)

    @pytest.mark.parametrize("on_error", ["allow", "deny"])
    def test_an_error_in_on_limited_propagates(self, on_error: str) -> None:
        app = self.app(self.limiter("1/second"), on_error=on_error, on_limited=_fail)
        assert self.send(app).status == 200  # on_limited runs for limited requests only
        self.expect_error(app, AdapterBug)

    @pytest.mark.parametrize("on_error", ["allow", "deny"])
    def test_a_store_bug_that_is_no_store_error_propagates(self, on_error: str) -> None:
        app = self.app(self.limiter(store=_BuggyStore()), on_error=on_error)
        self.expect_error(app, AdapterBug)

    def test_proxy_header_keys_each_forwarded_client(self) -> None:
        limiter = self.limiter("1/second")
        app = self.app(limiter, trusted_proxies=[self.proxy_peer], proxy_header="x-forwarded-for")
        proxy = self.proxy_peer
        # The proxy appends X-Forwarded-For; the client adds a Forwarded of its
        # own, and a fake X-Forwarded-For entry: neither changes the key.
        spoofed = {"X-Forwarded-For": "6.6.6.6, 198.51.100.4", "Forwarded": "for=1.1.1.1"}
        assert self.send(app, headers=spoofed, peer=proxy).status == 200
        plain = {"X-Forwarded-For": "198.51.100.4"}
        assert self.send(app, headers=plain, peer=proxy).status == 429
        other = {"X-Forwarded-For": "198.51.100.5"}
        assert self.send(app, headers=other, peer=proxy).status == 200  # its own bucket
        assert limiter.peek("ip:198.51.100.4").remaining == 0
        for untouched in (proxy, "1.1.1.1", "6.6.6.6"):
            assert limiter.peek(f"ip:{untouched}").remaining == 1, untouched

    # -- switches, allow lists, per-request limiters, deduct_when ---------------

    def test_header_style_none_sends_only_retry_after_on_the_429(self) -> None:
        app = self.app(self.limiter("1/second"), header_style=None)
        status, headers, body = self.send(app)
        assert (status, body, self.named(headers)) == (200, b"hello", [])
        status, headers, body = self.send(app)
        assert (status, body) == (429, DENIED_BODY)
        assert self.named(headers) == self.expected(("Retry-After", "1"))

    def test_disabled_passes_everything_untouched(self) -> None:
        limiter = self.limiter("1/second")
        app = self.app(limiter, enabled=False)
        for _ in range(3):
            status, headers, body = self.send(app)
            assert (status, body, self.named(headers)) == (200, b"hello", [])
        assert limiter.peek(f"ip:{self.client_peer}").remaining == 1  # nothing was taken

    def test_allow_listed_clients_are_never_limited_nor_charged(self) -> None:
        limiter = self.limiter("1/second")
        network = self.client_peer.rsplit(".", 1)[0] + ".0/24"
        app = self.app(limiter, allow_list=[network])
        for _ in range(3):
            status, headers, body = self.send(app)
            assert (status, body, self.named(headers)) == (200, b"hello", [])
        assert limiter.peek(f"ip:{self.client_peer}").remaining == 1

    def test_the_allow_list_trusts_a_forwarding_header_only_from_a_trusted_proxy(self) -> None:
        limiter = self.limiter("1/second")
        proxy = self.proxy_peer
        app = self.app(
            limiter,
            allow_list=["198.51.100.0/24"],
            trusted_proxies=[proxy],
            proxy_header="x-forwarded-for",
        )
        listed = {"X-Forwarded-For": "198.51.100.9"}
        assert [self.send(app, headers=listed, peer=proxy).status for _ in range(3)] == [200] * 3
        spoofed = {"X-Forwarded-For": "198.51.100.9, 6.6.6.6"}  # the proxy appended 6.6.6.6
        assert [self.send(app, headers=spoofed, peer=proxy).status for _ in range(2)] == [200, 429]
        if self.client_peer != proxy:  # a client that reaches the app directly
            direct = [self.send(app, headers=listed).status for _ in range(2)]
            assert direct == [200, 429]

    def test_a_limiter_function_picks_the_limiter_per_request(self) -> None:
        free = self.limiter("1/second", name="free")
        paid = self.limiter("3/second", name="paid")
        app = self.app(lambda request: paid if request.headers.get("X-Plan") == "paid" else free)
        plan = {"X-Plan": "paid"}
        assert [self.send(app).status for _ in range(2)] == [200, 429]
        replies = [self.send(app, headers=plan) for _ in range(4)]
        assert [r.status for r in replies] == [200, 200, 200, 429]
        assert self.named(replies[0].headers) == self.x_headers(3, 2, 1)

    def test_a_limiter_function_returning_no_limiter_is_a_type_error(self) -> None:
        self.expect_error(self.app(lambda request: 42), TypeError)
        if not self.takes_rate_strings:
            self.expect_error(self.app(lambda request: "5/minute"), TypeError)
            return
        app = self.app(lambda request: "2/second")  # a plan by its rate
        assert [self.send(app).status for _ in range(3)] == [200, 200, 429]

    def test_deduct_when_charges_only_the_matching_statuses(self) -> None:
        app = self.app(self.limiter("2/second"), deduct_when=lambda status: status == 401)
        for _ in range(4):  # not charged: the bucket stays full
            status, headers, body = self.send(app, path="/status/200")
            assert (status, body, self.named(headers)) == (200, b"hello", self.x_headers(2, 2, 0))
        replies = [self.send(app, path="/status/401") for _ in range(2)]
        assert [r.status for r in replies] == [401, 401]
        assert [self.named(r.headers) for r in replies] == [
            self.x_headers(2, 1, 1),
            self.x_headers(2, 0, 1),
        ]
        status, headers, body = self.send(app, path="/status/200")  # cannot pay: refused
        assert (status, body) == (429, DENIED_BODY)
        assert self.named(headers) == [
            *self.x_headers(2, 0, 1),
            *self.expected(("Retry-After", "1")),
        ]
        self.clock.advance(0.5)
        assert self.send(app, path="/status/200").status == 200
        assert self.send(app, path="/status/200").status == 200  # still not charged
        assert self.send(app, path="/status/401").status == 401
        assert self.send(app, path="/status/200").status == 429

    def test_a_rule_deduct_when_applies_to_its_route_only(self) -> None:
        default = self.limiter("10/second", name="default")
        login = self.limiter("1/second", name="login")
        failed = Rule("/login", login, deduct_when=lambda status: status >= 400)
        app = self.app(default, rules=[failed])
        # /login answers 200 here: successes are free.
        assert [self.send(app, path="/login").status for _ in range(3)] == [200] * 3
        assert login.peek(f"ip:{self.client_peer}").remaining == 1
        assert self.named(self.send(app, path="/x").headers) == self.x_headers(10, 9, 1)

    def test_async_callables_are_awaited_or_refused_up_front(self) -> None:
        free = self.limiter("1/second", name="free")
        paid = self.limiter("2/second", name="paid")

        async def key_func(request: RequestInfo) -> Optional[str]:
            return request.headers.get("X-Key")

        async def cost(request: RequestInfo) -> float:
            return 2 if request.method == "POST" else 1

        async def exempt(request: RequestInfo) -> bool:
            return request.path == "/health"

        async def pick(request: RequestInfo) -> RateLimiter:
            return paid if request.headers.get("X-Key") == "p" else free

        if not self.awaits:  # a synchronous adapter refuses each when it is built
            for option, func in (("key_func", key_func), ("cost", cost), ("exempt", exempt)):
                with pytest.raises(TypeError, match="cannot await"):
                    self.app(free, **{option: func})
            with pytest.raises(TypeError, match="cannot await"):
                self.app(pick)
            return
        app = self.app(pick, key_func=key_func, cost=cost, exempt=exempt)
        assert [self.send(app, path="/health").status for _ in range(3)] == [200] * 3
        assert [self.send(app, headers={"X-Key": "f"}).status for _ in range(2)] == [200, 429]
        assert [self.send(app, "POST", headers={"X-Key": "p"}).status for _ in range(2)] == [
            200,
            429,
        ]
        assert paid.peek("p").remaining == 0

    # -- shadow mode --------------------------------------------------------------

    def test_shadow_mode_refuses_nothing_and_reports_shadow_denials(self) -> None:
        events: List[DecisionEvent] = []
        app = self.app(self.limiter("2/second", on_decision=events.append), mode="shadow")
        replies = [self.send(app) for _ in range(4)]
        assert [(r.status, r.body) for r in replies] == [(200, b"hello")] * 4
        assert [e.outcome for e in events] == ["allowed"] * 2 + ["shadow_denied"] * 2
        assert self.named(replies[3].headers) == self.x_headers(2, 0, 1)  # no Retry-After

    def test_a_rule_in_shadow_mode_beside_an_enforced_default(self) -> None:
        events: List[DecisionEvent] = []
        default = self.limiter("1/second", name="default")
        trial = self.limiter("1/second", name="trial", on_decision=events.append)
        app = self.app(default, rules=[Rule("/new/*", trial, mode="shadow")])
        assert [self.send(app, path="/new/x").status for _ in range(3)] == [200] * 3
        assert [e.outcome for e in events] == ["allowed", "shadow_denied", "shadow_denied"]
        assert [self.send(app, path="/other").status for _ in range(2)] == [200, 429]
