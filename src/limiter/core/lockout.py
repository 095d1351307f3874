"""Lockouts: refuse a key for a while after repeated denials (the fail2ban pattern).

The rules are in ``lock_status``'s and ``breach``'s comments; ``step_all``
applies a ``Lockout`` after the limits it watches.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal, Optional, Tuple, Union

from limiter.core._values import Frozen, bounded_float, check_name, whole_count
from limiter.core.costs import policy_cost
from limiter.core.limits import CLOCK_TOLERANCE, TIME_EPSILON
from limiter.core.result import RateLimitResult
from limiter.core.state import State, keep_until, lockout_state, read_lockout

_new_result = tuple.__new__
_trunc = math.trunc

_MAX_SECONDS = 1e9


def _seconds(value: object, name: str) -> float:
    """``value`` as a float number of seconds > 0 and <= 1e9, or an error naming it."""
    bounds = f"> 0 and <= {_MAX_SECONDS:g}"
    return bounded_float(value, name, "a number of seconds", bounds, 0.0, _MAX_SECONDS)


class Lockout(Frozen):
    """Refuse a key for ``duration`` seconds after ``breaches`` denials within ``within`` seconds.

    ``RateLimiter(..., lockout=Lockout(breaches=10, within=60, duration=900))``:
    the fail2ban pattern.  A denial by any of the limiter's limits is a
    breach.  A run of breaches starts with a breach and lasts ``within``
    seconds; the ``breaches``-th breach of a run locks the key out, and every
    check of it is then refused for ``duration`` seconds from that breach,
    however full its buckets (``retry_after`` and ``reset_after`` are the
    time left; the result's ``kind`` is ``"lockout"``, ``locked_out`` True).
    Checks refused during a lockout are no breaches and do not extend it,
    and nothing is charged during it.  When it ends the key starts afresh
    (no breaches).  ``RateLimiter.reset`` lifts it.  Runs are counted from
    their first breach, so breaches spread over the end of one run and the
    start of the next (at most ``2 * breaches - 2`` of them, closer together
    than ``within``) may lock no one: a run is not a sliding window.

    ``breaches`` is an int from 1 to 2**53 (``TypeError`` for another type);
    ``within`` and ``duration`` are seconds, > 0 and at most 1e9.  ``name``
    (``"lockout"``) labels it in headers and decision events.  It is no
    limit on its own (``standalone`` is False): only ever the last of
    ``step_all``'s policies; ``step`` alone reports whether the key is locked
    out, taking nothing.
    """

    kind: ClassVar[Literal["lockout"]] = "lockout"
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
        within_s = _seconds(within, "lockout within")
        duration_s = _seconds(duration, "lockout duration")
        check_name(name)
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

    def identity(self) -> Tuple[Any, ...]:
        """What makes two lockouts equal: ``(breaches, within, duration)``."""
        return (self.breaches, self.within, self.duration)

    def step(
        self, state: Optional[State], now: float, cost: float = 1, detail: bool = True
    ) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
        """Whether the key of ``state`` is locked out at ``now``, taking nothing."""
        policy_cost(cost, self.burst, now)  # the same errors as any policy's, in step's order
        new_state, result, _, _ = lock_status(state, now, self)
        return new_state, (result if detail else result[0])

    def keep_until(self, state: State) -> float:
        """When the run or the lockout of ``state`` ends (seconds), when it is forgotten."""
        return keep_until(state)

    def __repr__(self) -> str:
        return (
            f"Lockout(breaches={self.breaches!r}, within={self.within!r}, "
            f"duration={self.duration!r}, name={self.name!r})"
        )

    def __str__(self) -> str:
        return (
            f"lockout after {self.breaches} denials in {self.within:g} s "
            f"for {self.duration:g} s ({self.name})"
        )


def lock_status(
    state: Optional[State], now: float, lockout: Lockout
) -> Tuple[Optional[State], RateLimitResult, float, float]:
    """``(state, result, breaches, run_end)`` of a lockout's state at ``now`` (see ``step_all``).

    ``result`` refuses when the key is locked out; ``breaches`` (a float) and
    ``run_end`` describe the open run (``0.0`` and ``-inf`` when none).
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
    """A lockout's own result: refusing for ``left`` seconds, or ``None``: not locked.

    Not locked, ``remaining`` is the breaches left before a lockout, never
    below 0 (a run counted under a larger ``breaches`` may hold more).
    """
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
