"""The floor: the least a correct, thread-safe, per-key token bucket can do in Python.

A dict of ``[tokens, last]`` pairs and one ``threading.Lock``; nothing else (no
result object, no validation, no headers, no eviction).  It is in the tables
beside the peers as the cost below which no in-memory limiter can go, so that
``check()``'s ratio to it says how much the library's extras cost.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List


class FloorBucket:
    """``allow(key)`` -> bool: ``rate`` tokens per second, at most ``burst`` tokens."""

    def __init__(self, rate: float, burst: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError(f"rate and burst must be > 0, got rate={rate!r}, burst={burst!r}")
        self.rate = float(rate)
        self.burst = float(burst)
        self._buckets: Dict[str, List[float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        lock = self._lock
        lock.acquire()
        try:
            state = self._buckets.get(key)
            if state is None:
                self._buckets[key] = [self.burst - 1.0, now]
                return True
            tokens = state[0] + (now - state[1]) * self.rate
            if tokens > self.burst:
                tokens = self.burst
            state[1] = now
            if tokens >= 1.0:
                state[0] = tokens - 1.0
                return True
            state[0] = tokens
            return False
        finally:
            lock.release()
