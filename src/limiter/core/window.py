"""Window policies, "at most ``count`` units per ``period``": ``FixedWindow``, ``SlidingWindow``.

The rules, cited by number in the code (the why, and how they compare with
the token bucket and the peers: docs/concepts.md, "Windows"):

1. Windows last ``period`` seconds.  Epoch-aligned windows (``FixedWindow``'s
   default, and the sliding window's) are ``[k*period, (k+1)*period)``; the
   one holding ``now + TIME_EPSILON`` is current.  ``anchor="first"``: a
   key's window starts at the request that finds none open.
2. ``FixedWindow``: a request of cost ``c`` is admitted when the units used
   in the current window plus ``c`` are at most ``count``.
   ``SlidingWindow``: when ``floor(estimate) + c <= count``, where
   ``estimate`` is the current window's units plus the previous window's
   weighted by the share of it still within the last ``period`` seconds
   (rounded down, as limits' sliding-window counter does).  Admitted, it
   takes ``c``; denied, nothing (all or nothing).
3. ``c == 0`` is a peek; ``c > count`` is never admitted (``retry_after`` inf).
4. ``Refund(t)`` gives back up to what the window that took it still counts
   (``taken_at``; a window no longer counted gets nothing); without
   ``taken_at``, to the current window.
5. ``Charge(t)`` is always admitted; a window's units stop at ``2 * count``.
6. A state whose window starts more than ``CLOCK_TOLERANCE`` after ``now``
   (a clock stepped back) has its units moved to the window holding ``now``,
   stored even on denial; within the tolerance the request counts in the
   state's own window.  A count's state keeps only its end: its window is
   taken to start that end less the current window's length, and never
   before the current window's end (exact for ``FixedWindow``).
7. ``retry_after``: seconds until the request would be admitted if no other
   arrives (a fixed window's end); ``reset_after``: until nothing is counted.
8. States (``limiter.core.state``): ``count_state(used, end)`` for a fixed
   window (as a ``Quota``'s), ``sliding_state(previous, current, until)``.

No I/O, no clock; ``backends/redis/bucket.lua`` and ``backends/postgres/apply.sql``
mirror the steps.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Dict, Literal, Optional, Tuple, TypeVar, Union

from limiter.core._values import Frozen, bounded_float, show, whole_count
from limiter.core.costs import counted_cost
from limiter.core.limits import CLOCK_TOLERANCE, TIME_EPSILON
from limiter.core.parse import parse_period, split_rates
from limiter.core.result import RateLimitResult
from limiter.core.state import (
    State,
    count_state,
    read_count,
    read_sliding,
    sliding_state,
)

_new_result = tuple.__new__
_trunc = math.trunc
_floor = math.floor
_isfinite = math.isfinite
_ONE = 1  # ``cost is _ONE``: CPython's cached small int, the default cost

#: The shortest and longest period accepted, in seconds (a millisecond; ~34,800 years).
MIN_PERIOD = 1e-3
MAX_PERIOD = float(2**40)
_ANCHORS = ("epoch", "first")
W = TypeVar("W", bound="_Window")


def counting_fields(count: int, seconds: float) -> Dict[str, Any]:
    """What every counting policy (a window, a ``Quota``) of ``count`` units per ``seconds``
    sets; ``max_debt`` is two windows, as a ``Charge`` stops at ``2 * count`` (rule 5).
    """
    return {"count": count, "slack": TIME_EPSILON, "max_debt": seconds * 2.0}


def _period(value: object) -> float:
    """``value`` as a float number of seconds from ``MIN_PERIOD`` to ``MAX_PERIOD``."""
    bounds = f"from {MIN_PERIOD!r} to 2**40"
    return bounded_float(value, "period", "a number of seconds", bounds, MIN_PERIOD, MAX_PERIOD)


class _Window(Frozen):
    """What both window policies share: ``count`` units per ``period`` seconds, a name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError  # each window policy has its own

    count: int
    period: float
    window: float

    def _setup(self, count: int, period: object, name: str, **extra: object) -> None:
        whole_count(count, "window count")
        seconds = _period(period)
        fields = counting_fields(count, seconds)
        self._freeze(name, count, seconds, period=seconds, window=seconds, **fields, **extra)

    @classmethod
    def parse(cls, text: str, **options: Any) -> Any:
        """The policy of a rate string: ``"10/minute"`` is 10 units per 60 seconds."""
        count, seconds = parse_period(text)
        return cls(count, seconds, **options)

    @classmethod
    def parse_many(cls, text: str, **options: Any) -> Tuple[Any, ...]:
        """``parse`` of each rate of ``"10/second;1000/hour"``, named after its own text."""
        return tuple(
            cls.parse(part, name=" ".join(part.split()), **options) for part in split_rates(text)
        )

    def numbered(self: W, i: int) -> W:
        """This window named apart as the ``i``-th of a limiter's policies."""
        return self.renamed(f"{self.count}per{self.period:g}s#{i}")


def fixed_step(
    state: Optional[State], now: float, policy: FixedWindow, cost: float = 1, detail: bool = True
) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
    """``limiter.step`` for a ``FixedWindow`` (``FixedWindow.step``, ``step_function``)."""
    if cost is _ONE and _isfinite(now):  # the usual cost: counted_cost's answer, without it
        value, forced, taken = 1.0, False, None
    else:
        value, forced, taken = counted_cost(cost, policy.count, now)  # step's errors, in order
    if policy.anchor == "epoch":
        # epoch_window's usual case inline (CONTRIBUTING.md, "Hot paths"); it
        # is asked only where rounding gives a window not holding the moment.
        period = policy.period
        moment = now + TIME_EPSILON
        start = _floor(moment / period) * period
        end = start + period
        if not start <= moment < end:
            start, end = epoch_window(moment, period)
        return count_step(state, now, policy, value, forced, taken, start, end, detail)
    state, used, start, end = policy._first(state, now)
    return count_step(state, now, policy, value, forced, taken, start, end, detail, used)


class FixedWindow(_Window):
    """At most ``count`` units (an int from 1 to 2**53) per window of ``period`` seconds
    (0.001 to 2**40), aligned to the epoch or (``anchor="first"``) started by a key's
    first request.  Wrong types: ``TypeError``; values: ``ValueError``.  Rules above;
    see docs/concepts.md, "Windows".
    """

    kind: ClassVar[Literal["fixed-window"]] = "fixed-window"
    _params = ("count", "period", "anchor")
    _positional = 2

    anchor: str

    def __init__(
        self, count: int, period: float, anchor: str = "epoch", name: str = "default"
    ) -> None:
        if not isinstance(anchor, str):
            raise TypeError(f"anchor must be 'epoch' or 'first' (a str), got {show(anchor)}")
        if anchor not in _ANCHORS:
            raise ValueError(f"anchor must be 'epoch' or 'first', got {show(anchor)}")
        self._setup(count, period, name, anchor=anchor)

    @property
    def label(self) -> str:
        """This policy in a limiter's default name (``"10/60s:fixed"``)."""
        suffix = "" if self.anchor == "epoch" else "@first"
        return f"{self.count}/{self.period:g}s:fixed{suffix}"

    def bounds(self, moment: float) -> Tuple[float, float]:
        """``(start, end)`` of the epoch-aligned window holding ``moment`` (rule 1)."""
        return epoch_window(moment, self.period)

    #: Called directly by ``MemoryStore.bind`` (CONTRIBUTING.md, "Hot paths").
    step_function = staticmethod(fixed_step)

    def _first(
        self, state: Optional[State], now: float
    ) -> Tuple[Optional[State], float, float, float]:
        """``(state, used, start, end)`` of the window of ``anchor="first"`` (rules 1, 6)."""
        period = self.period
        if state is not None:
            used, end = read_count(state)
            if now + TIME_EPSILON < end:
                start = end - period
                if start <= now + CLOCK_TOLERANCE:
                    return state, used, start, end
                return count_state(used, now + period), used, now, now + period  # rule 6
        return state, 0.0, now, now + period

    def __str__(self) -> str:
        return f"{self.count} per {self.period:g}s fixed window ({self.name})"


def epoch_window(moment: float, period: float) -> Tuple[float, float]:
    """``(k * period, k * period + period)`` holding ``moment`` (seconds; rule 1), ``k``
    being ``floor(moment / period)`` moved by one where the division rounded across.
    """
    k = _floor(moment / period)
    start = k * period
    if start > moment:
        k -= 1
        start = k * period
    end = start + period
    if end <= moment:
        start = (k + 1) * period
        end = start + period
    return start, end


def count_step(
    state: Optional[State],
    now: float,
    policy: Any,
    cost: float,
    forced: bool,
    taken_at: Optional[float],
    start: float,
    end: float,
    detail: bool = True,
    used: Optional[float] = None,
) -> Tuple[Optional[State], Any]:
    """Rules 2 to 7 (a ``Quota``'s too): apply ``cost`` (``counted_cost``'s answer, with
    ``forced`` and ``taken_at``) in the window ``[start, end)`` holding ``used`` units if
    given.  Returns ``(state, result)`` (``allowed`` without ``detail``).
    """
    if used is not None:
        pass
    elif state is None:
        used = 0.0
    else:
        used, stored_end = read_count(state)
        if now + TIME_EPSILON >= stored_end:
            used = 0.0  # its window is over
        elif stored_end <= end:
            end = stored_end
        else:
            # Its start (rule 6): several windows ahead too, not only the next
            # one (a clock stepped back further than a window's length).
            begins = stored_end - (end - start)
            if begins < end:
                begins = end
            if now < begins - CLOCK_TOLERANCE:
                state = count_state(used, end)  # a clock stepped back
            else:
                end = stored_end
    reset = end - now
    window = policy.window
    if cost <= 0.0:
        new_state = state
        if taken_at is not None and taken_at + TIME_EPSILON < start:
            pass  # rule 4: units taken in an earlier window, forgiven at its end
        elif cost < 0.0 and used > 0.0:
            used += cost
            if used < 0.0:
                used = 0.0
            new_state = count_state(used, end)
        result = _count_result(policy, True, used, reset, 0.0, window) if detail else True
        return new_state, result
    after = used + cost
    if forced:  # rule 5
        most = 2.0 * policy.burst
        if not after <= most:  # also inf
            after = most
    if forced or after <= policy.burst:
        if not detail:
            return count_state(after, end), True
        return count_state(after, end), _count_result(policy, True, after, reset, 0.0, window)
    if not detail:
        return state, False
    retry = reset if cost <= policy.burst else math.inf
    return state, _count_result(policy, False, used, reset, retry, window)


def _count_result(
    policy: Any, allowed: bool, used: float, reset: float, retry: float, window: float
) -> RateLimitResult:
    """``policy``'s result with ``used`` units taken: ``remaining`` is what is left, at least 0."""
    remaining = _trunc(policy.burst - used)
    return _new_result(
        RateLimitResult,
        (
            allowed,
            policy.burst,
            remaining if remaining > 0 else 0,
            reset,
            retry,
            window,
            (),
            policy.name,
            policy.kind,
        ),
    )


def sliding_step(
    state: Optional[State], now: float, policy: SlidingWindow, cost: float = 1, detail: bool = True
) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
    """``limiter.step`` for a ``SlidingWindow`` (``SlidingWindow.step``, ``step_function``)."""
    value, forced, taken = counted_cost(cost, policy.count, now)
    new_state, result = slide(state, now, policy, value, forced, taken)
    return new_state, (result if detail else result[0])


class SlidingWindow(_Window):
    """At most ``count`` units in any ``period`` seconds, by the sliding-window counter
    (rule 2), with ``FixedWindow``'s types and ranges.  See docs/concepts.md, "The
    sliding-window counter".
    """

    kind: ClassVar[Literal["sliding-window"]] = "sliding-window"
    _params = ("count", "period")
    _positional = 2

    def __init__(self, count: int, period: float, name: str = "default") -> None:
        self._setup(count, period, name)

    @property
    def label(self) -> str:
        """This policy in a limiter's default name (``"10/60s:sliding"``)."""
        return f"{self.count}/{self.period:g}s:sliding"

    #: As ``FixedWindow.step_function``.
    step_function = staticmethod(sliding_step)

    def __str__(self) -> str:
        return f"{self.count} per {self.period:g}s sliding window ({self.name})"


def slide(
    state: Optional[State],
    now: float,
    policy: SlidingWindow,
    cost: float,
    forced: bool = False,
    taken_at: Optional[float] = None,
) -> Tuple[Optional[State], RateLimitResult]:
    """``SlidingWindow``'s step once ``cost`` is checked (as ``count_step``'s)."""
    period = policy.period
    moment = now + TIME_EPSILON
    start, end = epoch_window(moment, period)  # rule 1
    until = end + period
    previous = current = 0.0
    if state is not None:
        stored_prev, stored_cur, stored_until = read_sliding(state)
        gap = start - (stored_until - 2.0 * period)  # whole periods, give or take rounding
        if gap < -0.5 * period:  # the state's window is ahead of now (rule 6)
            previous, current = stored_prev, stored_cur
            if stored_until - 2.0 * period - now > CLOCK_TOLERANCE:
                state = sliding_state(previous, current, until)  # moved, stored even on denial
            else:
                start, end, until = stored_until - 2.0 * period, stored_until - period, stored_until
        elif gap < 0.5 * period:
            previous, current = stored_prev, stored_cur
        elif gap < 1.5 * period:
            previous = stored_cur
    weight = (end - moment) / period
    if weight > 1.0:
        weight = 1.0
    if cost < 0.0:  # rule 4: a Refund
        if taken_at is None or taken_at + TIME_EPSILON >= start:
            if current > 0.0:
                current = max(current + cost, 0.0)
                state = sliding_state(previous, current, until)
        elif taken_at + TIME_EPSILON >= start - period and previous > 0.0:
            previous = max(previous + cost, 0.0)
            state = sliding_state(previous, current, until)
        return state, _sliding_result(policy, True, previous, current, weight, now, end, 0.0)
    estimate = previous * weight + current
    if cost == 0.0:
        return state, _sliding_result(policy, True, previous, current, weight, now, end, 0.0)
    if forced:  # rule 5
        current += cost
        most = 2.0 * policy.count
        if not current <= most:
            current = most
    elif _floor(estimate) + cost <= policy.count:  # rule 2 (cost inf: never)
        current += cost
    else:
        retry = _sliding_retry(policy, previous, current, end, cost) - now
        return state, _sliding_result(
            policy, False, previous, current, weight, now, end, retry if retry > 0.0 else 0.0
        )
    new_state = sliding_state(previous, current, until)
    return new_state, _sliding_result(policy, True, previous, current, weight, now, end, 0.0)


def _sliding_retry(
    policy: SlidingWindow, previous: float, current: float, end: float, cost: float
) -> float:
    """When a denied request of ``cost`` would pass, no other arriving (rule 7): the
    estimate falls below ``floor(count - cost) + 1`` in the current window or the next.
    """
    if not cost <= policy.count:  # rule 3 (inf)
        return math.inf
    period = policy.period
    target = _floor(policy.count - cost) + 1.0
    if current < target and previous > 0.0:
        return end - (target - current) * period / previous
    if current > 0.0:
        return end + period - target * period / current
    return end  # no units counted: only float rounding denies, and the window's end is a bound


def _sliding_result(
    policy: SlidingWindow,
    allowed: bool,
    previous: float,
    current: float,
    weight: float,
    now: float,
    end: float,
    retry: float,
) -> RateLimitResult:
    """``policy``'s result: ``remaining`` is ``count - floor(estimate)``, at least 0."""
    remaining = policy.count - _floor(previous * weight + current)
    if current > 0.0:
        reset = end + policy.period - now
    elif previous > 0.0:
        reset = end - now
    else:
        reset = 0.0
    return _new_result(
        RateLimitResult,
        (
            allowed,
            policy.count,
            remaining if remaining > 0 else 0,
            reset,
            retry,
            policy.period,
            (),
            policy.name,
            "sliding-window",
        ),
    )
