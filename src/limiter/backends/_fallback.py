"""The failure policy shared by the shared stores (Redis, SQLite): a fallback with probing.

While the primary store fails, checks are served by a fallback store (usually a
``MemoryStore``: per-process limits instead of none).  The primary is not asked
again on every request, which would turn an outage into a connect storm: it is
probed by one request at a time, first 0.5 s after the failure, then with the
wait doubling up to 30 s.  The first probe that succeeds switches back.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Awaitable, Callable, Optional, TypeVar

from ..store import StoreError

__all__ = ["Breaker", "aguarded", "guarded"]

T = TypeVar("T")

_log = logging.getLogger("limiter")


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number of seconds > 0, got {value!r}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{what} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


class Breaker:
    """When to skip the primary store and serve from the fallback.

    ``probe_after`` (seconds) is the first wait after a failure; each failed
    probe doubles it, up to ``max_probe_after``.  ``clock`` has ``now()`` in
    seconds (default: ``time.monotonic``); tests pass a ``ManualClock``.
    Thread-safe; the lock is held for a few attribute updates only.
    """

    def __init__(
        self,
        name: str,
        probe_after: float = 0.5,
        max_probe_after: float = 30.0,
        clock: Optional[Any] = None,
    ) -> None:
        self._name = name
        self._first = _seconds(probe_after, "probe_after")
        self._max = max(self._first, _seconds(max_probe_after, "max_probe_after"))
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise TypeError(f"clock must have a now() method returning seconds, got {clock!r}")
        self._now: Callable[[], float] = time.monotonic if clock is None else clock.now
        self._lock = threading.Lock()
        self._wait = self._first
        #: ``None`` while the primary is healthy, else when it may be probed next.
        self._probe_at: Optional[float] = None
        self._probing = False

    @property
    def down(self) -> bool:
        """Whether the primary is currently considered down."""
        return self._probe_at is not None

    def skip_primary(self) -> bool:
        """True when this call should go straight to the fallback.

        When the primary is down and a probe is due, the caller becomes the
        probe (False) and every other caller keeps skipping until it reports.
        """
        if self._probe_at is None:  # the healthy path: no lock, no clock
            return False
        now = self._now()
        with self._lock:
            if self._probe_at is None:
                return False
            if self._probing or now < self._probe_at:
                return True
            self._probing = True
            return False

    def failed(self, error: StoreError) -> None:
        """Record a failure of the primary (a request, or the probe)."""
        now = self._now()
        with self._lock:
            if self._probe_at is None:
                self._wait = self._first
                _log.warning(
                    "limiter: %s failed (%s); using the fallback store, probing again in %gs",
                    self._name,
                    error,
                    self._wait,
                )
            elif self._probing:
                self._wait = min(self._wait * 2, self._max)
            else:
                return  # a request that was already in flight when the primary went down
            self._probing = False
            self._probe_at = now + self._wait

    def abandoned(self) -> None:
        """The probe neither failed nor succeeded (cancelled): let another caller probe."""
        with self._lock:
            self._probing = False

    def succeeded(self) -> None:
        """Record that the primary answered."""
        if self._probe_at is None:
            return
        with self._lock:
            if self._probe_at is not None:
                _log.warning("limiter: %s answers again; leaving the fallback store", self._name)
            self._probe_at = None
            self._probing = False
            self._wait = self._first


def guarded(breaker: Optional[Breaker], primary: Callable[[], T], fallback: Callable[[], T]) -> T:
    """``primary()``, with its outcome recorded on ``breaker``; ``fallback()`` while it is down.

    Without a breaker (no fallback store) this is just ``primary()``: its
    ``StoreError`` reaches the caller.  With one, a ``StoreError`` marks the
    primary down and ``fallback()`` answers; any other exception (a cancelled
    call, a bad argument) lets another caller probe, and propagates.
    """
    if breaker is None:
        return primary()
    if breaker.skip_primary():
        return fallback()
    try:
        result = primary()
    except StoreError as exc:
        breaker.failed(exc)
        return fallback()
    except BaseException:
        breaker.abandoned()
        raise
    breaker.succeeded()
    return result


async def aguarded(
    breaker: Optional[Breaker],
    primary: Callable[[], Awaitable[T]],
    fallback: Callable[[], Awaitable[T]],
) -> T:
    """``guarded`` for coroutines."""
    if breaker is None:
        return await primary()
    if breaker.skip_primary():
        return await fallback()
    try:
        result = await primary()
    except StoreError as exc:
        breaker.failed(exc)
        return await fallback()
    except BaseException:  # cancelled: let another caller probe
        breaker.abandoned()
        raise
    breaker.succeeded()
    return result
