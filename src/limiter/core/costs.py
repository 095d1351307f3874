"""Costs: what a request takes from a policy (``validate_cost``), ``Refund`` and ``Charge``.

A cost is any real number of tokens >= 0; a ``Refund`` is the one negative
cost, a ``Charge`` the one taken unconditionally (rules 2 to 5 of
``limiter.core.bucket``).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple, Union

from limiter.core._values import real, show

_isfinite = math.isfinite


def validate_cost(cost: object) -> float:
    """``cost`` as a float number of tokens >= 0, or an error that names it.

    Any real number (``int``, ``float``, ``Fraction``, ``Decimal``): too large for a
    float becomes ``inf``; a positive one too small, the smallest float; one a float
    would round down onto a whole number, the next float up (so ``cost > burst``
    exactly when the float is).  ``bool`` or a non-number: ``TypeError``; NaN or
    negative: ``ValueError``.  docs/concepts.md, "Exact semantics".
    """
    value: Any
    cls = cost.__class__
    if cls is float or cls is int:
        value = cost
    elif isinstance(cost, bool):
        raise TypeError(f"cost must be a number of tokens, got {cost!r}")
    else:
        value = real(cost, "cost", "a number of tokens", ">= 0")
    if not value >= 0:  # also NaN
        raise ValueError(f"cost must be a number of tokens >= 0, got {show(cost)}")
    try:
        result = float(value)
    except OverflowError:  # an int or Fraction beyond 1.8e308: more than any burst
        return math.inf
    if result == 0.0 and value != 0:
        return 5e-324
    if cls is not float and value != result and result.is_integer() and value > result:
        return math.nextafter(result, math.inf)  # rounded down onto a whole number
    return result


class Refund(float):
    """A cost that gives ``tokens`` back (``Refund(2)``), always admitted, never beyond burst.

    The only negative cost (its value is ``-tokens``; ``tokens`` as ``validate_cost``).
    ``taken_at`` (seconds, when the check took the units): on a ``Quota`` a refund
    from before the current window gives nothing back; ``None`` refunds the current
    window.  A token bucket ignores it.  Not part of equality.
    """

    __slots__ = ("taken_at",)

    taken_at: Optional[float]

    def __new__(cls, tokens: object, taken_at: Optional[float] = None) -> Refund:
        self = super().__new__(cls, -validate_cost(tokens))
        if taken_at is not None:
            if taken_at.__class__ is not float:
                value = real(taken_at, "refund taken_at", "a number of seconds", "(finite)")
                try:
                    taken_at = float(value)
                except OverflowError:
                    taken_at = math.inf
            if taken_at - taken_at != 0.0:  # NaN or infinite
                raise ValueError(
                    f"refund taken_at must be a finite number of seconds, got {taken_at!r}"
                )
        self.taken_at = taken_at
        return self

    def __reduce__(self) -> Tuple[Any, ...]:
        return (Refund, (-float(self), self.taken_at))

    def __repr__(self) -> str:
        if self.taken_at is None:
            return f"Refund({-float(self)!r})"
        return f"Refund({-float(self)!r}, taken_at={self.taken_at!r})"


class Charge(float):
    """A cost taken unconditionally (``Charge(350)``), even from an empty bucket.

    A bucket goes into debt, at most one burst (``Limit.max_debt``), and denies until
    refilled; a ``Quota``'s units go up to twice the count.  ``tokens`` as ``validate_cost``.
    """

    __slots__ = ()

    def __new__(cls, tokens: object) -> Charge:
        return super().__new__(cls, validate_cost(tokens))

    def __repr__(self) -> str:
        return f"Charge({float(self)!r})"


class Hold(float):
    """A slot of a ``Concurrency`` policy taken, given back or renewed by ``holder``.

    ``action``: ``"take"`` (worth 1.0), ``"give"`` or ``"renew"`` (0.0); ``holder``:
    an integer below 2**53.  ``RateLimiter.slot`` makes them.
    """

    __slots__ = ("action", "holder")

    action: str
    holder: float

    def __new__(cls, holder: float, action: str = "take") -> Hold:
        if action not in ("take", "give", "renew"):
            raise ValueError(f"hold action must be 'take', 'give' or 'renew', got {show(action)}")
        if holder.__class__ is not float or not (0.0 < holder < 2.0**53) or not holder.is_integer():
            raise ValueError(f"holder must be a whole float from 1 to 2**53, got {show(holder)}")
        self = super().__new__(cls, 1.0 if action == "take" else 0.0)
        self.action = action
        self.holder = holder
        return self

    def __reduce__(self) -> Tuple[Any, ...]:
        return (Hold, (self.holder, self.action))

    def __repr__(self) -> str:
        return f"Hold({self.holder!r}, {self.action!r})"


def is_give(cost: object) -> bool:
    """True when ``cost`` gives a slot back: a step never refuses that as a whole."""
    return cost.__class__ is Hold and cost.action == "give"


#: What ``step_all`` and ``Store.apply_many`` accept as a cost: one number
#: for every limit, or a sequence of one number per limit (a list or tuple).
Cost = Union[float, Sequence[float]]


def validate_costs(cost: object, count: int) -> Union[float, Tuple[float, ...]]:
    """``cost`` checked for ``count`` limits, before a store takes a lock or a round trip.

    A number as ``validate_cost`` (a ``Refund``/``Charge`` as is); a list or tuple
    must hold exactly ``count`` of them (``ValueError``) and comes back a tuple.
    """
    if cost.__class__ is tuple or cost.__class__ is list:
        items: Sequence[object] = cost  # type: ignore[assignment,unused-ignore]
        check_count(items, count)
        return tuple(checked_cost(c) for c in items)
    return checked_cost(cost)


def check_count(costs: Sequence[object], count: int) -> None:
    """Raise ``ValueError`` unless there is one cost per limit in ``costs``."""
    if len(costs) != count:
        raise ValueError(
            f"cost must be a number or a sequence of {count} costs, one per limit, "
            f"got {len(costs)}: {show(costs)}"
        )


def cost_or_inf(cost: object, burst: int) -> float:
    """``validate_cost(cost)``, or ``inf`` when above ``burst`` (never admitted, slack or
    not); a ``Refund`` is its negative float.
    """
    if cost.__class__ is Refund or cost.__class__ is Charge:
        return float(cost)  # type: ignore[arg-type,unused-ignore]
    value = validate_cost(cost)
    return value if value <= burst else math.inf


def policy_cost(cost: object, burst: int, now: float) -> float:
    """``cost_or_inf(cost, burst)``, then ``ValueError`` for a ``now`` that is not finite
    (unless ``cost`` is a ``Refund`` or ``Charge``): a ``Quota``'s and ``Lockout``'s step.
    """
    value = cost_or_inf(cost, burst)
    if (cls := cost.__class__) is not Refund and cls is not Charge and not _isfinite(now):
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    return value


def counted_cost(cost: object, count: int, now: float) -> Tuple[float, bool, Optional[float]]:
    """``(value, forced, taken_at)`` of ``cost`` for a counting step (quota, windows):
    ``cost_or_inf``'s value, True for a ``Charge``, a ``Refund``'s ``taken_at``.
    Then a non-finite ``now`` is a ``ValueError`` for every cost.
    """
    value = cost_or_inf(cost, count)
    if not _isfinite(now):
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    cls = cost.__class__
    return value, cls is Charge, cost.taken_at if cls is Refund else None  # type: ignore[attr-defined]


def checked_cost(cost: object) -> float:
    """``validate_cost(cost)``, but a ``Refund`` or ``Charge`` is returned as it is."""
    if (cls := cost.__class__) is Refund or cls is Charge or cls is Hold:
        return cost  # type: ignore[return-value,unused-ignore]
    return validate_cost(cost)
