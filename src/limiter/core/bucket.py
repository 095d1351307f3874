"""The token bucket's step: one pure function, ``step``.

A bucket holds at most ``limit.burst`` tokens and refills continuously at
``limit.rate`` tokens per second; a key never seen owns a full bucket.  The
rules, cited by number in the code (the why of each: docs/concepts.md):

1. A request of cost ``c`` is admitted when ``c`` tokens are in the bucket
   and takes them; otherwise it is denied and takes nothing.
2. ``c == 0`` is a peek: admitted, takes nothing, stores nothing.
3. ``c > burst`` is never admitted: denied with ``retry_after = inf``,
   whatever its size.  ``c`` is any real number (``validate_cost``): one too
   large for a float counts as ``inf``, a positive one too small as the
   smallest float; negative or NaN is a ``ValueError``, ``bool`` or a
   non-number a ``TypeError``.
4. ``Refund(t)`` gives ``t`` tokens back, always admitted, never beyond ``burst``.
5. ``Charge(t)`` takes ``t`` tokens unconditionally; the bucket may owe
   tokens, at most one burst (``Limit.max_debt``, two windows of deficit).
6. State written under another limit is read under this one, never owing
   more than ``max_debt``; a deeper state is stored at that bound.
7. A ``now`` before the state's ``updated_at``: up to ``CLOCK_TOLERANCE``
   behind, the request is applied at ``updated_at`` (no refill, no
   re-anchoring); further behind, the clock stepped back: the deficit is
   kept, re-anchored at ``now`` and stored even on denial.
8. Comparisons carry ``limit.slack`` seconds (``TIME_EPSILON``, less above
   1000 tokens/s): a client waiting exactly ``retry_after`` gets in.
9. The state is ``complex(debt, updated_at)`` (``state.bucket_state``): the
   seconds of refill the bucket lacked at ``updated_at``; it is full again
   at ``state.keep_until``.  ``step`` builds and reads it inline (hot path).
   A state of another shape (another kind of policy wrote the key) is a
   full bucket, left as it is unless the request takes tokens (``state``).
10. A ``Quota`` or ``Lockout`` given to ``step`` is handed to its own ``step``.

No I/O, no clock; stores call ``step`` under their own atomicity, and
``backends/redis/bucket.lua`` mirrors it (a property test holds them equal).
"""

from __future__ import annotations

import math
from typing import Any, Literal, Optional, Tuple, Union, overload

from limiter.core.costs import Charge, Refund, cost_or_inf
from limiter.core.limits import CLOCK_TOLERANCE, Limit, Policy
from limiter.core.result import RateLimitResult
from limiter.core.state import State, bucket_state

_ONE = 1  # ``cost is _ONE``: CPython's cached small int, the default cost

# Hot path (CONTRIBUTING.md "Hot paths"): a global call costs less than an attribute's.
_new_result = tuple.__new__
_trunc = math.trunc
_isfinite = math.isfinite


@overload
def step(
    state: Optional[State],
    now: float,
    limit: Policy,
    cost: float = ...,
    detail: Literal[True] = ...,
) -> Tuple[Optional[State], RateLimitResult]: ...


@overload
def step(
    state: Optional[State], now: float, limit: Policy, cost: float, detail: Literal[False]
) -> Tuple[Optional[State], bool]: ...


def step(
    state: Optional[State], now: float, limit: Any, cost: float = 1, detail: bool = True
) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
    """Apply one request of ``cost`` tokens at time ``now`` (seconds) to a bucket (the
    rules above).  Returns ``(new_state, result)`` (the ``bool`` decision alone with
    ``detail=False``); the same ``state`` when nothing is to be written.
    """
    # One function on purpose, longer than most: every check runs it, and each
    # helper call would cost more than a rule (CONTRIBUTING.md "Hot paths").
    if limit.__class__ is not Limit and limit.kind != "bucket":  # rule 10
        return limit.step(state, now, cost, detail)  # type: ignore[no-any-return]
    if cost is _ONE:
        # The default and usual cost (a cached int): valid under any limit, and
        # 1 * interval is interval, without the slower int-by-float product.
        charge = limit.interval
    else:
        if (cls := cost.__class__) is float:
            if not 0.0 <= cost <= limit.burst:  # also NaN
                cost = cost_or_inf(cost, limit.burst)
        elif cls is not int or not 0 <= cost <= limit.burst:
            if cls is Refund or cls is Charge:
                return _settle(state, now, limit, cost, detail)
            cost = cost_or_inf(cost, limit.burst)
        charge = cost * limit.interval
    if not _isfinite(now):
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    try:  # free unless raised (3.11): the AttributeError of a tuple's .imag
        if state is None:
            debt = 0.0
        elif now < (updated_at := state.imag):  # type: ignore[union-attr]  # rule 7: _read
            state, debt, now = _read(state, now, limit)
        else:  # _read's usual case, inline (hot path)
            debt = state.real - (now - updated_at)  # type: ignore[union-attr]
            if debt < 0.0:
                debt = 0.0
    except AttributeError:  # a tuple: another shape's state, a full bucket (rule 9)
        state, debt, now = _read(state, now, limit)
    ceiling = limit.ceiling  # window + slack
    if debt > ceiling:  # rules 5 and 6
        # A deeper state is stored at the bound so refilling starts there.
        if debt > limit.max_debt:
            state = bucket_state(debt := limit.max_debt, now)
        if cost == 0:  # a peek is admitted, in debt too
            return _settle(state, now, limit, 0.0, detail)
    after = debt + charge
    if after <= ceiling:
        # ``after + now * 1j`` is ``complex(after, now)``, exactly (after >= 0 and
        # now finite; at most a zero's sign differs), in a quarter less time.
        new_state = state if cost == 0 else after + now * 1j
        if not detail:
            return new_state, True
        window = limit.window
        # trunc() truncates like int(), faster; the clamp keeps the slack from
        # showing a token too many.
        remaining = _trunc((window - after + limit.slack) * limit.rate)
        if remaining > limit.burst:
            remaining = limit.burst
        return new_state, _new_result(
            RateLimitResult,
            (True, limit.burst, remaining, after, 0.0, window, (), limit.name, "bucket"),
        )
    if not detail:
        return state, False
    window = limit.window
    remaining = _trunc((window - debt + limit.slack) * limit.rate)
    if remaining > limit.burst:  # near 2**53 tokens, window * rate may round up
        remaining = limit.burst
    elif remaining < 0:  # in debt
        remaining = 0
    # retry_after: after - window, inf for a cost above burst (made inf above)
    return state, _new_result(
        RateLimitResult,
        (False, limit.burst, remaining, debt, after - window, window, (), limit.name, "bucket"),
    )


def _read(state: Optional[State], now: float, limit: Limit) -> Tuple[Optional[State], float, float]:
    """``(state, debt, now)``: ``state`` read at ``now`` under ``limit`` (rules 6, 7, 9);
    ``state`` is a new one to store when re-anchored.  ``step`` inlines the usual case.
    """
    if state.__class__ is not complex:  # None, or another shape's state (read_bucket)
        return state, 0.0, now
    debt = state.real
    updated_at = state.imag
    if now < updated_at:
        if now < updated_at - CLOCK_TOLERANCE:
            # Stored even on denial: else the key would wait for the old reading.
            state = bucket_state(debt, now)
        else:
            # Read before a later reading was applied: apply at that time (no
            # refill; re-anchoring here would refill the lag twice).
            now = updated_at
    else:
        debt -= now - updated_at
        if debt < 0.0:
            debt = 0.0
    if debt > limit.max_debt:
        debt = limit.max_debt
        state = bucket_state(debt, now)
    return state, debt, now


def _settle(
    state: Optional[State], now: float, limit: Limit, cost: float, detail: bool
) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
    """``step`` for a ``Refund`` or ``Charge``: always admitted (rules 4, 5)."""
    if not _isfinite(now):
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    state, debt, now = _read(state, now, limit)
    most = limit.max_debt
    value = float(cost)
    if value == 0.0:
        after = debt
        new_state = state
    else:
        if value >= 2.0 * limit.burst:  # inf, or at least the bound (the Redis script's 2**54)
            after = most
        else:
            after = debt + value * limit.interval
            if after < 0.0:  # a refund: a bucket holds at most its burst
                after = 0.0
            elif after > most:
                after = most
        new_state = after + now * 1j
    if not detail:
        return new_state, True
    burst = limit.burst  # remaining: the whole tokens left, from 0 to burst (as step's)
    left = min(max(_trunc(tokens_left(after, limit)), 0), burst)
    return new_state, RateLimitResult(
        allowed=True,
        limit=burst,
        remaining=left,
        reset_after=after,
        retry_after=0.0,
        window=limit.window,
        policy=limit.name,
    )


def tokens_left(debt: float, limit: Policy) -> float:
    """The tokens held at ``debt`` seconds of deficit, slack included (rule 8), before
    ``step`` truncates and clamps them into ``remaining``.
    """
    return (limit.window - debt + limit.slack) * limit.rate


def admission_excess(debt: float, cost: float, limit: Policy) -> float:
    """Seconds by which ``cost`` at ``debt`` misses ``step``'s threshold (<= 0 admits; rule 8)."""
    return debt + cost * limit.interval - limit.window - limit.slack


def next_token_in(result: RateLimitResult) -> float:
    """Seconds until ``result``'s policy holds one more whole token (0.0 when full; a
    count's all come back at ``reset_after``): the draft headers' ``t``.
    """
    limit = result[1]
    missing = limit - result[2]
    if missing <= 0:
        return 0.0
    if result[8] != "bucket":
        return result[3]
    return result[3] - (missing - 1) * (result[5] / limit)


def peek_view(limit: Policy, result: RateLimitResult) -> Tuple[float, float]:
    """``(tokens, wait)`` of ``limit``'s bucket from a peek's ``result`` (the CLI's view):
    exact tokens from 0 to ``burst``, and seconds until a cost of 1 passes.
    """
    exact = (result[5] - result[3]) * limit.rate
    exact = min(max(exact, 0.0), float(limit.burst))
    return exact, result[3] + limit.interval - result[5]
