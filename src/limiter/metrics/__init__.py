"""Observers of decision events: metrics exporters and a top-offenders tracker.

Nothing is imported here: ``limiter.metrics.top`` (standard library only) and
the exporters, whose third-party dependencies are optional extras, are each
imported by name when used.  What the exporters share lives here.
"""

from typing import Tuple

#: Bucket bounds (seconds) of the store-latency histogram in every exporter:
#: from an in-memory store's microseconds to a shared store's timeouts.
STORE_SECONDS_BUCKETS: Tuple[float, ...] = (
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)

#: Bucket bounds (seconds) of the wait histogram (adapters' ``max_wait``):
#: from a slot handed over at once to a long queue.
WAIT_SECONDS_BUCKETS: Tuple[float, ...] = (*STORE_SECONDS_BUCKETS[6:], 10.0, 30.0, 60.0)
