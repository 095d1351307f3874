"""Checks shared by the policies of ``limiter.core``: values shown in errors, numbers,
names (a private module: only ``limiter.core`` imports it).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import sys
from typing import Any, ClassVar, Tuple, TypeVar

from limiter.core.state import keep_until

F = TypeVar("F", bound="Frozen")

#: The accepted ranges (docs/concepts.md, "Why the bucket computes as it does").
MIN_RATE = sys.float_info.min
MAX_RATE = 1e-3 / sys.float_info.min
MAX_BURST = 2**53
MAX_WINDOW = 2.0**1022


def show(value: object) -> str:
    """``repr(value)`` cut to 100 characters, even for an int too long for ``repr``."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond sys.get_int_max_str_digits()
        return f"<int of {value.bit_length()} bits>"  # type: ignore[attr-defined]
    return text if len(text) <= 100 else text[:97] + "..."


def real(value: object, name: str, kind: str, bounds: str) -> Any:
    """``value`` if it is a real number other than a bool, else ``TypeError``; a
    ``Decimal`` NaN is a ``ValueError`` (comparing one raises).
    """
    # Decimal is no numbers.Real: test it first.  A Decimal can exist only if
    # its module is imported already.
    decimal = sys.modules.get("decimal")
    if decimal is not None and isinstance(value, decimal.Decimal):
        if value.is_nan():
            raise ValueError(f"{name} must be {kind} {bounds}, got {value!r}")
        return value
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {kind}, got {show(value)}")
    return value


def bounded_float(
    value: object, name: str, kind: str, bounds: str, low: float, high: float
) -> float:
    """``value`` as a float from ``low`` (excluded when 0.0) to ``high``, else a
    ``TypeError``/``ValueError`` naming it; too large for a float counts as ``inf``.
    """
    if value.__class__ is not float and value.__class__ is not int:
        value = real(value, name, kind, bounds)
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int or Fraction beyond 1.8e308
        number = math.inf
    if not (low <= number <= high and (low != 0.0 or number != 0.0)):  # also NaN
        raise ValueError(f"{name} must be {kind} {bounds}, got {show(value)}")
    return number


def duration_value(value: object, name: str) -> float:
    """``value`` as a float number of seconds > 0 and <= 1e9 (a lease, a lockout's times)."""
    return bounded_float(value, name, "a number of seconds", "> 0 and <= 1e+09", 0.0, 1e9)


def rate_value(rate: object) -> float:
    """``rate`` as a float in the accepted range (``MIN_RATE`` to ``MAX_RATE``)."""
    # 1 / rate (the interval) and 1e-3 / rate (the slack) must be normal floats.
    bounds = f"from {MIN_RATE!r} to {MAX_RATE!r}"
    return bounded_float(rate, "rate", "a number of tokens per second", bounds, MIN_RATE, MAX_RATE)


def burst_value(burst: object) -> int:
    """``burst`` as an int from 1 to 2**53."""
    if isinstance(burst, bool) or not hasattr(burst.__class__, "__index__"):
        raise TypeError(f"burst must be an integer, got {show(burst)}")
    value = operator.index(burst)  # type: ignore[arg-type]
    if not 1 <= value <= MAX_BURST:
        raise ValueError(
            f"burst must be an integer from 1 to 2**53 ({MAX_BURST}), got {show(burst)}"
        )
    return int(value)


def check_name(name: object) -> str:
    """``name`` if it is a valid policy name (every policy's, a rate mapping's keys), else
    an error naming it.
    """
    if not isinstance(name, str):
        raise TypeError(f"limit name must be a str, got {show(name)}")
    if not name or not all(" " <= c <= "~" and c not in '"\\' for c in name):
        raise ValueError(
            f"limit name must be printable ASCII without quotes or backslashes, got {show(name)}"
        )
    return name


def whole_count(value: object, what: str) -> int:
    """``value`` if it is an int from 1 to 2**53 (a quota's count, a lockout's breaches)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {show(value)}")
    if not 1 <= value <= MAX_BURST:
        raise ValueError(f"{what} must be from 1 to 2**53, got {show(value)}")
    return value


class Frozen:
    """A policy whose ``__init__`` sets its attributes once (``_freeze``), equal and hashed
    by ``identity()`` within its class.
    """

    #: The parameters but ``name``, in the class's order; ``repr`` shows the first
    #: ``_positional`` of them by position.
    _params: ClassVar[Tuple[str, ...]] = ()
    _positional: ClassVar[int] = 0

    # What every policy offers (limits.Policy), set by each __init__.
    name: str
    burst: int
    rate: float
    interval: float
    slack: float
    max_debt: float

    #: False only for a policy that counts the others' denials (a ``Lockout``).
    standalone: ClassVar[bool] = True

    def identity(self) -> Tuple[Any, ...]:
        """What makes two policies of this class equal: the values of ``_params``."""
        return tuple(getattr(self, param) for param in self._params)

    #: When a store may forget ``state`` (seconds): ``limiter.core.state.keep_until``.
    keep_until = staticmethod(keep_until)

    #: The policy's step function, ``(state, now, policy, cost, detail)``:
    #: ``MemoryStore.bind`` calls it directly, a frame fewer than ``step``.
    step_function: Any = None

    def step(self, state: Any, now: float, cost: Any = 1, detail: bool = True) -> Any:
        """``limiter.core.bucket.step`` for this policy (which hands it over)."""
        return self.step_function(state, now, self, cost, detail)

    def renamed(self: F, name: str) -> F:
        """This policy named ``name``."""
        build: Any = self.__class__
        policy: F = build(*self.identity(), name=name)
        return policy

    def _freeze(self, name: str, count: int, seconds: float, /, **fields: Any) -> None:
        """Check ``name``, then set it, ``count`` per ``seconds`` (``burst``, ``rate``,
        ``interval``) and ``fields``, once.
        """
        check_name(name)
        fields.update(name=name, burst=count, rate=count / seconds, interval=seconds / count)
        for attr, value in fields.items():
            object.__setattr__(self, attr, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        params = self._params
        shown = [repr(getattr(self, param)) for param in params[: self._positional]]
        shown += [f"{param}={getattr(self, param)!r}" for param in params[self._positional :]]
        return f"{type(self).__name__}({', '.join(shown)}, name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(self.identity() == other.identity())

    def __hash__(self) -> int:
        return hash((self.__class__, self.identity()))
