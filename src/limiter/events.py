"""Decision events: what a ``RateLimiter`` tells ``on_decision`` after each check
(none built without an observer).  docs/observability.md.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Mapping, NamedTuple, Optional, Union

from limiter.core.result import RateLimitResult


class Outcome(str, enum.Enum):
    """What happened to a request; a ``str``, so ``outcome == "denied"`` holds."""

    #: Admitted: the tokens were taken.
    ALLOWED = "allowed"
    #: Refused: not enough tokens, or the key is locked out (``DecisionEvent.locked_out``).
    DENIED = "denied"
    #: Would have been refused, but the limit runs in shadow mode: admitted.
    SHADOW_DENIED = "shadow_denied"
    #: The store failed (``StoreError``): no decision was made.
    ERROR = "error"
    #: Decided by the store's in-memory fallback while the primary is down.
    FALLBACK = "fallback"
    #: A slot given back after its lease ran out (``Slot.give`` returned False).
    EXPIRED = "expired"
    #: A slot given back in time: no decision, reported so observers can count slots held.
    GIVEN = "given"

    def __str__(self) -> str:
        return self.value

    # str's C hash, not Enum's Python-level one: faster per event, and
    # Outcome.DENIED and "denied" find the same dict entry.
    __hash__ = str.__hash__


class DecisionEvent(NamedTuple):
    """One decision, as observers see it (immutable).

    ``limiter``: its name; ``policy``: the deciding limit's name (``""`` on error);
    ``outcome``: an ``Outcome``; ``result``: the ``RateLimitResult`` (``None`` on
    error); ``cost``: as passed; ``key``: the client key (never a metric label);
    ``store_seconds``: the store's wall time; ``at``: the limiter clock's time;
    ``store``: the store's class name; ``waited``: seconds waited (``max_wait``);
    ``slots``: +1 slot taken, -1 given back or expired, else 0.
    """

    limiter: str
    policy: str
    outcome: Outcome
    result: Optional[RateLimitResult]
    cost: Union[float, Mapping[str, float]]
    key: str
    store_seconds: float
    at: float
    store: str
    waited: float = 0.0
    slots: int = 0

    @property
    def locked_out(self) -> bool:
        """True when the key was refused by the limiter's ``Lockout`` (``result.locked_out``)."""
        result = self[3]
        return result is not None and result.locked_out


#: ``observer(event) -> None``, in the caller's thread; it must be quick, and
#: an exception from it propagates to the caller.
Observer = Callable[[DecisionEvent], None]


def fan_out(*observers: Optional[Observer]) -> Optional[Observer]:
    """One observer calling each of ``observers`` in order (``None`` left out): ``None``
    when none is left, the one itself when one.  ``TypeError`` for a non-callable.
    """
    calls = tuple(observer for observer in observers if observer is not None)
    for observer in calls:
        if not callable(observer):
            raise TypeError(f"an observer must be callable or None, got {observer!r}")
    if len(calls) <= 1:
        return calls[0] if calls else None

    def each(event: DecisionEvent) -> None:
        for call in calls:
            call(event)

    return each


def report(
    limiter: Any,
    key: str,
    cost: Any,
    result: Optional[RateLimitResult],
    seconds: float,
    waited: float = 0.0,
    outcome: Optional[Outcome] = None,
    slots: int = 0,
) -> None:
    """Tell ``limiter.on_decision`` (if any) of a decision made outside ``check``;
    ``outcome`` defaults to what ``result`` says (``"error"`` for ``None``).
    """
    observer = limiter.on_decision
    if observer is None:
        return
    store = limiter.store
    if outcome is None:
        if result is None:
            outcome = Outcome.ERROR
        elif getattr(store, "using_fallback", False) is True:
            outcome = Outcome.FALLBACK
        elif result[0]:
            outcome = Outcome.ALLOWED
        else:
            outcome = Outcome.SHADOW_DENIED if limiter.shadow else Outcome.DENIED
    policy = "" if result is None else result.policy
    name, now = type(store).__name__, limiter.clock.now()
    event = DecisionEvent(
        limiter.name, policy, outcome, result, cost, key, seconds, now, name, waited, slots
    )
    observer(event)
