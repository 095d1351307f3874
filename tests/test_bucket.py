"""The pure step: its rules, checked exactly, and against a plain reference model."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter.bucket import Limit, step, step_all

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

    @pytest.mark.parametrize("cost", [-1, -0.5, float("nan"), "1", None])
    def test_bad_cost_is_a_value_error_naming_it(self, cost: object) -> None:
        with pytest.raises(ValueError, match="cost must be a number >= 0, got"):
            step(None, T0, Limit(1, 1), cost)  # type: ignore[arg-type]

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
        assert not result.allowed
        assert (result.remaining, result.reset_after) == (0, 2.0)
        assert result.retry_after == pytest.approx(1.0)
        assert state2 == complex(2.0, T0)  # stored: refilling starts now
        assert step(state2, T0 + 1, Limit(1, 2), 1)[1].allowed

    def test_headers_fields_never_negative_or_nan(self) -> None:
        limit = Limit(3, 2)
        state = None
        for now, cost in [(T0, 2), (T0 - 50, 1), (T0 - 49.9, 2), (T0 + 1, 5), (T0 + 1, 0)]:
            state, r = step(state, now, limit, cost)
            assert r.remaining >= 0 and r.reset_after >= 0 and r.retry_after >= 0
            assert not math.isnan(r.reset_after)


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

    @pytest.mark.parametrize("rate", [0, -1, float("nan"), float("inf"), "x", None, True])
    def test_bad_rate(self, rate: object) -> None:
        with pytest.raises(ValueError, match="rate must be a positive") as info:
            Limit(rate, 1)  # type: ignore[arg-type]
        assert repr(rate) in str(info.value)

    @pytest.mark.parametrize("burst", [0, -3, 2.5, 2.0, "3", None, True])
    def test_bad_burst(self, burst: object) -> None:
        with pytest.raises(ValueError, match="burst must be an integer >= 1") as info:
            Limit(1, burst)  # type: ignore[arg-type]
        assert repr(burst) in str(info.value)

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
