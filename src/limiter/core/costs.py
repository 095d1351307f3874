"""Costs: what a request takes from a policy (``validate_cost``), ``Refund``, ``Charge``
and ``Hold`` (rules 2 to 5 of ``limiter.core.bucket``).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple, Union

from limiter.core._values import real, show

_isfinite = math.isfinite


def validate_cost(cost: object) -> float:
    """``cost`` (any real number but a bool) as a float number of tokens >= 0, rounded
    so that ``cost > burst`` exactly when the float is (docs/concepts.md, "Exact
    semantics").  ``bool`` or a non-number: ``TypeError``; NaN or negative: ``ValueError``.
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
    """A cost that gives ``tokens`` back (``Refund(2)``, worth ``-tokens``), always admitted,
    never beyond burst.  ``taken_at`` (seconds, when the check took the units; not part
    of equality): a count whose window started after it gives nothing back.
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
    """A cost taken unconditionally (``Charge(350)``): a bucket goes into debt, at most
    one burst (``Limit.max_debt``); a count goes up to twice its limit.
    """

    __slots__ = ()

    def __new__(cls, tokens: object) -> Charge:
        return super().__new__(cls, validate_cost(tokens))

    def __repr__(self) -> str:
        return f"Charge({float(self)!r})"


class Hold(float):
    """A slot of a ``Concurrency`` policy taken (worth 1.0), given back or renewed (0.0)
    by ``holder`` (a whole float below 2**53).  ``RateLimiter.slot`` makes them.
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


#: ``step_all``'s and ``Store.apply_many``'s cost: one number, or one per limit.
Cost = Union[float, Sequence[float]]


def validate_costs(cost: object, count: int) -> Union[float, Tuple[float, ...]]:
    """``cost`` checked for ``count`` limits: a number as ``checked_cost``, or a list or
    tuple of exactly ``count`` of them (``ValueError``), returned as a tuple.
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
    """``validate_cost(cost)``, or ``inf`` above ``burst``; a ``Refund``/``Charge`` as its float."""
    if cost.__class__ is Refund or cost.__class__ is Charge:
        return float(cost)  # type: ignore[arg-type,unused-ignore]
    value = validate_cost(cost)
    return value if value <= burst else math.inf


def policy_cost(cost: object, burst: int, now: float) -> float:
    """``cost_or_inf``, then ``ValueError`` for a non-finite ``now`` unless ``cost`` is a
    ``Refund`` or ``Charge`` (the steps of ``Lockout`` and ``Concurrency``).
    """
    value = cost_or_inf(cost, burst)
    if (cls := cost.__class__) is not Refund and cls is not Charge and not _isfinite(now):
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    return value


def counted_cost(cost: object, count: int, now: float) -> Tuple[float, bool, Optional[float]]:
    """``(cost_or_inf's value, is a Charge, a Refund's taken_at)`` for a counting step;
    then ``ValueError`` for a non-finite ``now``.
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
