"""Observers of decision events: metrics exporters and a top-offenders tracker.

Nothing is imported here: ``limiter.metrics.top`` (standard library only) and
the exporters, whose third-party dependencies are optional extras, are each
imported by name when used.  What the exporters share lives here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

if TYPE_CHECKING:
    from limiter.events import DecisionEvent

#: Bucket bounds (seconds) of the store-latency histogram in every exporter: 1, 2.5
#: and 5 of each decade, from an in-memory store's 10 us to a shared store's 5 s timeouts.
STORE_SECONDS_BUCKETS: Tuple[float, ...] = tuple(
    float(f"{mantissa}e{exponent}") for exponent in range(-5, 1) for mantissa in (1, 2.5, 5)
)

#: Bucket bounds (seconds) of the wait histogram (adapters' ``max_wait``):
#: from a slot handed over at once to a long queue.
WAIT_SECONDS_BUCKETS: Tuple[float, ...] = (*STORE_SECONDS_BUCKETS[6:], 10.0, 30.0, 60.0)

_UNMOVED: Tuple[int, Tuple[str, ...]] = (0, ())
_CONCURRENCY = "concurrency"


def slots_moved(event: DecisionEvent) -> Tuple[int, Tuple[str, ...]]:
    """How ``event`` moves its limiter's slots held: ``(step, policies)``.

    ``step`` is the event's ``slots`` (+1 a slot taken, -1 one given back or
    lost to its lease, 0 for every check); ``policies`` names the
    ``Concurrency`` policies concerned (one slot of each), ``()`` when none moved.
    """
    step = event[10]
    result = event[3]
    if not step or result is None:
        return _UNMOVED
    parts = result[6]
    if not parts:  # one policy (the usual rate limiter: nothing more to read)
        return (step, (result[7],)) if result[8] == _CONCURRENCY else _UNMOVED
    for part in parts:  # several: a slot of each Concurrency one
        if part[8] == _CONCURRENCY:
            return step, tuple([part[7] for part in parts if part[8] == _CONCURRENCY])
    return _UNMOVED
