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
10. A ``Quota`` or ``Lockout`` given to ``step`` is handed to its own ``step``.

No I/O, no clock; stores call ``step`` under their own atomicity, and
``backends/redis/bucket.lua`` mirrors it (a property test holds them equal).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Literal, Optional, Tuple, Union, overload

from limiter.core.costs import Charge, Refund, cost_or_inf
from limiter.core.limits import CLOCK_TOLERANCE, Limit, Policy
from limiter.core.result import RateLimitResult
from limiter.core.state import State, bucket_state

__all__ = ["admit", "step"]

_ONE = 1  # ``cost is _ONE``: CPython's cached small int, the default cost

# Results are built with ``tuple.__new__`` (hot path: see CONTRIBUTING.md "Hot paths"),
# read once into a global like ``math.trunc``: a global call costs less than a
# module or class attribute's.
_new_result = tuple.__new__
_trunc = math.trunc


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
    """Apply one request of ``cost`` tokens at time ``now`` (seconds) to a bucket.

    Returns ``(new_state, result)``.  ``state`` is ``None`` for a key never seen.
    When the request takes nothing (denied, or ``cost == 0``) the very same
    ``state`` object is returned, so a store can skip the write; the
    exceptions are a clock stepped back by more than ``CLOCK_TOLERANCE`` and a
    deficit beyond this limit's ``max_debt`` (one burst owed), whose
    re-anchored state must be stored.  A ``Refund`` or ``Charge`` is always
    admitted (see ``Refund`` and ``Charge``); in debt, a request is denied
    until refilling has repaid it.  A ``now`` at most ``CLOCK_TOLERANCE`` behind the state's
    ``updated_at`` is taken as ``updated_at``.  With ``detail=False`` the result
    is just the decision, a ``bool``: the same algorithm, without building a
    ``RateLimitResult`` (``RateLimiter.allow``'s fast path).
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
    if now - now != 0.0:  # NaN or infinite, without a global lookup
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    if state is None:
        debt = 0.0
    else:
        debt = state.real
        updated_at = state.imag
        if now < updated_at:
            if now < updated_at - CLOCK_TOLERANCE:  # rule 7
                # Backwards clock: keep the deficit as it was, re-anchored at
                # ``now``.  The re-anchored state is returned even on denial (same
                # tokens, new frame); were it not stored, the key would wait for
                # the old reading.
                state = bucket_state(debt, now)
            else:
                # Read before a later reading was applied: apply at that time (no
                # refill; re-anchoring here would refill the lag twice).
                now = updated_at
        else:
            debt -= now - updated_at
            if debt < 0.0:
                debt = 0.0
    ceiling = limit.ceiling  # window + slack
    if debt > ceiling:  # rules 5 and 6
        # In debt (a Charge), or written under a larger limit: denied until
        # repaid.  A bucket never owes more than one burst; a deeper state is
        # stored at that bound (like a re-anchoring) so refilling starts there.
        if debt > limit.max_debt:
            debt = limit.max_debt
            state = bucket_state(debt, now)
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
    retry = after - window  # inf for a cost above burst (made inf above)
    return state, _new_result(
        RateLimitResult,
        (False, limit.burst, remaining, debt, retry, window, (), limit.name, "bucket"),
    )


def admit(
    table: Dict[str, State], key: str, now: float, limit: Policy, cost: float = 1
) -> Optional[bool]:
    """``step(table[key], now, limit, cost, detail=False)``, applied to ``table`` in place.

    Returns whether the request of ``cost`` tokens at ``now`` (seconds) is
    admitted, having stored the new state in ``table[key]`` when ``step``
    returns a new one; ``None``, changing nothing, when ``key`` is not in
    ``table`` (the caller decides what a new key costs, e.g. an eviction).
    The same decisions and states as ``step``, and the same errors.
    """
    # The usual request (cost 1, a clock that has not gone back, a state
    # under this limit) without step's call, its result tuple and the store's
    # write-back test: MemoryStore.allow's hot path (CONTRIBUTING.md, "Hot
    # paths").  Each operation is step's, in step's order, so the floats
    # are the same; everything else is left to step.
    state = table.get(key)
    if state is None:
        return None
    if cost is _ONE and now - now == 0.0 and limit.__class__ is Limit:  # now finite
        updated_at = state.imag
        if now >= updated_at:
            debt = state.real - (now - updated_at)
            ceiling = limit.ceiling
            if debt < 0.0 and ceiling > 0.0:
                # Full again: step clamps the debt to 0.0, and 0.0 + interval
                # (1 / rate) is interval, never above window (burst / rate).
                table[key] = limit.interval + now * 1j
                return True
            if debt <= ceiling:
                after = debt + limit.interval
                if after <= ceiling:
                    table[key] = after + now * 1j  # complex(after, now): see step
                    return True
                return False
    new_state, allowed = step(state, now, limit, cost, False)
    if new_state is not state:
        table[key] = new_state  # type: ignore[assignment]  # never None from a state
    return allowed


def _settle(
    state: Optional[State], now: float, limit: Limit, cost: float, detail: bool
) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
    """``step`` for a ``Refund`` or a ``Charge``: always admitted, never denied.

    A refund lowers the debt, never below 0 (a full bucket); a charge raises
    it, never above ``limit.max_debt``.  The clock rules are ``step``'s.
    """
    if now - now != 0.0:
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    # step's reading of the state, rule for rule (step keeps its own inline
    # copy: it is the hot path).
    debt = 0.0
    if state is not None:
        debt = state.real
        updated_at = state.imag
        if now < updated_at:
            if now < updated_at - CLOCK_TOLERANCE:
                state = bucket_state(debt, now)
            else:
                now = updated_at
        else:
            debt -= now - updated_at
            if debt < 0.0:
                debt = 0.0
    most = limit.max_debt
    if debt > most:
        debt = most
        state = bucket_state(debt, now)
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
    window = limit.window
    remaining = _trunc((window - after + limit.slack) * limit.rate)
    if remaining > limit.burst:
        remaining = limit.burst
    elif remaining < 0:
        remaining = 0
    return new_state, _new_result(
        RateLimitResult,
        (True, limit.burst, remaining, after, 0.0, window, (), limit.name, "bucket"),
    )
