"""The failure policy shared by the shared stores (Redis, SQLite): a fallback with probing.

While the primary store fails, checks are served by a fallback store (usually a
``MemoryStore``: per-process limits instead of none).  The primary is not asked
again on every request, which would turn an outage into a connect storm: it is
probed by one request at a time, first 0.5 s after the failure, then with the
wait doubling up to 30 s.  The first probe that succeeds switches back.

Outages are logged on the ``limiter.stores`` logger, once each: the first
failure after start, and the first after each recovery, at ERROR with its cause
(traceback included; at most one ERROR a minute per store); the recovery at
WARNING.  ``Breaker`` does it for a store with a fallback, ``Health`` for one
without.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Awaitable, Callable, Optional, TypeVar, Union

from ..store import StoreError

__all__ = ["ERROR_LOG_INTERVAL", "Breaker", "Health", "aguarded", "guarded"]

T = TypeVar("T")

_log = logging.getLogger("limiter.stores")


#: Seconds between two ERROR records of one store: a store that flaps (a full
#: Redis under ``noeviction`` answers denials and fails admissions) would
#: otherwise log at every switch.  The adapters' warnings follow the same rule.
ERROR_LOG_INTERVAL = 60.0


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {value!r:.100}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{what} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _cause(error: BaseException) -> str:
    """What went wrong, for the log: the backend's exception that ``error`` wraps."""
    cause = error.__cause__ or error
    return f"{type(cause).__name__}: {cause}"


class Health:
    """Logs a store's outages; used as is by a store without a fallback.

    ``failed`` logs the first failure after start, and the first after each
    recovery, at ERROR with its cause (at most one ERROR per
    ``ERROR_LOG_INTERVAL`` seconds per store); ``succeeded`` logs the recovery
    from a logged failure at WARNING.  Failures in between are not logged
    again: each still reaches its caller as ``StoreError``.  Thread-safe; a
    healthy ``succeeded`` reads one attribute.  ``guarded`` takes it in place
    of a ``Breaker``: it never skips the primary and has no fallback to serve.
    """

    serves_fallback = False

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        #: True from a failure until the next success.
        self.failing = False
        self._logged_at: Optional[float] = None  # time.monotonic() of the last ERROR
        self._announced = False  # whether the current outage was logged

    def skip_primary(self) -> bool:
        """Never: there is nothing else to ask."""
        return False

    def abandoned(self) -> None:
        """A call neither failed nor succeeded (cancelled): nothing to record."""

    def failed(self, error: BaseException) -> None:
        """Record a failure; log it when it is the first since start or since a recovery."""
        if self.failing:
            return
        with self._lock:
            if self.failing:
                return
            self.failing = True
            log = self._outage_starts()
        if log:
            _log.error("%s is failing: %s", self._name, _cause(error), exc_info=error)

    def succeeded(self) -> None:
        """Record an answer; log it when it ends a logged outage."""
        if not self.failing:
            return
        with self._lock:
            if not self.failing:
                return
            self.failing = False
            log = self._outage_ends()
        if log:
            _log.warning("%s answers again", self._name)

    def _outage_starts(self) -> bool:
        """Whether to log the outage that starts now (caller holds the lock)."""
        now = time.monotonic()
        last = self._logged_at
        self._announced = last is None or now - last >= ERROR_LOG_INTERVAL
        if self._announced:
            self._logged_at = now
        return self._announced

    def _outage_ends(self) -> bool:
        """Whether to log the end of the outage (caller holds the lock)."""
        announced, self._announced = self._announced, False
        return announced


class Breaker(Health):
    """When to skip the primary store and serve from the fallback.

    ``probe_after`` (seconds) is the first wait after a failure; each failed
    probe doubles it, up to ``max_probe_after``.  ``clock`` has ``now()`` in
    seconds (default: ``time.monotonic``); tests pass a ``ManualClock``.
    Thread-safe; the lock is held for a few attribute updates only.  Outages
    are logged as by ``Health``.
    """

    serves_fallback = True

    def __init__(
        self,
        name: str,
        probe_after: float = 0.5,
        max_probe_after: float = 30.0,
        clock: Optional[Any] = None,
    ) -> None:
        super().__init__(name)
        self._first = _seconds(probe_after, "probe_after")
        self._max = max(self._first, _seconds(max_probe_after, "max_probe_after"))
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise TypeError(f"clock must have a now() method returning seconds, got {clock!r}")
        self._now: Callable[[], float] = time.monotonic if clock is None else clock.now
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

    def failed(self, error: BaseException) -> None:
        """Record a failure of the primary (a request, or the probe).

        The first failure while healthy is logged at ERROR with its cause.
        """
        now = self._now()
        with self._lock:
            log = False
            if self._probe_at is None:
                self._wait = self._first
                log = self._outage_starts()
            elif self._probing:
                self._wait = min(self._wait * 2, self._max)
            else:
                return  # a request that was already in flight when the primary went down
            self._probing = False
            self._probe_at = now + self._wait
            wait = self._wait
        if log:
            _log.error(
                "%s is failing; the fallback store answers, probing again in %gs: %s",
                self._name,
                wait,
                _cause(error),
                exc_info=error,
            )

    def abandoned(self) -> None:
        """The probe neither failed nor succeeded (cancelled): let another caller probe."""
        with self._lock:
            self._probing = False

    def succeeded(self) -> None:
        """Record that the primary answered."""
        if self._probe_at is None:
            return
        with self._lock:
            log = self._probe_at is not None and self._outage_ends()
            self._probe_at = None
            self._probing = False
            self._wait = self._first
        if log:
            _log.warning("%s answers again; leaving the fallback store", self._name)


def guarded(
    breaker: Union[Breaker, Health, None], primary: Callable[[], T], fallback: Callable[[], T]
) -> T:
    """``primary()``, with its outcome recorded on ``breaker``; ``fallback()`` while it is down.

    Without a breaker this is just ``primary()``.  With a ``Health`` (no
    fallback store) the outcome is only recorded (and logged): a
    ``StoreError`` reaches the caller.  With a ``Breaker``, a ``StoreError``
    marks the primary down and ``fallback()`` answers; any other exception (a
    cancelled call, a bad argument) lets another caller probe, and propagates.
    """
    if breaker is None:
        return primary()
    if breaker.skip_primary():
        return fallback()
    try:
        result = primary()
    except StoreError as exc:
        breaker.failed(exc)
        if not breaker.serves_fallback:
            raise
        return fallback()
    except BaseException:
        breaker.abandoned()
        raise
    breaker.succeeded()
    return result


async def aguarded(
    breaker: Union[Breaker, Health, None],
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
        if not breaker.serves_fallback:
            raise
        return await fallback()
    except BaseException:  # cancelled: let another caller probe
        breaker.abandoned()
        raise
    breaker.succeeded()
    return result
