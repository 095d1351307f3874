"""Decision events: what a ``RateLimiter`` tells its observers about each decision.

``RateLimiter(..., on_decision=observer)`` calls ``observer(event)`` after
every check; a limiter without an observer builds no event.  See
docs/observability.md.
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
    #: A slot given back after its lease ran out (``Slot.give`` returned False):
    #: its holder worked longer than the lease, and the slot was free meanwhile.
    EXPIRED = "expired"
    #: A slot given back in time (``Slot.give`` returned True).  Not a decision:
    #: reported so that observers can count the slots held (taken minus given
    #: back, ``"expired"`` included); the exporters count no decision for it.
    GIVEN = "given"

    def __str__(self) -> str:
        return self.value

    # str's C hash, not Enum's Python-level one: faster per event, and
    # Outcome.DENIED and "denied" find the same dict entry.
    __hash__ = str.__hash__


class DecisionEvent(NamedTuple):
    """One decision, as observers see it (immutable).

    ``limiter``: the limiter's name.  ``policy``: the name of the limit that
    decided (``result.policy``; ``""`` on error).  ``outcome``: an
    ``Outcome``.  ``result``: the ``RateLimitResult`` (``None`` on error).
    ``cost``: tokens asked, as passed to the check (a number, or a mapping of
    limit names to tokens).  ``key``: the client key (never a metric label:
    unbounded).  ``store_seconds``: wall time the store took, seconds.
    ``at``: the limiter clock's time of the decision, seconds.
    ``store``: the store's class name (``"RedisStore"``), a metric label.
    ``waited``: seconds the request waited before this decision (an
    adapter's ``max_wait``); 0.0 when it did not wait.  ``slots``: how the
    decision moved the slots its holder holds (``RateLimiter.slot``): +1 a
    slot taken, -1 one given back or lost to its lease, 0 otherwise (every
    ``check``).
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


#: ``observer(event) -> None``: called after each decision, in the caller's
#: thread (or task).  It must be quick and must not raise: an exception from
#: it propagates to the caller, like any application error.
Observer = Callable[[DecisionEvent], None]


def fan_out(*observers: Optional[Observer]) -> Optional[Observer]:
    """One observer that calls each of ``observers`` in order (``None`` ones are left out).

    ``None`` when none is left, the observer itself when one is.  A
    ``TypeError`` names an argument that is neither callable nor ``None``.
    """
    chosen = []
    for observer in observers:
        if observer is None:
            continue
        if not callable(observer):
            raise TypeError(f"an observer must be callable or None, got {observer!r}")
        chosen.append(observer)
    if not chosen:
        return None
    if len(chosen) == 1:
        return chosen[0]
    calls = tuple(chosen)

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
    """Tell ``limiter.on_decision`` (if any) of a decision made outside ``check``.

    ``limiter``: a ``RateLimiter``.  ``outcome`` defaults to what ``result``
    says (``"error"`` for ``None``, ``"fallback"`` from a store's fallback).
    Slots and the adapters' waits report through it.
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
