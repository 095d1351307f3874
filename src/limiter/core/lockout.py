"""Lockouts: refuse a key for a while after repeated denials (the fail2ban pattern)."""

from __future__ import annotations

import math
from typing import ClassVar, Literal, Optional, Tuple, Union

from limiter.core._values import Frozen, duration_value, whole_count
from limiter.core.costs import policy_cost
from limiter.core.limits import CLOCK_TOLERANCE, TIME_EPSILON
from limiter.core.result import RateLimitResult
from limiter.core.state import State, lockout_state, read_lockout

_new_result = tuple.__new__
_trunc = math.trunc


class Lockout(Frozen):
    """Refuse a key for ``duration`` seconds after ``breaches`` (an int from 1 to 2**53,
    else ``TypeError``) denials by any limit within ``within`` seconds (both seconds in
    (0, 1e9]); a refused check's result has ``locked_out`` True:
    ``RateLimiter(..., lockout=Lockout(10, 60, 900))``.  Never a limit on its own.
    Guide: docs/policies.md, "Lockout after repeated breaches".
    """

    kind: ClassVar[Literal["lockout"]] = "lockout"
    _params = ("breaches", "within", "duration")
    standalone: ClassVar[Literal[False]] = False

    breaches: int
    within: float
    duration: float
    window: float

    def __init__(
        self,
        breaches: int = 10,
        within: float = 60.0,
        duration: float = 900.0,
        name: str = "lockout",
    ) -> None:
        whole_count(breaches, "lockout breaches")
        within_s = duration_value(within, "lockout within")
        duration_s = duration_value(duration, "lockout duration")
        self._freeze(
            name,
            breaches,
            within_s,
            breaches=breaches,
            within=within_s,
            duration=duration_s,
            window=within_s,
            slack=TIME_EPSILON,
            max_debt=0.0,
        )

    def step(
        self, state: Optional[State], now: float, cost: float = 1, detail: bool = True
    ) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
        """Whether the key of ``state`` is locked out at ``now``, taking nothing."""
        policy_cost(cost, self.burst, now)  # the same errors as any policy's, in step's order
        new_state, result, _, _ = lock_status(state, now, self)
        return new_state, (result if detail else result[0])

    def __str__(self) -> str:
        return (
            f"lockout after {self.breaches} denials in {self.within:g} s "
            f"for {self.duration:g} s ({self.name})"
        )


def lock_status(
    state: Optional[State], now: float, lockout: Lockout
) -> Tuple[Optional[State], RateLimitResult, float, float]:
    """``(state, result, breaches, run_end)`` of a lockout's state at ``now`` (see
    ``step_all``): ``breaches`` and ``run_end`` of the open run are ``0.0`` and ``-inf``
    when none is.
    """
    count, end = 0.0, -math.inf
    if state is not None:
        locked, breaches, until = read_lockout(state)
        if locked:
            if now + TIME_EPSILON < until:
                if until - now > lockout.duration + CLOCK_TOLERANCE:
                    until = now + lockout.duration  # a clock stepped back: at most duration
                    state = lockout_state(0.0, until, locked=True)
                return state, _lockout_result(lockout, 0.0, until - now), 0.0, end
        elif now < until:
            count, end = breaches, until
    return state, _lockout_result(lockout, count, None), count, end


def breach(count: float, end: float, now: float, lockout: Lockout) -> Tuple[State, RateLimitResult]:
    """The lockout's new state and result after a denial at ``now`` (see ``step_all``)."""
    if count == 0.0:
        end = now + lockout.within  # the first breach opens a run
    elif end - now > lockout.within + CLOCK_TOLERANCE:
        end = now + lockout.within  # a clock stepped back: at most within
    count += 1.0
    if count >= lockout.burst:
        until = now + lockout.duration
        return lockout_state(count, until, locked=True), _lockout_result(
            lockout, count, until - now
        )
    return lockout_state(count, end), _lockout_result(lockout, count, None)


def _lockout_result(lockout: Lockout, count: float, left: Optional[float]) -> RateLimitResult:
    """A lockout's result: refusing for ``left`` seconds, or (``None``) the breaches left, >= 0."""
    window, name = lockout.window, lockout.name
    if left is not None:
        return _new_result(
            RateLimitResult, (False, lockout.burst, 0, left, left, window, (), name, "lockout")
        )
    remaining = _trunc(lockout.burst - count)
    remaining = remaining if remaining > 0 else 0
    return _new_result(
        RateLimitResult, (True, lockout.burst, remaining, 0.0, 0.0, window, (), name, "lockout")
    )
