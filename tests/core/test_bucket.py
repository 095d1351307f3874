"""The pure step: its rules, checked exactly, and against a plain reference model."""

from __future__ import annotations

import math
import sys
from decimal import Decimal
from fractions import Fraction
from typing import List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter.backends.memory import admit
from limiter.core.bucket import step
from limiter.core.costs import Charge, Refund
from limiter.core.limits import CLOCK_TOLERANCE, Limit
from limiter.core.lockout import Lockout
from limiter.core.many import step_all
from limiter.core.quota import Quota
from limiter.core.state import keep_until

T0 = 1_700_000_000.0


def run(limit: Limit, ops: List[Tuple[float, float]], state: Optional[complex] = None) -> list:
    out = []
    for now, cost in ops:
        state, result = step(state, now, limit, cost)
        out.append(result)
    return out


class TestRules:
    def test_a_new_key_is_full_and_burst_passes_at_once(self) -> None:
        results = run(Limit(10, 20), [(T0, 1)] * 21)
        assert [r.allowed for r in results] == [True] * 20 + [False]
        assert [r.remaining for r in results[:3]] == [19, 18, 17]
        assert results[-1].retry_after == pytest.approx(0.1)

    def test_tokens_refill_continuously_up_to_burst(self) -> None:
        limit = Limit(4, 4)
        state, _ = step(None, T0, limit, 4)
        state, r = step(state, T0 + 0.25, limit, 0)
        assert r.remaining == 1
        state, r = step(state, T0 + 0.5, limit, 0)
        assert r.remaining == 2
        _, r = step(state, T0 + 3600, limit, 0)
        assert (r.remaining, r.reset_after) == (4, 0.0)

    def test_denied_returns_the_same_state_object(self) -> None:
        limit = Limit(1, 1)
        state, _ = step(None, T0, limit)
        new_state, result = step(state, T0, limit)
        assert not result.allowed
        assert new_state is state

    def test_cost_zero_stores_nothing(self) -> None:
        new_state, result = step(None, T0, Limit(1, 3), 0)
        assert new_state is None
        assert (result.allowed, result.remaining, result.retry_after) == (True, 3, 0.0)

    def test_all_or_nothing(self) -> None:
        limit = Limit(1, 5)
        state, _ = step(None, T0, limit, 3)
        state2, result = step(state, T0, limit, 3)
        assert not result.allowed and state2 is state
        assert result.remaining == 2
        assert result.retry_after == pytest.approx(1.0)
        _, result = step(state, T0, limit, 2)
        assert result.allowed and result.remaining == 0

    def test_cost_above_burst_is_denied_forever(self) -> None:
        state, result = step(None, T0, Limit(100, 10), 11)
        assert state is None
        assert not result.allowed
        assert result.retry_after == math.inf
        assert (result.remaining, result.reset_after) == (10, 0.0)

    @pytest.mark.parametrize(
        "cost",
        [
            *(-1, -0.5, float("nan"), -math.inf),
            *(Fraction(-1, 3), Decimal("-2"), Decimal("NaN"), Decimal("sNaN")),
        ],
        ids=repr,
    )
    def test_negative_or_nan_cost_is_a_value_error_naming_it(self, cost: object) -> None:
        with pytest.raises(ValueError) as info:
            step(None, T0, Limit(1, 1), cost)  # type: ignore[arg-type]
        assert str(info.value) == f"cost must be a number of tokens >= 0, got {cost!r}"

    @pytest.mark.parametrize("digits", [400, 5000])
    def test_a_huge_negative_cost_is_a_short_value_error(self, digits: int) -> None:
        # 5000 digits is beyond repr() on Python >= 3.11: the message still says it.
        with pytest.raises(ValueError) as info:
            step(None, T0, Limit(1, 1), -(10**digits))
        message = str(info.value)
        assert message.startswith("cost must be a number of tokens >= 0, got ")
        assert len(message) < 150

    @pytest.mark.parametrize("cost", ["1", None, True, False, b"1", 1j, [1]], ids=repr)
    def test_cost_of_a_wrong_type_is_a_type_error_naming_it(self, cost: object) -> None:
        for detail in (True, False):
            with pytest.raises(TypeError) as info:
                step(None, T0, Limit(1, 1), cost, detail)  # type: ignore[call-overload]
            assert str(info.value) == f"cost must be a number of tokens, got {cost!r}"
        if isinstance(cost, list):  # a list is one cost per limit for step_all
            with pytest.raises(ValueError, match=r"a sequence of 2 costs, one per limit, got 1"):
                step_all([None, None], T0, [Limit(1, 1), Limit(2, 2)], cost)
            return
        with pytest.raises(TypeError, match="cost must be a number of tokens, got"):
            step_all([None, None], T0, [Limit(1, 1), Limit(2, 2)], cost)  # type: ignore[arg-type]

    def test_default_cost_is_one_token(self) -> None:
        limit = Limit(10, 20)
        assert step(None, T0, limit) == step(None, T0, limit, 1)
        state, result = step(None, T0, limit)
        assert state == complex(0.1, T0) and result.remaining == 19
        states, result = step_all([None, None], T0, [limit, Limit(1, 3)])
        assert states == [complex(0.1, T0), complex(1.0, T0)]
        assert [r.remaining for r in result.results] == [19, 2]

    @pytest.mark.parametrize("now", [float("nan"), float("inf"), -float("inf")])
    def test_non_finite_now_is_a_value_error(self, now: float) -> None:
        with pytest.raises(ValueError, match="now must be a finite"):
            step(None, now, Limit(1, 1))

    def test_backwards_clock_grants_nothing_and_locks_no_one_out(self) -> None:
        limit = Limit(1, 3)
        state, _ = step(None, T0, limit, 3)  # empty at T0; full at T0 + 3
        # A jump back of a day: still empty (nothing granted) ...
        back = T0 - 86400
        state, r = step(state, back, limit, 1)
        assert not r.allowed and r.remaining == 0
        assert r.retry_after == pytest.approx(1.0)
        # ... and refilling runs from the new reading, not from T0.
        state, r = step(state, back + 1, limit, 1)
        assert r.allowed
        _, r = step(state, back + 3, limit, 0)
        assert r.remaining == 2

    def test_waiting_exactly_retry_after_is_enough_at_epoch_scale(self) -> None:
        limit = Limit(7, 3)
        state, now = None, T0 + 0.123456
        admitted = 0
        for _ in range(1000):
            state, r = step(state, now, limit, 1)
            if r.allowed:
                admitted += 1
            else:
                now += r.retry_after
                state, r = step(state, now, limit, 1)
                assert r.allowed, "waited retry_after and was still refused"
                admitted += 1
        assert admitted == 1000

    def test_a_limit_that_shrinks_never_shows_negative_tokens(self) -> None:
        state, _ = step(None, T0, Limit(1, 10), 10)  # spent under a burst of 10
        state2, result = step(state, T0, Limit(1, 2), 1)
        # It owes at most one burst under the new limit: 4 s of deficit, 2 tokens.
        assert not result.allowed
        assert (result.remaining, result.reset_after) == (0, 4.0)
        assert result.retry_after == pytest.approx(3.0)
        assert state2 == complex(4.0, T0)  # stored: refilling starts now
        assert not step(state2, T0 + 2.9, Limit(1, 2), 1)[1].allowed
        assert step(state2, T0 + 3, Limit(1, 2), 1)[1].allowed

    def test_headers_fields_never_negative_or_nan(self) -> None:
        limit = Limit(3, 2)
        state = None
        for now, cost in [(T0, 2), (T0 - 50, 1), (T0 - 49.9, 2), (T0 + 1, 5), (T0 + 1, 0)]:
            state, r = step(state, now, limit, cost)
            assert r.remaining >= 0 and r.reset_after >= 0 and r.retry_after >= 0
            assert not math.isnan(r.reset_after)


class TestLateReadings:
    """A ``now`` up to ``CLOCK_TOLERANCE`` behind the last update: read before the lock."""

    def test_a_reading_just_behind_the_last_update_is_applied_at_it(self) -> None:
        limit = Limit(1000, 10)  # a token a millisecond
        u = T0 + 0.5
        drained, _ = step(None, T0, limit, 10)
        state, r = step(drained, u, limit, 5)  # full again at u, 5 taken
        assert r.remaining == 5 and state.imag == u
        # Read 1 ms before u, applied after it: exactly what a request at u gets,
        # for every cost (peeks, admissions, denials), state bit for bit.
        for cost in (0, 0.5, 1, 3, 5, 6, 10, 11):
            assert step(state, u - 0.001, limit, cost) == step(state, u, limit, cost)
        late, r = step(state, u - 0.001, limit, 5)
        assert r.allowed and r.remaining == 0
        assert late.imag == u  # stored at u: not re-anchored at the earlier reading
        # A millisecond after u refills one token, not two: no double refill.
        _, r = step(late, u + 0.001, limit, 2)
        assert (r.allowed, r.remaining) == (False, 1)
        # Denied or peeking, a late reading stores nothing at all.
        for cost in (0, 1):
            same, r = step(late, u - 0.001, limit, cost)
            assert same is late and r == step(late, u, limit, cost)[1]
            same, allowed = step(late, u - 0.001, limit, cost, False)
            assert same is late and allowed == (cost == 0)

    def test_the_tolerance_separates_late_readings_from_a_clock_stepped_back(self) -> None:
        limit = Limit(1, 3)
        state, _ = step(None, T0, limit, 3)  # empty at T0
        edge = T0 - CLOCK_TOLERANCE
        # Exactly the tolerance behind: still a late reading, applied at T0.
        same, r = step(state, edge, limit, 1)
        assert same is state and not r.allowed and r.retry_after == pytest.approx(1.0)
        # Any further: a clock stepped back, re-anchored (and stored) at the reading.
        for back in (math.nextafter(edge, -math.inf), edge - 0.001, T0 - 3600, T0 - 86400):
            moved, r = step(state, back, limit, 1)
            assert moved == complex(3.0, back) and not r.allowed
            assert step(moved, back + 1, limit, 1)[1].allowed  # nobody locked out

    def test_a_shrunk_limit_cuts_the_debt_at_the_last_update_not_before(self) -> None:
        state, _ = step(None, T0, Limit(1, 10), 10)  # 10 s of debt at T0
        cut, r = step(state, T0 - 0.5, Limit(1, 2), 1)
        assert not r.allowed and cut == complex(4.0, T0)  # as at T0 itself (one burst owed)
        assert cut == step(state, T0, Limit(1, 2), 1)[0]

    def test_step_all_applies_each_late_reading_at_its_own_last_update(self) -> None:
        limits = [Limit(10, 5), Limit(1, 5)]
        a, _ = step(None, T0, limits[0], 5)  # drained at T0
        b, _ = step(None, T0 - 5, limits[1], 5)  # drained 5 s earlier: full again at T0
        now = T0 - 0.2  # behind a, 5 s after b
        states, result = step_all([a, b], now, limits, 1)
        assert not result.allowed and states[0] is a and states[1] is b
        assert result.results[0] == step(a, T0, limits[0], 1)[1]
        assert result.results[1] == step(b, now, limits[1], 0)[1]  # a peek: nothing taken
        states, result = step_all([a, b], T0 + 0.1, limits, 1)
        assert result.allowed and states[0].imag == T0 + 0.1

    def test_two_threads_whose_readings_apply_out_of_order_get_exactly_the_rate(self) -> None:
        # Each round thread A reads the clock, then thread B does (lag_ms later);
        # B takes the store's lock first, then A.  Each sends 4 requests: more
        # than the 2 to 8 tokens a round refills, so the bucket is always drained.
        limit = Limit(1000, 10)  # a token a millisecond
        state = None
        admitted = 0
        applied = []  # readings in the order they took effect
        for k in range(400):
            t1_ms = 5 * k
            t2_ms = t1_ms + 1 + k % 4  # B read 1 to 4 ms after A
            for ms in (t2_ms, t1_ms):
                applied.append(ms)
                for _ in range(4):
                    state, allowed = step(state, T0 + ms / 1000, limit, 1, False)
                    admitted += allowed
        # Exactly the burst plus a token a millisecond from the first reading
        # applied to the last (late readings take effect at the update they lag).
        assert admitted == 10 + (max(applied) - applied[0])
        # Before CLOCK_TOLERANCE, each of A's readings re-anchored the bucket 1 to
        # 4 ms back and that time refilled twice: about 1,000 tokens too many.


class TestLimit:
    def test_values_and_derived_fields(self) -> None:
        limit = Limit(10, 20)
        assert (limit.rate, limit.burst, limit.interval, limit.window) == (10.0, 20, 0.1, 2.0)
        assert Limit(10, 20) == Limit(10.0, 20)
        with pytest.raises(AttributeError):
            limit.rate = 3  # type: ignore[misc]

    @pytest.mark.parametrize(
        "text, rate, burst",
        [
            ("100/minute", 100 / 60, 100),
            ("100 per minute", 100 / 60, 100),
            ("5/second", 5.0, 5),
            ("5/s", 5.0, 5),
            ("1000 / hour", 1000 / 3600, 1000),
            ("3/h", 3 / 3600, 3),
            ("10/day", 10 / 86400, 10),
            ("10/d", 10 / 86400, 10),
            ("30/min", 0.5, 30),
            ("10 per 5 minutes", 10 / 300, 10),
            ("2 PER Seconds", 2.0, 2),
        ],
    )
    def test_parse(self, text: str, rate: float, burst: int) -> None:
        limit = Limit.parse(text)
        assert limit.rate == pytest.approx(rate)
        assert limit.burst == burst

    def test_parse_with_explicit_burst(self) -> None:
        assert Limit.parse("100/minute", burst=5) == Limit(100 / 60, 5)

    @pytest.mark.parametrize(
        "text", ["abc", "10/fortnight", "-5/second", "0/second", "10", "/second", "1.5/s", ""]
    )
    def test_parse_rejects_and_names_the_text(self, text: str) -> None:
        with pytest.raises(ValueError) as info:
            Limit.parse(text)
        assert repr(text) in str(info.value)

    @pytest.mark.parametrize("rate", [0, -1, float("nan"), float("inf"), Decimal("NaN")])
    def test_bad_rate(self, rate: object) -> None:
        with pytest.raises(ValueError) as info:
            Limit(rate, 1)  # type: ignore[arg-type]
        assert str(info.value) == (
            "rate must be a number of tokens per second from 2.2250738585072014e-308 to "
            f"4.49423283715579e+304, got {rate!r}"
        )

    @pytest.mark.parametrize("rate", ["x", None, True, False, 1j, [1]], ids=repr)
    def test_rate_of_a_wrong_type_is_a_type_error(self, rate: object) -> None:
        with pytest.raises(TypeError) as info:
            Limit(rate, 1)  # type: ignore[arg-type]
        assert str(info.value) == f"rate must be a number of tokens per second, got {rate!r}"

    @pytest.mark.parametrize("burst", [0, -3, 2**53 + 1, 10**20])
    def test_bad_burst(self, burst: int) -> None:
        with pytest.raises(ValueError) as info:
            Limit(1, burst)
        assert str(info.value) == (
            f"burst must be an integer from 1 to 2**53 (9007199254740992), got {burst!r}"
        )

    @pytest.mark.parametrize("burst", [2.5, 2.0, "3", None, True, Decimal(2)], ids=repr)
    def test_burst_of_a_wrong_type_is_a_type_error(self, burst: object) -> None:
        with pytest.raises(TypeError) as info:
            Limit(1, burst)  # type: ignore[arg-type]
        assert str(info.value) == f"burst must be an integer, got {burst!r}"

    def test_coerce(self) -> None:
        assert Limit.coerce(2.5) == Limit(2.5, 3)
        assert Limit.coerce(0.1) == Limit(0.1, 1)
        assert Limit.coerce(10, 4) == Limit(10, 4)
        assert Limit.coerce("10/second") == Limit(10, 10)
        assert Limit.coerce(Limit(1, 2), 5) == Limit(1, 5)


class Reference:
    """The token bucket as a textbook states it, in exact rational arithmetic."""

    def __init__(self, rate: Fraction, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.tokens: Optional[Fraction] = None
        self.last = Fraction(0)

    def request(self, now: Fraction, cost: Fraction) -> Tuple[bool, int]:
        if self.tokens is None:  # never charged: a full bucket at any time
            available, backwards = Fraction(self.burst), False
        else:
            if self.last - Fraction(CLOCK_TOLERANCE) <= now < self.last:
                now = self.last  # read before the last update took effect: applied at it
            backwards = now < self.last
            elapsed = Fraction(0) if backwards else now - self.last
            available = min(Fraction(self.burst), self.tokens + elapsed * self.rate)
        allowed = 0 < cost <= available or cost == 0
        if allowed and cost > 0:
            self.tokens, self.last = available - cost, now
        elif backwards:  # grants nothing, re-anchors at the new reading
            self.last = now
        return allowed, math.floor(available - cost if allowed else available)


RATES = [Fraction(1, 2), Fraction(1), Fraction(3), Fraction(10), Fraction(100, 60)]


@settings(max_examples=300, deadline=None)
@given(
    rate=st.sampled_from(RATES),
    burst=st.integers(1, 30),
    ops=st.lists(
        st.tuples(st.integers(-3000, 4000), st.sampled_from([0, 1, 1, 1, 2, 5, 40])),
        min_size=1,
        max_size=60,
    ),
)
def test_step_matches_the_reference_model(rate: Fraction, burst: int, ops: list) -> None:
    limit = Limit(float(rate), burst)
    ref = Reference(rate, burst)
    state = None
    ms = 0
    for dt_ms, cost in ops:
        ms += dt_ms
        now = T0 + ms / 1000
        state, result = step(state, now, limit, cost)
        allowed, remaining = ref.request(Fraction(ms, 1000), Fraction(cost))
        assert (result.allowed, result.remaining) == (allowed, remaining)


@settings(max_examples=200, deadline=None)
@given(
    limits=st.lists(
        st.tuples(st.sampled_from([0.5, 1.0, 4.0, 10.0]), st.integers(1, 8)),
        min_size=1,
        max_size=3,
    ),
    ops=st.lists(st.tuples(st.integers(0, 700), st.sampled_from([0, 1, 1, 2, 3])), max_size=60),
)
def test_step_all_never_exceeds_any_limit_and_denials_take_nothing(limits: list, ops: list) -> None:
    objs = [Limit(rate, burst) for rate, burst in limits]
    states: list = [None] * len(objs)
    alone: list = [None] * len(objs)
    now = T0
    for dt_ms, cost in ops:
        now += dt_ms / 1000
        states, result = step_all(states, now, objs, cost)
        # Each limit judged alone on the requests that were admitted agrees.
        singles = [step(s, now, lim, cost) for s, lim in zip(alone, objs)]
        assert result.allowed == all(r.allowed for _, r in singles)
        if result.allowed:
            alone = [s for s, _ in singles]
        assert [r.remaining for r in result.results] == [
            step(s, now, lim, 0)[1].remaining for s, lim in zip(alone, objs)
        ]
        if result.allowed:  # the most restrictive: fewest tokens left
            assert result.remaining == min(r.remaining for r in result.results)
        else:  # the most restrictive: the longest wait
            assert result.retry_after == max(r.retry_after for r in result.results)
            assert result._replace(results=()) in [r for r in result.results if not r.allowed]


def test_step_all_validates_lengths() -> None:
    with pytest.raises(ValueError, match="one state per limit"):
        step_all([None], T0, [Limit(1, 1), Limit(2, 2)])
    with pytest.raises(ValueError, match="at least one limit"):
        step_all([], T0, [])


# -- costs of any type and size (issue 9, item 1) ----------------------------------

HUGE_COSTS = [
    10**400,  # float(10**400) is an OverflowError
    10**5000,  # beyond repr() on Python >= 3.11
    1e308,
    math.inf,
    Fraction(10**400, 3),
    Decimal("1e999"),
    Decimal("Infinity"),
    2**53 + 1,
]
HUGE_IDS = ["10**400", "10**5000", "1e308", "inf", "F(10**400,3)", "D1e999", "DInf", "2**53+1"]


class TestCosts:
    @pytest.mark.parametrize("cost", HUGE_COSTS, ids=HUGE_IDS)
    def test_a_cost_too_large_for_a_float_is_denied_like_any_cost_above_burst(
        self, cost: object
    ) -> None:
        limit = Limit(10, 20)
        used, _ = step(None, T0, limit, 5)
        for state in (None, used):
            new_state, result = step(state, T0 + 0.1, limit, cost)  # type: ignore[arg-type]
            assert new_state is state  # nothing taken, nothing stored
            assert result == step(state, T0 + 0.1, limit, 21)[1]
            assert (result.allowed, result.retry_after) == (False, math.inf)
            assert step(state, T0 + 0.1, limit, cost, False) == (state, False)  # type: ignore
        states, result = step_all([None, used], T0, [Limit(1, 5), limit], cost)  # type: ignore
        assert states == [None, used]
        assert [(r.allowed, r.retry_after) for r in result.results] == [(False, math.inf)] * 2

    @pytest.mark.parametrize(
        "cost",
        [
            *(20.000001, 20 + 1e-9, Fraction(201, 10), Decimal("20.0000001"), 21),
            # As floats these round down to 20.0: still above the burst.
            *(Fraction(2 * 10**20 + 1, 10**19), Decimal("20.000000000000000000001")),
        ],
        ids=repr,
    )
    def test_a_cost_above_burst_is_denied_however_close(self, cost: object) -> None:
        # Within the bucket's slack of burst, yet more than the bucket can hold.
        state, result = step(None, T0, Limit(10, 20), cost)  # type: ignore[arg-type]
        assert state is None
        assert (result.allowed, result.remaining, result.retry_after) == (False, 20, math.inf)

    def test_a_cost_one_above_a_burst_of_2_53_is_denied(self) -> None:
        # float(2**53 + 1) == 2**53: the cost must not pass for the burst.
        limit = Limit(1, 2**53)
        used, _ = step(None, T0, limit, 1)
        for state in (None, used):
            new_state, result = step(state, T0, limit, 2**53 + 1)
            assert new_state is state
            assert (result.allowed, result.retry_after) == (False, math.inf)
        assert step(None, T0, limit, 2**53)[1].allowed

    def test_remaining_never_exceeds_the_burst(self) -> None:
        # Near 2**53 tokens, window * rate rounds up: a denial showed burst + 1.
        for rate in (1e-200, 3.0, 1e9):
            limit = Limit(rate, 2**53 - 1)
            _, result = step(None, T0, limit, 2**53)
            assert (result.allowed, result.remaining) == (False, 2**53 - 1)

    @pytest.mark.parametrize(
        "cost, same_as",
        [
            (Fraction(1, 3), 1 / 3),
            (Decimal("2.5"), 2.5),
            (Decimal(20), 20),
            (Fraction(20), 20),
            (Decimal("1e-400"), 5e-324),  # too small for a float: a charge, not a peek
            (Fraction(1, 10**400), 5e-324),
        ],
        ids=repr,
    )
    def test_fractions_and_decimals_count_as_their_float(
        self, cost: object, same_as: float
    ) -> None:
        limit = Limit(10, 20)
        used, _ = step(None, T0, limit, 7)
        for state in (None, used):
            assert step(state, T0 + 0.05, limit, cost) == step(  # type: ignore[call-overload]
                state, T0 + 0.05, limit, same_as
            )
        new_state, result = step(None, T0, limit, cost)  # type: ignore[call-overload]
        assert new_state is not None and result.allowed  # stored: it took tokens

    def test_the_memory_store_and_a_limiter_take_any_cost(self) -> None:
        from limiter import MemoryStore, RateLimiter

        store = MemoryStore()
        limit = Limit(10, 20)
        for cost in HUGE_COSTS:
            assert not store.apply("k", limit, cost, T0).allowed  # type: ignore[arg-type]
            assert not store.allow("k", limit, cost, T0)  # type: ignore[arg-type]
            assert not store.apply_many(["k", "j"], [limit, limit], cost, T0).allowed  # type: ignore
        assert len(store) == 0
        assert store.allow("k", limit, Decimal(20), T0)  # type: ignore[arg-type]
        limiter = RateLimiter(10, 20)
        assert limiter.check("k", 10**400).retry_after == math.inf
        assert not limiter.allow("k", Decimal("1e999"))  # type: ignore[arg-type]
        assert limiter.allow("k", Fraction(20))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="cost must be a number of tokens, got '1'"):
            limiter.allow("k", "1")  # type: ignore[arg-type]


# -- the accepted range of a limit (issue 9, item 3) -------------------------------

TINY = sys.float_info.min  # the smallest normal float
MAX_RATE = 4.49423283715579e304  # the largest rate whose slack, 1e-3 / rate, is normal


class TestLimitRange:
    @pytest.mark.parametrize(
        "rate, burst, beyond",
        [
            (TINY, 1, (math.nextafter(TINY, 0), 1)),
            (MAX_RATE, 1, (math.nextafter(MAX_RATE, math.inf), 1)),
            (MAX_RATE, 2**53, (MAX_RATE, 2**53 + 1)),
            (1.0, 2**53, (1.0, 2**53 + 1)),
            # burst / rate = 2**1022 seconds exactly:
            (2**53 / 2.0**1022, 2**53, (math.nextafter(2**53 / 2.0**1022, 0), 2**53)),
        ],
    )
    def test_the_extremes_are_accepted_and_exact_and_beyond_them_rejected(
        self, rate: float, burst: int, beyond: Tuple[float, int]
    ) -> None:
        with pytest.raises(ValueError, match="must be"):
            Limit(*beyond)
        limit = Limit(rate, burst)
        assert (limit.rate, limit.burst) == (rate, burst)
        for value in (limit.interval, limit.window, limit.slack):
            assert math.isfinite(value) and value >= TINY
        # The whole bucket spent, then refilled: every field finite and exact.
        state, result = step(None, T0, limit, burst)
        assert (result.allowed, result.remaining, result.reset_after) == (True, 0, limit.window)
        # (Near 2**53 tokens a float second holds two tokens: one more may round
        # away, see the module docstring.)
        state, result = step(state, T0, limit, 1 if burst < 2**52 else 4)
        assert not result.allowed and 0 < result.retry_after < math.inf
        assert result.remaining == 0
        _, result = step(state, T0 + max(2 * limit.window, 1.0), limit, 0)
        assert (result.remaining, result.reset_after) == (burst, 0.0)

    @pytest.mark.parametrize(
        "rate",
        [
            *(1e-320, 5e-324, math.nextafter(TINY, 0), 1e305, math.nextafter(MAX_RATE, math.inf)),
            *(1e308, 10**400, Fraction(1, 10**400), Decimal("1e-400")),
        ],
        ids=repr,
    )
    def test_a_rate_whose_derived_values_are_not_normal_floats_is_rejected(
        self, rate: object
    ) -> None:
        with pytest.raises(ValueError) as info:
            Limit(rate, 1)  # type: ignore[arg-type]
        assert str(info.value).startswith(
            "rate must be a number of tokens per second from 2.2250738585072014e-308 to "
            "4.49423283715579e+304, got "
        )
        assert repr(rate)[:50] in str(info.value)

    def test_a_window_beyond_2_1022_seconds_is_rejected(self) -> None:
        # 1e-300 tokens/s is fine for a burst of 1, not for 2**53 tokens.
        assert Limit(1e-300, 1).window == 1 / 1e-300
        with pytest.raises(ValueError) as info:
            Limit(1e-300, 2**53)
        assert str(info.value) == (
            "rate must be at least burst / 2**1022 = 2.004168360008973e-292 tokens per "
            "second for burst 9007199254740992, got 1e-300"
        )
        with pytest.raises(ValueError, match="rate must be at least burst / 2\\*\\*1022"):
            Limit(TINY, 2)

    def test_burst_above_2_53_is_rejected(self) -> None:
        # Issue 9: with burst 1e20, cost 1 and then cost 1e20 were both admitted.
        with pytest.raises(ValueError, match=r"burst must be an integer from 1 to 2\*\*53"):
            Limit(1, 10**20)
        state, first = step(None, T0, Limit(1, 2**50), 1)
        _, second = step(state, T0, Limit(1, 2**50), 2**50)
        assert (first.allowed, first.remaining, second.allowed) == (True, 2**50 - 1, False)

    @pytest.mark.parametrize(
        "text, message",
        [
            ("1/" + "9" * 400 + "s", "rate must be a number of tokens per second from"),
            ("9" * 400 + "/s", "rate must be a number of tokens per second from"),
            ("9" * 5000 + "/s", "rate must be a number of tokens per second from"),
            ("100000000000000000000/s", "burst must be an integer from 1 to 2**53"),
            ("1 per 1" + "0" * 310 + " days", "rate must be a number of tokens per second from"),
        ],
        ids=lambda v: v[:30],
    )
    def test_a_rate_string_out_of_range_is_a_value_error(self, text: str, message: str) -> None:
        with pytest.raises(ValueError) as info:
            Limit.parse(text)
        assert str(info.value).startswith(message)
        assert len(str(info.value)) < 400

    def test_a_number_whose_default_burst_is_too_large_is_a_value_error(self) -> None:
        assert Limit.coerce(2.0**53).burst == 2**53
        with pytest.raises(ValueError, match=r"burst must be an integer from 1 to 2\*\*53"):
            Limit.coerce(1e20)


# -- wrong types are TypeErrors (issue 9, item 5) ----------------------------------


class TestTypes:
    @pytest.mark.parametrize(
        "call, message",
        [
            (lambda: Limit("x", 1), "rate must be a number of tokens per second, got 'x'"),
            (lambda: Limit(10, "x"), "burst must be an integer, got 'x'"),
            (lambda: Limit(True, 1), "rate must be a number of tokens per second, got True"),
            (lambda: Limit(1, True), "burst must be an integer, got True"),
            (lambda: Limit(1, 1, 3), "limit name must be a str, got 3"),
            (lambda: Limit.parse(5), "rate must be a str like '10/second', got 5"),
            (lambda: Limit.parse_many(None), "rate must be a str like '10/second', got None"),
            (lambda: Limit.parse("10/s", burst="x"), "burst must be an integer, got 'x'"),
            (lambda: Limit.parse("10/s;1/m", burst=2.0), "burst must be an integer, got 2.0"),
            (lambda: Limit.coerce(None), "rate must be a number of tokens per second, got None"),
            (lambda: Limit.coerce(False), "rate must be a number of tokens per second, got False"),
            (lambda: Limit.coerce(2, "3"), "burst must be an integer, got '3'"),
            (lambda: Limit.coerce(Limit(1, 2), 2.5), "burst must be an integer, got 2.5"),
        ],
    )
    def test_a_wrong_type_is_a_type_error_naming_the_value(self, call, message: str) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == message

    def test_a_rate_limiter_builds_its_limits_through_limit(self) -> None:
        from limiter import RateLimiter

        for rate in ("10/s", 10, Limit(10, 10)):
            with pytest.raises(TypeError, match="burst must be an integer"):
                RateLimiter(rate, burst="x")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="rate must be a number of tokens per second"):
            RateLimiter(True)  # type: ignore[arg-type]

    def test_other_real_numbers_are_rates(self) -> None:
        assert Limit(Fraction(1, 4), 2) == Limit(0.25, 2)
        assert Limit(Decimal("0.5"), 2) == Limit(0.5, 2)  # type: ignore[arg-type]
        assert Limit(10**6, 2**53).rate == 1e6


# -- rate strings (issue 9, item 4) ------------------------------------------------

#: Every accepted spelling and its length in seconds, written out independently
#: of limiter.core.bucket's table.
SECONDS = {
    **dict.fromkeys(["ms", "msec", "msecs", "millisecond", "milliseconds"], Fraction(1, 1000)),
    **dict.fromkeys(["s", "sec", "secs", "second", "seconds"], Fraction(1)),
    **dict.fromkeys(["m", "min", "mins", "minute", "minutes"], Fraction(60)),
    **dict.fromkeys(["h", "hr", "hrs", "hour", "hours"], Fraction(3600)),
    **dict.fromkeys(["d", "day", "days"], Fraction(86400)),
}


def recase(text: str, flips: List[bool]) -> str:
    return "".join(c.upper() if flip else c for c, flip in zip(text, flips + [False] * len(text)))


class TestRateStrings:
    @settings(max_examples=400, deadline=None)
    @given(
        n=st.integers(1, 10**6),
        span=st.one_of(st.none(), st.integers(1, 10**4)),
        unit=st.sampled_from(sorted(SECONDS)),
        per=st.sampled_from(["/", " / ", " per ", "  PER\t", "/ "]),
        gap=st.sampled_from(["", " ", "  "]),
        flips=st.lists(st.booleans(), max_size=12),
    )
    def test_every_accepted_spelling_has_its_rate(
        self, n: int, span: Optional[int], unit: str, per: str, gap: str, flips: List[bool]
    ) -> None:
        if per.strip() != "/" and not per.startswith(" "):
            per = " " + per
        count_text = f" {n}" + per + ("" if span is None else f"{span}{gap or ' '}")
        text = count_text + recase(unit, flips) + gap
        limit = Limit.parse(text)
        # Exactly n / (span * seconds(unit)), correctly rounded.
        assert limit.rate == float(Fraction(n) / ((span or 1) * SECONDS[unit]))
        assert (limit.burst, limit.name) == (n, "default")

    @pytest.mark.parametrize(
        "text, rate",
        [
            *(("1/ms", 1000.0), ("3 per 10 msec", 300.0), ("1/mins", 1 / 60), ("1/hrs", 1 / 3600)),
            *(("1/secs", 1.0), ("1/seconds", 1.0), ("2/d", 2 / 86400), ("1/days", 1 / 86400)),
            *(("7/Milliseconds", 7000.0), ("1/MS", 1000.0)),
        ],
    )
    def test_units_audited_by_hand(self, text: str, rate: float) -> None:
        assert Limit.parse(text).rate == rate

    @pytest.mark.parametrize(
        "unit",
        [
            *("ss", "hs", "ds", "mss", "secss", "minss", "hourss", "dayss", "msecss", "sec s"),
            *("millis", "us", "ns", "w", "week", "weeks", "mo", "month", "y", "year", "hh", "mn"),
        ],
    )
    def test_other_spellings_are_rejected(self, unit: str) -> None:
        for text in (f"1/{unit}", f"10 per 5 {unit}"):
            with pytest.raises(ValueError) as info:
                Limit.parse(text)
            assert str(info.value).startswith("rate must be a str like '10/second'")
            assert str(info.value).endswith(f"got {text!r}")

    @settings(max_examples=300, deadline=None)
    @given(unit=st.text(alphabet="abcdefhilmnorstuwyMSHD", min_size=1, max_size=14))
    def test_a_spelling_not_in_the_list_is_a_value_error(self, unit: str) -> None:
        if unit.lower() in SECONDS:
            assert Limit.parse(f"4/{unit}").rate == float(4 / SECONDS[unit.lower()])
        else:
            with pytest.raises(ValueError, match="rate must be a str like '10/second'"):
                Limit.parse(f"4/{unit}")


# -- names and coercion (issue 9, item 14: what mutants got away with) -------------


class TestNames:
    def test_several_limits_are_named_after_their_normalized_text(self) -> None:
        limits = Limit.parse_many("10 per second; 100 per minute")
        assert limits == (Limit(10, 10), Limit(100 / 60, 100))
        assert [lim.name for lim in limits] == ["10 per second", "100 per minute"]
        limits = Limit.parse_many("  10\t per   second ,1/ms;5 PER 2 Hours ")
        assert [lim.name for lim in limits] == ["10 per second", "1/ms", "5 PER 2 Hours"]
        assert [lim.rate for lim in limits] == [10.0, 1000.0, 5 / 7200]

    def test_a_single_limit_is_named_after_its_text_too(self) -> None:
        # One policy name for "10 per second" alone and beside others.
        assert Limit.parse_many(" 10 per second ")[0].name == "10 per second"
        assert Limit.parse("10 per second").name == "default"

    @pytest.mark.parametrize("text", ["10/s;", ";10/s", "10/s;;1/m", "10/s, ,1/m"])
    def test_an_empty_limit_between_separators_is_a_value_error(self, text: str) -> None:
        with pytest.raises(ValueError) as info:
            Limit.parse_many(text)
        assert str(info.value) == (
            f"rate must not have an empty limit between separators, got {text!r}"
        )

    def test_coerce_keeps_a_limit_and_its_name(self) -> None:
        named = Limit(2, 4, "api")
        assert Limit.coerce(named) is named
        assert Limit.coerce(named, 4) is named
        other = Limit.coerce(named, 9)
        assert (other.rate, other.burst, other.name) == (2.0, 9, "api")
        assert Limit.coerce("10/ms", 3) == Limit(10_000, 3)
        assert Limit.coerce(2.5).name == "default"
        assert Limit.coerce(Fraction(5, 2)) == Limit(2.5, 3)


# -- what mutation testing found unpinned (issue 9, item 14; docs/testing.md) ------


class TestMutationGaps:
    def test_a_limit_shows_its_rate_and_burst(self) -> None:
        assert str(Limit(10, 20)) == "10/s burst 20"
        assert str(Limit(0.5, 1)) == "0.5/s burst 1"
        assert str(Limit.parse("100/minute")) == "1.66667/s burst 100"
        assert str(Limit(2, 4, "api")) == "2/s burst 4 (api)"
        assert str(Limit.parse_many("1/s;5/m")[1]) == "0.0833333/s burst 5 (5/m)"

    def test_rate_and_burst_are_stored_as_float_and_int(self) -> None:
        import enum

        class Size(enum.IntEnum):
            TEN = 10

        limit = Limit(Fraction(5, 2), Size.TEN)
        assert repr(limit) == "Limit(rate=2.5, burst=10, name='default')"
        assert repr(Limit(Decimal("0.5"), 1)) == "Limit(rate=0.5, burst=1, name='default')"
        assert repr(Limit(3, 3)) == "Limit(rate=3.0, burst=3, name='default')"

    @pytest.mark.parametrize("name", ["", "\t", "caf\u00e9", "a\x7f", 'a"b', "a\\b", "a\nb"])
    def test_a_name_outside_printable_ascii_or_with_quotes_is_a_value_error(
        self, name: str
    ) -> None:
        with pytest.raises(ValueError) as info:
            Limit(1, 1, name)
        assert str(info.value) == (
            f"limit name must be printable ASCII without quotes or backslashes, got {name!r}"
        )

    @pytest.mark.parametrize("name", [" ", "~", "X-API", "a b", "!#$%&'()*+,-./:;<=>?@[]^_`{|}"])
    def test_every_other_printable_ascii_name_is_accepted(self, name: str) -> None:
        assert Limit(1, 1, name).name == name

    def test_error_messages_show_values_up_to_100_characters(self) -> None:
        fits = "x" * 98  # repr() adds two quotes: 100 characters
        with pytest.raises(ValueError) as info:
            Limit.parse(fits)
        assert str(info.value).endswith(f", got '{fits}'")
        cut = "x" * 99  # 101 characters: the first 97 and "..."
        with pytest.raises(ValueError) as info:
            Limit.parse(cut)
        assert str(info.value).endswith(", got '" + "x" * 96 + "...")
        with pytest.raises(TypeError) as info:
            Limit.parse_many(5)  # type: ignore[arg-type]
        assert str(info.value) == "rate must be a str like '10/second', got 5"

    def test_a_count_or_span_of_zero_is_a_value_error(self) -> None:
        for text in ("0/s", "1/0s", "1 per 0 minutes", "0 per 0 seconds"):
            with pytest.raises(ValueError) as info:
                Limit.parse(text)
            assert str(info.value) == (
                f"rate must allow at least 1 request per span >= 1, got {text!r}"
            )

    def test_a_parsed_limit_out_of_range_names_the_text(self) -> None:
        text = f"{2**53 + 1}/s"
        with pytest.raises(ValueError) as info:
            Limit.parse(text)
        assert str(info.value) == (
            f"burst must be an integer from 1 to 2**53 (9007199254740992), got {2**53 + 1} "
            f"(parsed from {text!r})"
        )
        digits = "1" * 5000 + "/s"  # beyond int(): the value, cut to 100 characters
        with pytest.raises(ValueError) as info:
            Limit.parse(digits)
        assert str(info.value).endswith(", got '" + "1" * 96 + "...")

    @pytest.mark.parametrize("zero", [0, 0.0, Fraction(0), Decimal(0), Decimal("-0")], ids=repr)
    def test_a_cost_of_zero_of_any_type_is_a_peek(self, zero: object) -> None:
        from limiter.core.costs import validate_cost

        assert validate_cost(zero) == 0.0
        limit = Limit(1, 3)
        used, _ = step(None, T0, limit, 2)
        for state in (None, used):
            new_state, result = step(state, T0, limit, zero)  # type: ignore[call-overload]
            assert new_state is state
            assert (result.allowed, result.remaining) == (True, 3 if state is None else 1)

    @pytest.mark.parametrize("one", [1, 1.0, Fraction(1), Decimal(1), Decimal("1.000")], ids=repr)
    def test_a_cost_of_one_of_any_type_takes_one_token(self, one: object) -> None:
        from limiter.core.costs import validate_cost

        assert validate_cost(one) == 1.0
        state, result = step(None, T0, Limit(1, 3), one)  # type: ignore[call-overload]
        assert (result.allowed, result.remaining, state) == (True, 2, complex(1.0, T0))

    def test_a_peek_at_a_full_bucket_near_2_53_tokens_shows_the_burst(self) -> None:
        # (window + slack) * rate rounds to 2**53 here: remaining is clamped.
        for rate in (1e-200, 3.0, 7.0):
            state, result = step(None, T0, Limit(rate, 2**53 - 1), 0)
            assert state is None
            assert (result.allowed, result.remaining) == (True, 2**53 - 1)

    def test_a_deficit_at_the_edge_of_the_window_is_kept_as_it_is(self) -> None:
        # Exactly the window plus the slack: not beyond it, so not re-anchored
        # (and a request that takes nothing returns the same state: no write).
        limit = Limit(1, 1)
        edge = complex(limit.window + limit.slack, T0)
        for cost in (0, 1):
            state, result = step(edge, T0, limit, cost)
            assert state is edge
            assert result.reset_after == 1.000001
        _, result = step(edge, T0, limit, 1)
        assert not result.allowed
        assert result.retry_after == pytest.approx(1.000001, rel=1e-12, abs=0)

    def test_step_all_reports_the_later_reset_among_equally_full_limits(self) -> None:
        limits = [Limit(10, 10, "fast"), Limit(1, 10, "slow"), Limit(5, 10, "mid")]
        _, result = step_all([None] * 3, T0, limits)
        assert (result.policy, result.remaining, result.reset_after) == ("slow", 9, 1.0)
        _, result = step_all([None] * 3, T0, limits[::-1])
        assert (result.policy, result.remaining, result.reset_after) == ("slow", 9, 1.0)

    def test_step_all_reports_the_emptier_among_equally_long_waits(self) -> None:
        # a: 1 token left, 1 token/s; b: 2 left, 0.5/s.  A cost of 3 waits 2 s in both.
        a, b = Limit(1, 3, "a"), Limit(0.5, 4, "b")
        states = [complex(2.0, T0), complex(4.0, T0)]
        for order in (slice(None), slice(None, None, -1)):
            _, result = step_all(states[order], T0, [a, b][order], 3)
            assert [r.retry_after for r in result.results] == [2.0, 2.0]
            assert (result.allowed, result.policy, result.remaining) == (False, "a", 1)

    def test_full_at_is_when_the_bucket_is_full_again(self) -> None:
        from limiter.core.state import keep_until

        limit = Limit(2, 10)
        state, _ = step(None, T0, limit, 4)  # 4 tokens short: 2 s to refill
        assert keep_until(state) == T0 + 2.0
        assert step(state, T0 + 2.0, limit, 0)[1].remaining == 10
        assert step(state, T0 + 1.9, limit, 0)[1].remaining == 9


class TestRefund:
    """``Refund(t)``: the one negative cost, which gives tokens back."""

    @settings(max_examples=300, deadline=None)
    @given(
        rate=st.sampled_from([0.5, 1.0, 3.0, 10.0]),
        burst=st.integers(1, 20),
        history=st.lists(
            st.tuples(st.floats(-2.0, 5.0), st.sampled_from([0, 1, 2, 0.5, 7])), max_size=12
        ),
        cost=st.sampled_from([0, 1, 2, 0.25, 3, 19]),
    )
    def test_a_refund_undoes_a_charge_and_never_fills_beyond_burst(
        self, rate: float, burst: int, history: List[Tuple[float, float]], cost: float
    ) -> None:
        from limiter.core.costs import Refund

        limit = Limit(rate, burst)
        state: Optional[complex] = None
        now = 1000.0
        for delta, used in history:
            now += delta
            state = step(state, now, limit, used)[0]
        before = step(state, now, limit, 0)[1]
        charged_state, charged = step(state, now, limit, cost)
        refunded_state, refunded = step(charged_state, now, limit, Refund(cost))
        assert refunded.allowed
        if refunded_state is not None:  # None: a refund of 0 on a key never stored
            assert 0.0 <= refunded_state.real <= limit.window + limit.slack
        assert refunded.remaining <= burst
        if charged.allowed:  # the charge is undone (up to float rounding)
            assert refunded.reset_after == pytest.approx(before.reset_after, abs=1e-9)
            assert refunded.remaining == before.remaining
        # A refund more than was ever taken only fills the bucket.
        full_state, full = step(refunded_state, now, limit, Refund(burst * 10))
        assert (full.remaining, full.reset_after) == (burst, 0.0)
        assert full_state == complex(0.0, full_state.imag)

    def test_refund_amounts_are_checked_like_costs(self) -> None:
        from limiter.core.costs import Refund

        assert repr(Refund(2)) == "Refund(2.0)" and float(Refund(2)) == -2.0
        with pytest.raises(ValueError, match="got -1"):
            Refund(-1)
        with pytest.raises(ValueError, match="got nan"):
            Refund(math.nan)
        with pytest.raises(TypeError, match="got True"):
            Refund(True)
        # validate_cost still refuses every negative cost, a Refund's value included.
        with pytest.raises(ValueError):
            step(None, 0.0, Limit(1, 1), -1.0)


# -- admit: step applied to a dict in place (MemoryStore's allow) ---------------

T0 = 1_700_000_000.0


@settings(max_examples=300, deadline=None)
@given(
    rate=st.sampled_from([0.5, 1.0, 3.0, 10.0, 1e4, 1e9, 1e-290]),
    burst=st.sampled_from([1, 2, 5, 40, 10**9, 2**53]),
    other=st.sampled_from([None, Limit(1.0, 1), Limit(0.01, 2**20)]),
    ops=st.lists(
        st.tuples(
            st.sampled_from([0.0, 1e-7, 0.001, 0.1, 0.5, 1.0, 7.0, -0.3, -1.0, -2.0, -1e9]),
            st.sampled_from([1, 1, 1, 0, 2, 0.5, 3.0, 10**30, Refund(1)]),
        ),
        max_size=40,
    ),
)
def test_admit_agrees_with_step_exactly(
    rate: float, burst: int, other: Optional[Limit], ops: list
) -> None:
    """Same decision and same stored state (bit for bit) as ``step`` after any history,
    including a state left by another limit and clocks that go back."""
    limit = Limit(rate, burst)
    table: dict = {}
    state: Optional[complex] = None
    now = T0
    if other is not None:  # a deficit written under another limit
        state, _ = step(None, now, other, other.burst)
    if state is not None:
        table["k"] = state
    for delta, cost in ops:
        now += delta
        state = table.get("k")
        expected_state, expected = step(state, now, limit, cost, False)
        got = admit(table, "k", now, limit, cost)
        if state is None:
            assert got is None and table == {}  # a new key is the caller's to insert
            got = expected
            if expected_state is not None:
                table["k"] = expected_state
        assert got is expected
        stored = table.get("k")
        assert stored == expected_state and repr(stored) == repr(expected_state)
        if expected_state is state:
            assert stored is state  # nothing written when step changed nothing


def test_admit_of_a_full_bucket_at_the_burst_of_one() -> None:
    # Idle: the debt is clamped to 0 and one token (interval) fits a burst of 1.
    limit = Limit(3.0, 1)
    table = {"k": complex(limit.interval, T0)}
    assert admit(table, "k", T0 + 10.0, limit) is True
    assert table["k"] == complex(limit.interval, T0 + 10.0)
    assert admit(table, "k", T0 + 10.0, limit) is False
    assert table["k"] == complex(limit.interval, T0 + 10.0)


@pytest.mark.parametrize("now", [math.nan, math.inf, -math.inf])
def test_admit_refuses_a_non_finite_now_like_step(now: float) -> None:
    limit = Limit(1.0, 2)
    table = {"k": complex(0.5, T0)}
    with pytest.raises(ValueError, match="now must be a finite"):
        admit(table, "k", now, limit)
    assert table == {"k": complex(0.5, T0)}


@pytest.mark.parametrize("cost", [-1, math.nan, "1", True])
def test_admit_refuses_a_bad_cost_like_step(cost: object) -> None:
    table = {"k": complex(0.0, T0)}
    with pytest.raises((TypeError, ValueError)) as info:
        admit(table, "k", T0, Limit(1.0, 2), cost)  # type: ignore[arg-type]
    with pytest.raises(type(info.value)) as expected:
        step(complex(0.0, T0), T0, Limit(1.0, 2), cost)  # type: ignore[arg-type]
    assert str(info.value) == str(expected.value)


def test_ceiling_is_window_plus_slack() -> None:
    for limit in (Limit(10, 20), Limit(1e6, 5), Limit(2.5e-300, 1)):
        assert limit.ceiling == limit.window + limit.slack


class TestDebt:
    """A ``Charge`` may leave a bucket owing tokens, at most one burst."""

    def test_a_peek_of_a_bucket_in_debt_is_admitted_and_takes_nothing(self) -> None:
        limit = Limit(1, 60)
        state, _ = step(None, T0, limit, Charge(90))  # owes 30 tokens
        assert state == complex(90.0, T0)
        same, r = step(state, T0, limit, 0)
        assert same is state
        assert (r.allowed, r.remaining, r.reset_after, r.retry_after) == (True, 0, 90.0, 0.0)
        assert not step(state, T0, limit, 1)[1].allowed

    def test_a_charge_owes_at_most_one_burst_and_is_repaid_by_refilling(self) -> None:
        limit = Limit(1, 60)
        state, r = step(None, T0, limit, Charge(10**9))
        assert (r.allowed, r.remaining, r.reset_after) == (True, 0, 120.0)
        denied = step(state, T0 + 60.5, limit, 1)[1]
        assert not denied.allowed and denied.retry_after == pytest.approx(0.5)
        assert step(state, T0 + 61, limit, 1)[1].allowed

    def test_a_refund_repays_debt_and_never_overfills(self) -> None:
        limit = Limit(1, 10)
        state, _ = step(None, T0, limit, Charge(15))  # owes 5 tokens: 15 s to full
        state, r = step(state, T0, limit, Refund(7))
        assert state == complex(8.0, T0) and (r.allowed, r.remaining) == (True, 2)
        state, r = step(state, T0, limit, Refund(100))
        assert state == complex(0.0, T0) and r.remaining == 10

    def test_a_charge_on_a_quota_uses_units_up_to_twice_its_count(self) -> None:
        quota = Quota(10, per="day")
        state, r = step(None, T0, quota, Charge(25))
        assert (r.allowed, r.remaining) == (True, 0)
        assert state.real * 2.0**600 == 20.0  # capped at 2 * count
        assert not step(state, T0, quota, 1)[1].allowed


class TestLockout:
    """``step_all`` with a ``Lockout`` last: the rules in its comment."""

    LIMITS = (Limit(0.01, 1, "a"), Lockout(3, within=60, duration=900))  # a token per 100 s

    def run(self, states: list, now: float, cost: float = 1) -> Tuple[list, object]:
        return step_all(states, now, self.LIMITS, cost)

    def test_the_nth_breach_of_a_run_locks_the_key_out_for_duration(self) -> None:
        states, r = self.run([None, None], T0)  # admitted: no breach
        assert r.allowed and states[1] is None
        for i in (1, 2):
            states, r = self.run(states, T0 + i)
            assert not r.allowed and not r.locked_out and r.policy == "a"
        states, r = self.run(states, T0 + 2.5)  # third breach
        assert r.locked_out and r.kind == "lockout" and r.policy == "lockout"
        assert (r.limit, r.remaining, r.retry_after, r.window) == (1, 0, 900.0, 100.0)
        assert keep_until(states[1]) == T0 + 902.5
        # Full bucket, still locked; refused checks neither count nor extend it.
        states2, r = self.run(states, T0 + 500)
        assert r.locked_out and r.retry_after == pytest.approx(402.5)
        assert states2[1] is states[1] and [x.policy for x in r.results] == ["a", "lockout"]
        assert r.results[0].allowed  # the limit was peeked: nothing taken
        states, r = self.run(states2, T0 + 902.5)  # waited exactly retry_after
        assert r.allowed and not r.locked_out

    def test_a_run_lasts_within_seconds_from_its_first_breach(self) -> None:
        states, _ = self.run([None, None], T0)
        states, _ = self.run(states, T0 + 0.5)  # breach 1: run until T0 + 60.5
        states, _ = self.run(states, T0 + 0.6)  # breach 2
        states, r = self.run(states, T0 + 61)  # run over: breach 1 of a new run
        assert not r.locked_out and r.policy == "a" and states[1].imag == T0 + 121
        states, r = self.run(states, T0 + 61.5)
        states, r = self.run(states, T0 + 61.6)
        assert r.locked_out

    def test_a_clock_stepped_back_cannot_lengthen_a_lockout(self) -> None:
        states = [None, None]
        for t in (T0, T0, T0, T0):
            states, r = self.run(states, t)
        assert r.locked_out and r.retry_after == 900.0
        states, r = self.run(states, T0 - 86400)  # the clock went back a day
        assert r.locked_out and r.retry_after == 900.0  # not a day more
        assert states[1].imag == T0 - 86400 + 900

    def test_a_lockout_alone_in_step_reports_and_takes_nothing(self) -> None:
        lockout = self.LIMITS[1]
        assert step(None, T0, lockout, 1)[1].allowed
        with pytest.raises(ValueError, match="at least one limit before it"):
            step_all([None], T0, [lockout])
        with pytest.raises(TypeError, match="lockout breaches must be an int"):
            Lockout(2.5, 60, 900)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="lockout duration must be a number of seconds"):
            Lockout(3, 60, 0)
        with pytest.raises(ValueError, match="lockout within"):
            Lockout(3, float("nan"), 10)


class TestPerLimitCosts:
    def test_each_limit_pays_its_own_amount_or_none_pays(self) -> None:
        limits = [Limit(1, 10, "requests"), Limit(100, 1000, "tokens")]
        states, r = step_all([None, None], T0, limits, (1, 350))
        assert [x.remaining for x in r.results] == [9, 650]
        states, r = step_all(states, T0, limits, [1, 350])
        states2, r = step_all(states, T0, limits, (1, 350))  # 300 tokens left
        assert not r.allowed and r.policy == "tokens" and states2 == states
        assert [(x.allowed, x.retry_after) for x in r.results] == [(True, 0.0), (False, 0.5)]
        states, r = step_all(states, T0, limits, (0, 300))
        assert r.allowed and [x.remaining for x in r.results] == [8, 0]

    def test_a_run_counted_under_more_breaches_shows_none_left_not_fewer(self) -> None:
        five = complex(5 * 2.0**-600, T0 + 10)  # a run of 5 breaches
        r = step(five, T0, Lockout(3, 60, 900))[1]
        assert (r.allowed, r.remaining) == (True, 0)
